"""Test-only helpers; the ones benchmarks and chaos scenarios share live in pipeline_support.helpers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from uuid import UUID
from xml.etree import ElementTree

import psycopg

from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.conftest import ROOT
from pipeline_support.exports import process_invoices

# What a test of a small suite reads from its report, by test name: (outcome, message).
SUITE_VERDICTS = ("failure", "error", "skipped")


def run_plugin_suite(
    tmp_path: Path, plugin: str, suite: str, env: Mapping[str, str]
) -> dict[str, tuple[str, str]]:
    """`suite` (a test file's text) run by a pytest of its own with only this project's `plugin`
    loaded, in `env`: each test's outcome (passed, failure, error or skipped) and its message."""
    (tmp_path / "test_suite.py").write_text(suite)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    # Only this plugin: the installed ones (hypothesis, xdist, Dagster's ...) cost seconds to load.
    env = dict(env) | {"PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", plugin, "-p", "no:cacheprovider",
         "-W", "ignore::pytest.PytestUnknownMarkWarning", "--junitxml", "report.xml", "test_suite.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (tmp_path / "report.xml").exists(), done.stdout + done.stderr
    outcomes: dict[str, tuple[str, str]] = {}
    for case in ElementTree.parse(tmp_path / "report.xml").iter("testcase"):
        verdicts = [(child.tag, child.get("message", "")) for child in case if child.tag in SUITE_VERDICTS]
        outcomes[case.get("name", "")] = verdicts[0] if verdicts else ("passed", "")
    return outcomes


def sweep_now(database_url: str, invoice_id: UUID | None = None, ttl: timedelta = timedelta(0)) -> int:
    """The sweep (all leases, or the invoice's) as a store whose lease TTL is `ttl` runs it; 0:
    every running lease is stale. A test's holder "dies" without waiting out the store's TTL."""
    sweeper = InvoiceStore(database_url, max_size=1, lock_ttl=ttl)
    try:
        return sweeper.maintenance.release_stale_locks(invoice_id)
    finally:
        sweeper.close()


def db_seconds_since(url: str, ts_sql: str, params: tuple[object, ...] = ()) -> float:
    """Seconds between a timestamp in the database and the database clock now."""
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT extract(epoch FROM clock_timestamp() - ({ts_sql}))", params).fetchone()  # noqa: S608
        assert row is not None
        return float(row[0])


@dataclass(frozen=True)
class Outcome:
    """What became of some invoices (all of the database's, without ids)."""

    statuses: dict[str, int]
    postings: int
    posted_invoices: int  # distinct invoices with a posting: postings - this = posted twice
    running_leases: int


def outcome(url: str, ids: list[str] | None = None) -> Outcome:
    # Constant SQL text per case; the ids go as a parameter.
    invoices = "true" if ids is None else "id = ANY(%(ids)s::uuid[])"
    scope = "true" if ids is None else "invoice_id = ANY(%(ids)s::uuid[])"
    params = {"ids": ids}
    with psycopg.connect(url) as conn:
        statuses = dict(
            conn.execute(
                f"SELECT status, count(*) FROM invoices WHERE {invoices} GROUP BY 1",  # noqa: S608
                params,
            ).fetchall()
        )
        posted = conn.execute(
            f"SELECT count(*), count(DISTINCT invoice_id) FROM ledger_postings WHERE {scope}",  # noqa: S608
            params,
        ).fetchone()
        running = conn.execute(
            f"SELECT count(*) FROM processing_jobs WHERE status = 'running' AND {scope}",  # noqa: S608
            params,
        ).fetchone()
    assert posted is not None and running is not None
    return Outcome(statuses, posted[0], posted[1], running[0])


def process_now(store: InvoiceStore, ids: list[UUID], owner: str = "test") -> None:
    """Claim the invoices as one chunk and take them through every stage, in this process, with
    the real document reader (no Dagster): what a run does, for tests that need processed data."""
    process_invoices(store, ids, owner)
