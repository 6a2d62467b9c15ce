"""The command line as a person uses it: real subprocesses, a real Dagster instance on Postgres storage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from invoice_pipeline.samples import generate_samples
from invoice_pipeline_tests.support import free_port


def cli(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoice_pipeline.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def env(tmp_path: Path, database_url: str) -> dict[str, str]:
    return dict(
        os.environ, INVOICE_PIPELINE_HOME=str(tmp_path / "home"), INVOICE_PIPELINE_DATABASE_URL=database_url
    )


def test_ingest_process_status_show_on_generated_samples(
    env: dict[str, str], tmp_path: Path, database_url: str
) -> None:
    samples = generate_samples(tmp_path / "samples", count=8, seed=3)
    files = [str(f.path) for f in samples.files]
    ingest = cli("ingest", *files, "--org", "acme", env=env)
    assert ingest.returncode == 0, ingest.stderr
    identical = [f for f in samples.files if f.note == "byte-identical re-send"]
    assert f"{len(files) - len(identical)} new invoice(s), {len(identical)} already known" in ingest.stdout

    processed = cli("process", "--batch-size", "10", env=env)
    assert processed.returncode == 0, processed.stderr
    assert "processing [" in processed.stderr

    status = json.loads(cli("status", "--json", env=env).stdout)
    assert status["locks_held"] == 0
    assert set(status["by_status"]) <= {"processed", "quarantined"}, status["by_status"]

    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT i.id, i.source_filename, i.status, i.quarantine_code, i.duplicate_status, o.source_filename"
            " FROM invoices i LEFT JOIN invoices o ON o.id = i.duplicate_of"
        ).fetchall()
        postings = conn.execute("SELECT count(*), count(DISTINCT invoice_id) FROM ledger_postings").fetchone()
    by_name = {r[1]: r for r in rows}
    for sample in samples.files:
        if sample in identical:
            assert sample.name not in by_name, "a byte-identical re-send is the same invoice"
            continue
        _, _, status_, code, dup, original = by_name[sample.name]
        if sample.quarantine_code:
            assert (status_, code) == ("quarantined", sample.quarantine_code), sample.name
        elif sample.duplicate_of:
            assert (status_, dup, original) == ("processed", "duplicate", sample.duplicate_of), sample.name
        else:
            assert (status_, dup) == ("processed", "original"), sample.name
    assert postings is not None and postings[0] == postings[1]

    some_id = str(rows[0][0])
    shown = json.loads(cli("show", some_id, "--json", env=env).stdout)
    assert shown["invoice"]["invoice_id"] == some_id and len(shown["attempts"]) == 1
    assert "attempts:" in cli("show", some_id, env=env).stdout

    with psycopg.connect(database_url.rsplit("/", 1)[0] + "/postgres") as conn:
        dagster_db = database_url.rsplit("/", 1)[1] + "_dagster"
        assert conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dagster_db,)).fetchone()
    with psycopg.connect(database_url.rsplit("/", 1)[0] + "/" + dagster_db) as conn:
        runs = conn.execute(
            "SELECT count(*) FROM runs WHERE status = 'SUCCESS' OR status = 'FAILURE'"
        ).fetchone()
    assert runs is not None and runs[0] >= 1, "the runs live in the Dagster instance's Postgres storage"
    _drop(database_url, dagster_db)


def _drop(database_url: str, name: str) -> None:
    with psycopg.connect(database_url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_embedded_server_outlives_its_starter_and_is_shared(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "INVOICE_PIPELINE_DATABASE_URL"}
    env.update(INVOICE_PIPELINE_HOME=str(tmp_path / "home"), INVOICE_PIPELINE_PG_PORT=str(free_port()))
    try:
        started = cli("db", "start", env=env)
        assert started.returncode == 0 and "embedded PostgreSQL running" in started.stdout, started.stderr
        assert cli("db", "status", env=env).stdout.startswith("running"), (
            "it outlived the process that started it"
        )
        url = cli("db", "url", env=env).stdout.strip()
        assert url.startswith("postgresql://postgres@127.0.0.1:") and url.endswith("/invoice_pipeline")
        migrated = cli("migrate", env=env)
        assert "up to date" in migrated.stdout, migrated.stderr
        with psycopg.connect(url) as conn:
            listen = conn.execute("SHOW listen_addresses").fetchone()
        assert listen == ("127.0.0.1",), "loopback only by default"
        assert (tmp_path / "home" / "pgdata" / f".s.PGSQL.{url.split(':')[2].split('/')[0]}").exists(), (
            "and a socket in the data dir"
        )
        assert cli("db", "start", env=env).returncode == 0, "a second start attaches"
    finally:
        stopped = cli("db", "stop", env=env)
    assert stopped.stdout.strip() == "stopped"
    assert cli("db", "status", env=env).returncode == 3


@pytest.mark.parametrize(
    "url, message",
    [
        ("mysql://x@localhost/db", "must start with postgresql://"),
        ("postgresql://x@localhost:99999/db", "invalid port"),
        ("postgresql://x@localhost", "must name a database"),
    ],
)
def test_malformed_database_url_is_refused_before_any_sql(tmp_path: Path, url: str, message: str) -> None:
    env = dict(os.environ, INVOICE_PIPELINE_HOME=str(tmp_path), INVOICE_PIPELINE_DATABASE_URL=url)
    result = cli("status", env=env)
    assert result.returncode == 2 and message in result.stderr
    assert not (tmp_path / "pgdata").exists(), "nothing embedded was started either"


def test_bad_arguments_get_clear_errors(env: dict[str, str]) -> None:
    shown = cli("show", "not-a-uuid", env=env)
    assert shown.returncode == 2 and "invoice_id must be a UUID" in shown.stderr
    missing = cli("ingest", "/no/such/file.pdf", env=env)
    assert missing.returncode == 2 and "no such file or folder" in missing.stderr
