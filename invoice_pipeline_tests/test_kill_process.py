"""kill -9 `invoice-pipeline process` at random moments: no invoice is stranded for the request timeout.

A killed `process` leaves requests its run never claimed, leases nobody heartbeats and a run
that still says STARTED. One sweep must free all of it, so one sweep + process round finishes
everything, with the request timeout at its default hour. Time is simulated where only the
clock matters: the dead leases' heartbeats are back-dated (the lease TTL), as are the open
requests by a few seconds (the grace for a run that never appeared), never by the hour.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dagster import DagsterInstance, RunsFilter

from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.dagster_home import dagster_database_url
from invoice_pipeline.orchestration.maintenance import LAUNCHED, _seconds_since_last_event
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import cli_environment, wait_for

TTL_SECONDS = 2
INVOICES = 48
BATCH = 5
KILLS = 8
MAX_ROUNDS = 5
SEED = 11


@dataclass(frozen=True)
class KillPoint:
    kind: str  # requested | claimed | finished
    n: int


@pytest.fixture
def env(tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    # This process opens the same Dagster instance as the CLI, to see its runs.
    monkeypatch.setenv("DAGSTER_PG_URL", dagster_database_url(database_url))
    with cli_environment(
        tmp_path / "home",
        database_url,
        INVOICE_PIPELINE_LOCK_TTL_SECONDS=str(TTL_SECONDS),
        INVOICE_PIPELINE_HEARTBEAT_SECONDS="1",
        INVOICE_PIPELINE_RETRY_BASE_SECONDS="0",
        # Dead-lettering is another feature: here every invoice must end processed.
        INVOICE_PIPELINE_MAX_ATTEMPTS="50",
    ) as values:
        yield values


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoice_pipeline.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def scalar(database_url: str, query: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


REQUESTED = "SELECT count(*) FROM invoices WHERE requested_at IS NOT NULL AND status IN ('pending', 'failed')"
HELD = "SELECT count(*) FROM processing_jobs WHERE status = 'running'"
PROCESSED = "SELECT count(*) FROM invoices WHERE status = 'processed'"
# What a new `process` would request (claims.sql, claim_due_invoices, with its hour's timeout).
REQUESTABLE = (
    "SELECT count(*) FROM invoices WHERE status IN ('pending', 'failed') AND next_attempt_at <= now()"
    " AND requested_at IS NULL"
)


def condition(conn: psycopg.Connection[Any], point: KillPoint) -> Callable[[], bool]:
    """The moment to kill at, counted from now: earlier kills left their own requests and leases.
    Polled every 5 ms on one open connection (autocommit: each poll sees the latest commits), not
    a new one per poll: a connection per poll kept a backend forking beside the process watched."""
    query = {"requested": REQUESTED, "claimed": HELD, "finished": PROCESSED}[point.kind]

    def count() -> int:
        row = conn.execute(query).fetchone()
        assert row is not None
        return int(row[0])

    before = count()
    return lambda: count() >= before + point.n


def stranded(database_url: str) -> tuple[int, int]:
    return scalar(database_url, REQUESTED), scalar(database_url, HELD)


def unfinished(database_url: str) -> int:
    return scalar(database_url, "SELECT count(*) FROM invoices WHERE status <> 'processed'")


def stranded_detail(database_url: str, dagster_home: Path) -> list[str]:
    """What a failure needs to be understood: the unfinished invoices, their requests, the runs."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT id, status, requested_by, requested_at, attempts, next_attempt_at, last_error "
            "FROM invoices WHERE status <> 'processed'"
        ).fetchall()
    with DagsterInstance.from_config(str(dagster_home)) as instance:
        runs = [f"run {r.run_id} {r.status.value} {r.tags}" for r in instance.get_runs()]
    return [f"unfinished {row}" for row in rows] + runs


