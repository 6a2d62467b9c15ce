"""The resources of each deployment, picked by name (orchestration/resources/deployments.py)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from dagster import EnvVar

from invoice_pipeline.config import (
    ENV_DATABASE_URL,
    ENV_DEPLOYMENT,
    ENV_HOME,
    ENV_INBOX,
    ENV_LOCK_TTL,
    ENV_REVIEW_USERS,
    ConfigError,
    Settings,
)
from invoice_pipeline.orchestration.resources import InvoiceDatabase, ReviewAccess, deployment

URL = "postgresql://invoices@db.example:5432/invoices"


def invoice_db(resources: dict[str, object]) -> InvoiceDatabase:
    db = resources["invoice_db"]
    assert isinstance(db, InvoiceDatabase)
    return db


def test_local_is_the_default_and_needs_no_setup(tmp_path: Path) -> None:
    chosen = deployment(Settings.from_env({"INVOICE_PIPELINE_HOME": str(tmp_path)}))
    db = invoice_db(chosen.resources)
    assert chosen.name == "local"
    assert set(chosen.resources) == {"invoice_db", "document_reader", "review_access"}
    assert chosen.resources["review_access"] == ReviewAccess(deployment="local", users_file="")
    # The embedded server, and the inbox under the home: nothing to set up.
    assert db.database_url is None and db.inbox_path == tmp_path / "inbox"


def test_the_environment_configures_the_resources_and_the_url_stays_a_variable(tmp_path: Path) -> None:
    env = {
        ENV_DEPLOYMENT: "production",
        ENV_DATABASE_URL: URL,
        ENV_INBOX: str(tmp_path / "drop"),
        "INVOICE_PIPELINE_BATCH_SIZE": "40",
        "INVOICE_PIPELINE_REVIEW_JOBS": "0",
    }
    chosen = deployment(Settings.from_env(env))
    db = invoice_db(chosen.resources)
    assert chosen.name == "production" and not chosen.settings.review_jobs
    # Dagster keeps the variable's name, never the URL and its password.
    assert db.database_url == EnvVar(ENV_DATABASE_URL)
    assert db.batch_size == 40 and db.inbox_path == tmp_path / "drop"
    # The Launchpad review jobs' check: this deployment, and no users file.
    assert chosen.resources["review_access"] == ReviewAccess(deployment="production", users_file="")
    users = tmp_path / "users.json"
    chosen = deployment(Settings.from_env(env | {ENV_REVIEW_USERS: str(users)}))
    assert chosen.resources["review_access"] == ReviewAccess(deployment="production", users_file=str(users))


def test_production_refuses_to_load_without_a_database_url() -> None:
    with pytest.raises(ConfigError, match=ENV_DATABASE_URL):
        deployment(Settings.from_env({ENV_DEPLOYMENT: "production"}))


def test_an_unknown_deployment_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="local, production"):
        deployment(Settings.from_env({ENV_DEPLOYMENT: "staging"}))


def test_the_lease_ttl_walks_from_the_settings_to_the_store_the_resource_opens(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read once (Settings), configured into the resource (Dagster's config holds it), set once
    in the store it opens: the sweep, the claims and the timeouts use the store's."""
    monkeypatch.setenv(ENV_DATABASE_URL, database_url)  # what Dagster resolves the EnvVar from
    settings = Settings.from_env({ENV_DATABASE_URL: database_url, ENV_LOCK_TTL: "12"})
    db = invoice_db(deployment(settings).resources)
    assert db.lock_ttl_seconds == 12
    assert db.store.lock_ttl == timedelta(seconds=12)  # (its pool is closed after each test)
    # The idle-in-transaction timeout stays under it: half of it, here.
    assert db.store.database.idle_in_transaction_ms == 6000


def test_the_embedded_server_the_resource_opens_is_its_configuration_not_the_environment(
    tmp_path: Path,
) -> None:
    """A run worker finds the embedded server from the resource's configuration (the home, its
    port, listen address and database), never from its own environment at first use."""
    settings = Settings.from_env({ENV_HOME: str(tmp_path / "home"), "INVOICE_PIPELINE_PG_PORT": "54444"})
    db = invoice_db(deployment(settings).resources)
    where = db.store_settings
    assert where.database_url is None and where.pgdata == settings.pgdata
    assert (where.pg_port, where.pg_listen, where.database_name) == (
        54444,
        settings.pg_listen,
        settings.database_name,
    )
    assert where.lock_ttl == settings.lock_ttl
