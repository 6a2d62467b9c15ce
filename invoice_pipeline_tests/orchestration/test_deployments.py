"""The resources of each deployment, picked by name (orchestration/resources/deployments.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import EnvVar

from invoice_pipeline.config import (
    ENV_DATABASE_URL,
    ENV_DEPLOYMENT,
    ENV_INBOX,
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