def kill_process_at(env: dict[str, str], database_url: str, point: KillPoint) -> str:
    """Start `invoice-pipeline process` and SIGKILL it the moment the database shows `point`."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        return kill_process_when(env, condition(conn, point), BATCH, str(point))


def kill_process_when(env: dict[str, str], reached: Callable[[], bool], batch_size: int, what: str) -> str:
    """Start `invoice-pipeline process --batch-size N` and SIGKILL it the moment `reached()`:
    "killed", or why it could not be (it had exited first)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "invoice_pipeline.cli", "process", "--batch-size", str(batch_size)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(
            lambda: proc.poll() is not None or reached(),
            timeout=300,
            interval=0.005,
            what=f"process to reach {what}",
        )
    finally:
        exited = proc.poll()
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
    return "killed" if exited is None else f"had exited ({exited}) before the kill"


def test_kill_9_of_process_at_random_moments_strands_nothing_past_one_sweep(
    database_url: str, store: InvoiceStore, env: dict[str, str], tmp_path: Path
) -> None:
    for i in range(INVOICES):
        store.documents.store_document(
            json_invoice(f"K-{i:04d}", total=f"{100 + 7 * i}.00"), "acme", f"k{i}.json"
        )
    rng = random.Random(SEED)
    points = [KillPoint("requested", 1)] * 3
    points += [KillPoint("claimed", rng.randint(1, BATCH)) for _ in range(3)]
    points += [KillPoint("finished", rng.randint(1, BATCH)) for _ in range(KILLS - 6)]
    rng.shuffle(points)

    report: list[str] = []
    for point in points:
        if scalar(database_url, REQUESTABLE) == 0:
            # Everything is stranded or processed: a process started now would find nothing to
            # request and exit before any kill (so did the last ones of 8, ~4 s each).
            report.append(f"{point.kind}>={point.n}: not run, nothing left to request")
            continue
        outcome = kill_process_at(env, database_url, point)
        report.append(
            f"{point.kind}>={point.n}: {outcome}; stranded (requested, held) = {stranded(database_url)}"
        )
    stranded_after_kills = stranded(database_url)
    assert stranded_after_kills[0] > 0, f"the kills left unclaimed requests to recover: {report}"

    # The clock, simulated: the dead holders' leases are past the TTL, and so are the requests
    # (by seconds: far from the hour the old request timeout needed). A run killed before it
    # claimed anything is judged by Dagster's own record of its last event: wait out the 2 s.
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "UPDATE processing_jobs SET heartbeat_at = heartbeat_at - interval '1 hour' WHERE status = 'running'"
        )
        conn.execute(
            "UPDATE invoices SET requested_at = requested_at - make_interval(secs => %s) "
            "WHERE requested_at IS NOT NULL",
            (TTL_SECONDS + 1,),
        )
    with DagsterInstance.from_config(str(tmp_path / "home" / "dagster_home")) as instance:
        # Killed between creating its run and starting it, a run says NOT_STARTED or STARTING.
        started = instance.get_runs(filters=RunsFilter(statuses=LAUNCHED))
        wait_for(
            lambda: all(_seconds_since_last_event(instance, r.run_id) > TTL_SECONDS for r in started),
            timeout=60,
            interval=0.1,
            what="the killed runs to be silent past the lock TTL",
        )

    rounds = 0
    while unfinished(database_url) and rounds < MAX_ROUNDS:
        rounds += 1
        swept = cli(env, "sweep")
        assert swept.returncode == 0, swept.stderr[-2000:]
        report.append(f"round {rounds} sweep: {swept.stdout.strip()}")
        processed = cli(env, "process", "--batch-size", str(BATCH))
        report.append(f"round {rounds} process: rc {processed.returncode}, {processed.stdout.strip()}")
        report.append(f"round {rounds}: unfinished {unfinished(database_url)}")
    print("\n".join(report))
    assert unfinished(database_url) == 0, report + stranded_detail(
        database_url, tmp_path / "home" / "dagster_home"
    )
    assert rounds == 1, f"one sweep frees everything the kills stranded: {report}"
    with psycopg.connect(database_url) as conn:
        postings = conn.execute("SELECT count(*), count(DISTINCT invoice_id) FROM ledger_postings").fetchone()
        running = conn.execute("SELECT count(*) FROM processing_jobs WHERE status = 'running'").fetchone()
    assert postings == (INVOICES, INVOICES), "every invoice posted exactly once"
    assert running == (0,)
