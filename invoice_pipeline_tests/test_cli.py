"""The command line as a person uses it: real subprocesses, a real Dagster instance on Postgres storage."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql

from invoice_pipeline.db.embedded import EmbeddedPostgres
from invoice_pipeline.domain.review import SUSPECTED_DUPLICATE
from invoice_pipeline.samples import generate_samples
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import free_port, run_cli

cli = run_cli


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
    # The team's vendor master first, as `make demo` does: page-read invoices of these sellers
    # are confirmed by the VAT id they print.
    master = tmp_path / "vendor-master.csv"
    master.write_text(samples.vendor_master_csv())
    imported = cli("vendors", "import", "--org", "acme", str(master), env=env)
    assert imported.returncode == 0 and "vendor(s) registered" in imported.stdout, imported.stderr
    ingest = cli("ingest", *files, "--org", "acme", env=env)
    assert ingest.returncode == 0, ingest.stderr
    identical = [f for f in samples.files if f.note == "byte-identical re-send"]
    assert f"{len(files) - len(identical)} new invoice(s), {len(identical)} already known" in ingest.stdout

    # One worker: the copies are decided in the order they were ingested, so the first of each
    # set is its original. (Workers running at once decide in the order they get there, as the
    # sensor's concurrent runs do: then a later copy may be the original.)
    processed = cli("process", "--batch-size", "10", "--workers", "1", env=env)
    # The samples include broken files: quarantined invoices make `process` exit 1.
    assert processed.returncode == (1 if any(f.quarantine_code for f in samples.files) else 0), (
        processed.stderr
    )
    assert "processing [" in processed.stderr

    status = json.loads(cli("status", "--json", env=env).stdout)
    assert status["locks_held"] == 0
    assert set(status["by_status"]) <= {"processed", "quarantined", "needs_review"}, status["by_status"]

    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT i.id, i.source_filename, i.status, i.quarantine_code, i.duplicate_status, o.source_filename"
            " FROM invoices i LEFT JOIN invoices o ON o.id = i.duplicate_of"
        ).fetchall()
        postings = conn.execute("SELECT count(*), count(DISTINCT invoice_id) FROM ledger_postings").fetchone()
        reasons_of = {
            name: " ".join(reasons or [])
            for name, reasons in conn.execute("SELECT source_filename, review_reasons FROM invoices")
        }
        unvendored = conn.execute("SELECT count(*) FROM ledger_postings WHERE vendor_id IS NULL").fetchone()
    assert unvendored == (0,), "every posting names its vendor"
    by_name = {r[1]: r for r in rows}
    for sample in samples.files:
        if sample in identical:
            assert sample.name not in by_name, "a byte-identical re-send is the same invoice"
            continue
        _, _, status_, code, dup, original = by_name[sample.name]
        if sample.quarantine_code:
            assert (status_, code) == ("quarantined", sample.quarantine_code), sample.name
        elif sample.duplicate_of and sample.review == SUSPECTED_DUPLICATE:
            assert (status_, dup, original) == ("needs_review", "suspected", sample.duplicate_of), sample.name
        elif sample.duplicate_of:
            assert (status_, dup, original) == ("processed", "duplicate", sample.duplicate_of), sample.name
        elif sample.review:
            # Held at validation (a field a person types), it is not compared for duplicates yet.
            checked = None if sample.fails_at == "validate" else "original"
            assert (status_, dup) == ("needs_review", checked), sample.name
            assert sample.review in reasons_of[sample.name], (sample.name, reasons_of[sample.name])
        else:
            assert (status_, dup) == ("processed", "original"), sample.name
    assert postings is not None and postings[0] == postings[1]

    some_id = str(rows[0][0])
    shown = json.loads(cli("show", some_id, "--json", env=env).stdout)
    assert shown["invoice"]["invoice_id"] == some_id and len(shown["attempts"]) == 1
    text = cli("show", some_id, "--ui-url", "http://ui.example:3000/", env=env).stdout
    run_id = shown["attempts"][0]["owner"].removeprefix("dagster-run:")
    assert (
        "attempts (each time the invoice's lock was taken" in text
        and f"Dagster run {run_id}: http://ui.example:3000/runs/{run_id}" in text
    )

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
        printed = cli("db", "url", env=env).stdout
        assert printed.count("\n") == 1, "only the URL, even when the server has to be started"
        url = printed.strip()
        assert url.startswith("postgresql://postgres@127.0.0.1:") and url.endswith("/invoice_pipeline")
        migrated = cli("migrate", env=env)
        assert "up to date" in migrated.stdout, migrated.stderr
        with psycopg.connect(url, passfile=str(tmp_path / "home" / "pgpass")) as conn:
            listen = conn.execute("SHOW listen_addresses").fetchone()
        assert listen == ("127.0.0.1",), "loopback only by default"
        port = int(url.split(":")[2].split("/")[0])
        data_dir = EmbeddedPostgres(tmp_path / "home" / "pgdata", port).pgdata  # elsewhere as root
        assert (data_dir / f".s.PGSQL.{port}").exists(), "and a socket in the data dir"
        assert cli("db", "start", env=env).returncode == 0, "a second start attaches"
    finally:
        stopped = cli("db", "stop", env=env)
    assert stopped.stdout.strip() == "stopped"
    assert cli("db", "status", env=env).returncode == 3
    EmbeddedPostgres(tmp_path / "home" / "pgdata", free_port()).destroy()


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


# -- the contract: a clear error and exit code 2 before any SQL runs ------------------------------


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """stderr holds exactly one line, and it is no traceback."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    "query, message",
    [
        ("sslmode=bogus", "sslmode must be one of"),
        ("connect_timeout=abc", "bad value for connect_timeout"),
        ("no_such_parameter=1", 'invalid URI query parameter: "no_such_parameter"'),
        ("keepalives=often", "keepalives must be an integer"),
    ],
)
def test_url_parameters_libpq_refuses_are_refused_in_one_line_before_any_sql(
    tmp_path: Path, database_url: str, query: str, message: str
) -> None:
    url = f"{database_url}?{query}"
    env = dict(os.environ, INVOICE_PIPELINE_HOME=str(tmp_path), INVOICE_PIPELINE_DATABASE_URL=url)
    result = cli("status", env=env)
    assert result.returncode == 2
    assert message in one_line_error(result)


