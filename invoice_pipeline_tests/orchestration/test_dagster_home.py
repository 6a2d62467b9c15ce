from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from invoice_pipeline.config import Settings
from invoice_pipeline.orchestration.dagster_home import dagster_database_url, prepare_dagster_home
from pipeline_support.helpers import drop_database


def test_dagster_storage_url_names_psycopg2_and_its_own_database() -> None:
    url = "postgresql://app:s3cret@db.internal:5433/invoices"
    assert dagster_database_url(url) == "postgresql+psycopg2://app:s3cret@db.internal:5433/invoices_dagster"
    assert dagster_database_url(url, "deployment_b").endswith("@db.internal:5433/deployment_b")


def test_dagster_yaml_carries_no_url_and_the_database_exists(
    tmp_path: Path, database_url: str, server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    monkeypatch.setenv("INVOICE_PIPELINE_DAGSTER_DATABASE_NAME", "ip_test_dagster_custom")
    settings = Settings.from_env()
    home = prepare_dagster_home(settings, database_url)
    try:
        text = (home / "dagster.yaml").read_text()
        assert "env: DAGSTER_PG_URL" in text and "postgres@" not in text, "no URL, so no password, on disk"
        assert "telemetry:\n  enabled: false" in text and "nux:\n  enabled: false" in text
        assert os.environ["DAGSTER_PG_URL"].endswith("/ip_test_dagster_custom")
        assert os.environ["DAGSTER_PG_URL"].startswith("postgresql+psycopg2://")
        with psycopg.connect(server_url) as conn:
            assert conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = 'ip_test_dagster_custom'"
            ).fetchone()
        # Created with the database, before any worker forks: its tables and the one run
        # storage id every request owner is scoped by (two workers racing made two).
        dagster_db = server_url.rsplit("/", 1)[0] + "/ip_test_dagster_custom"
        with psycopg.connect(dagster_db) as conn:
            assert conn.execute("SELECT count(*) FROM instance_info").fetchone() == (1,)
    finally:
        drop_database(server_url, server_url.rsplit("/", 1)[0] + "/ip_test_dagster_custom")
        os.environ.pop("DAGSTER_PG_URL", None)