def test_a_password_in_a_bad_url_is_never_echoed(tmp_path: Path) -> None:
    password = "hunter 2"  # made up; the URL is built so the repository holds no URL with a password
    url = f"postgresql://u:{quote(password)}@localhost/db?application_name={password}"
    env = dict(os.environ, INVOICE_PIPELINE_HOME=str(tmp_path), INVOICE_PIPELINE_DATABASE_URL=url)
    result = cli("status", env=env)
    assert result.returncode == 2 and password not in one_line_error(result)


def test_an_unreachable_server_is_one_line_and_exit_3(tmp_path: Path) -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/invoices?connect_timeout=2"
    env = dict(os.environ, INVOICE_PIPELINE_HOME=str(tmp_path), INVOICE_PIPELINE_DATABASE_URL=url)
    result = cli("status", env=env)
    assert result.returncode == 3
    assert one_line_error(result).startswith("invoice-pipeline: cannot reach the database:")


def test_a_missing_database_is_one_line_and_exit_3(tmp_path: Path, database_url: str) -> None:
    url = database_url.rsplit("/", 1)[0] + "/no_such_database_here"
    env = dict(os.environ, INVOICE_PIPELINE_HOME=str(tmp_path), INVOICE_PIPELINE_DATABASE_URL=url)
    result = cli("ingest", __file__, env=env)
    assert result.returncode == 3
    assert 'database "no_such_database_here" does not exist' in one_line_error(result)


def migrated(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
    return bool(row and row[0])


def test_show_refuses_a_non_uuid_before_migrating_anything(tmp_path: Path, empty_database_url: str) -> None:
    env = dict(
        os.environ, INVOICE_PIPELINE_HOME=str(tmp_path), INVOICE_PIPELINE_DATABASE_URL=empty_database_url
    )
    result = cli("show", "not-a-uuid", env=env)
    assert result.returncode == 2 and "invoice_id must be a UUID" in result.stderr
    assert not migrated(empty_database_url), "refused before any SQL ran"


@pytest.mark.parametrize(
    "args",
    [("process", "--batch-size", "0"), ("samples", "OUT", "--count", "-1"), ("demo", "--count", "0")],
)
def test_impossible_numbers_are_refused_before_any_work(
    tmp_path: Path, empty_database_url: str, args: tuple[str, ...]
) -> None:
    env = dict(
        os.environ, INVOICE_PIPELINE_HOME=str(tmp_path), INVOICE_PIPELINE_DATABASE_URL=empty_database_url
    )
    result = cli(*[str(tmp_path / a) if a == "OUT" else a for a in args], env=env)
    assert result.returncode == 2 and "must be at least 1" in result.stderr, result.stderr
    assert not migrated(empty_database_url)
    assert not (tmp_path / "OUT").exists() and not (tmp_path / "dagster_home").exists()


def test_ingest_stores_nothing_when_any_argument_is_bad(
    env: dict[str, str], tmp_path: Path, database_url: str
) -> None:
    good = tmp_path / "good.json"
    good.write_bytes(json_invoice())
    result = cli("ingest", str(good), str(tmp_path / "missing.json"), env=env)
    assert result.returncode == 2 and "missing.json" in one_line_error(result)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM invoices").fetchone() == (0,)
    blank_org = cli("ingest", str(good), "--org", " ", env=env)
    assert blank_org.returncode == 2 and "blank" in one_line_error(blank_org)


@pytest.fixture
def dagster_database_dropped(database_url: str) -> Iterator[None]:
    """`process` creates `<db>_dagster` beside the test database; drop it however the test ends."""
    yield
    _drop(database_url, database_url.rsplit("/", 1)[1] + "_dagster")


@pytest.mark.usefixtures("dagster_database_dropped")
def test_process_exit_code_says_whether_invoices_failed(env: dict[str, str], tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_bytes(json_invoice("OK-1"))
    assert cli("ingest", str(good), env=env).returncode == 0
    clean = cli("process", env=env)
    assert clean.returncode == 0, clean.stderr
    assert "processed 1" in clean.stdout

    broken = tmp_path / "broken.json"
    broken.write_bytes(b'{"format_version": 1, "invoice_number": ')
    assert cli("ingest", str(broken), env=env).returncode == 0
    failed = cli("process", env=env)
    assert failed.returncode == 1, failed.stderr
    assert "quarantined 1" in failed.stdout and "were quarantined, failed or need attention" in failed.stderr


@pytest.mark.usefixtures("dagster_database_dropped")
def test_a_backlog_worked_by_several_processes_posts_each_invoice_once(
    env: dict[str, str], tmp_path: Path, database_url: str
) -> None:
    folder = tmp_path / "backlog"
    folder.mkdir()
    for i in range(15):
        (folder / f"b{i:02d}.json").write_bytes(json_invoice(f"B-{i:02d}", total=f"{100 + i}.00"))
    assert cli("ingest", str(folder), env=env).returncode == 0
    # Runs of 5 over three forked workers, whatever this machine's core count.
    processed = cli("process", "--batch-size", "5", "--workers", "3", env=env)
    assert processed.returncode == 0, processed.stderr
    assert "processed 15; 3 run(s), 0 with a failing branch" in processed.stdout
    with psycopg.connect(database_url) as conn:
        postings = conn.execute("SELECT count(*), count(DISTINCT invoice_id) FROM ledger_postings").fetchone()
        locks = conn.execute("SELECT count(*) FROM processing_jobs WHERE status = 'running'").fetchone()
    assert postings == (15, 15) and locks == (0,)


def test_db_url_prints_only_the_url_on_stdout(env: dict[str, str], database_url: str) -> None:
    result = cli("db", "url", env=env)
    assert result.returncode == 0
    assert result.stdout == database_url + "\n", "nothing but the URL: $(invoice-pipeline db url) must work"
    assert "external database" in result.stderr
