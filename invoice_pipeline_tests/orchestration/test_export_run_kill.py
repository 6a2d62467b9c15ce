"""kill -9 of a Dagster delivery run (issue 56 item 5): `dagster job execute ... -j
deliver_exports` in its own process group against a real DagsterInstance (a temp DAGSTER_HOME),
the real code location's op and resources, killed at a point it was seen to reach:

- the receiver answered every request of a batch and the run's commit waits on a row lock the
  test holds (seen with pg_blocking_pids), in the first batch or a later one;
- mid-batch: the receiver accepted the batch's first request(s) and holds the next unanswered.

Then what operations would do: the sweep (the schedule's pass) frees the dead run's export
leases (back-dated, not waited for) and marks the run failed, so exports_due_sensor asks for a
new run, which delivers. At the end every posting reached the webhook at least once and was
booked exactly once by its Idempotency-Key (the receiver counts), every row is delivered to both
targets, and each DATEV batch is one file whose bytes did not change. docs/reliability.md
records the trial counts."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from dagster import DagsterInstance, DagsterRunStatus, EventLogEntry, build_sensor_context

from invoice_pipeline.engine.export_records import ExportTarget
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.definitions import make_definitions
from invoice_pipeline.orchestration.export_jobs import DELIVER_EXPORTS, exports_due_sensor
from invoice_pipeline.orchestration.maintenance import run_maintenance
from invoice_pipeline.orchestration.resources import InvoiceDatabase
from invoice_pipeline.samples.receiver import WebhookReceiver
from invoice_pipeline_tests.engine.exports.helpers import (
    SECRET,
    age_export_leases,
    datev_target,
    export_ids,
    post_invoices,
    posting_ids,
    sql,
    statuses,
    webhook_target,
)
from invoice_pipeline_tests.factories import pipeline_resources
from pipeline_support.helpers import wait_for

POSTINGS = 7
BATCH = 3
DAGSTER = Path(sys.executable).parent / "dagster"


@dataclass(frozen=True)
class KillPoint:
    script: tuple[str, ...]  # the receiver's answers, request by request (then 200)
    commit_blocked: bool  # True: killed while the batch's commit waits on the test's row lock
    requests_at_kill: int
    resent: int  # requests accepted before the kill whose batch was not committed


KILL_POINTS = {
    "answered-commit-blocked-first-batch": KillPoint(("hold",), True, 3, 3),
    "answered-commit-blocked-later-batch": KillPoint(("200", "200", "200", "hold"), True, 6, 3),
    "mid-batch-first-batch": KillPoint(("200", "hang"), False, 2, 1),
    "mid-batch-later-batch": KillPoint(("200", "200", "200", "200", "200", "hang"), False, 6, 2),
}


def start_run(database_url: str, home: Path) -> subprocess.Popen[bytes]:
    """The delivery job as `dagster job execute` runs it: the code location's definitions, its
    resources from the environment, the run in this process (the job's in-process executor)."""
    env = dict(
        os.environ,
        DAGSTER_HOME=str(home / "dagster"),
        INVOICE_PIPELINE_HOME=str(home),
        INVOICE_PIPELINE_DATABASE_URL=database_url,
    )
    env.pop("DAGSTER_PG_URL", None)
    (home / "dagster").mkdir(parents=True)
    command = [str(DAGSTER), "job", "execute", "-m", "invoice_pipeline.orchestration.definitions"]
    return subprocess.Popen(
        [*command, "-j", DELIVER_EXPORTS],
        env=env,
        stdout=(home / "run.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the kill takes every process of the run
    )


@contextmanager
def delivery_run(database_url: str, home: Path) -> Iterator[subprocess.Popen[bytes]]:
    run = start_run(database_url, home)
    try:
        yield run
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(60)


def kill(run: subprocess.Popen[bytes], home: Path) -> None:
    """kill -9 of the run's process group, which must still be running."""
    assert run.poll() is None, (home / "run.log").read_text()
    os.killpg(run.pid, signal.SIGKILL)
    assert run.wait(60) == -signal.SIGKILL


def wait_blocked(database_url: str, holder: psycopg.Connection[object], what: str) -> int:
    """Until a backend waits on a lock `holder` holds; its pid."""
    pids: list[int] = []
    wait_for(lambda: bool(pids.extend(blocked_by(database_url, holder)) or pids), timeout=300, what=what)
    return pids[0]


def blocked_by(database_url: str, holder: psycopg.Connection[object]) -> list[int]:
    """The backends waiting on a lock `holder` holds. Asked on a new connection each time: inside
    a transaction, pg_stat_activity is a snapshot taken once."""
    query = "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
    return [int(row[0]) for row in sql(database_url, query, (holder.info.backend_pid,))]


def backend_gone(database_url: str, pid: int) -> None:
    """Until a killed client's backend has exited (it notices at its next read of the socket)."""
    gone = "SELECT count(*) FROM pg_stat_activity WHERE pid = %s"
    wait_for(
        lambda: sql(database_url, gone, (pid,)) == [(0,)], timeout=60, what="the dead run's backend to exit"
    )


def reach_commit_blocked(
    database_url: str, receiver: WebhookReceiver, erp: ExportTarget
) -> Callable[[], None]:
    """Hold the batch's rows while its first request is held, answer the batch, and wait until its
    commit (the fence) waits on them. Returns the release: roll back, then wait for the dead
    run's backend to be gone (it holds the rows' locks until it notices its client died)."""
    receiver.wait_held(1)
    holder = psycopg.connect(database_url)
    holder.execute("SELECT 1 FROM exports WHERE target_id = %s FOR SHARE", (erp.id,))
    receiver.release_held()
    pid = wait_blocked(database_url, holder, "the commit to wait on the held rows")

    def release() -> None:
        holder.rollback()
        holder.close()
        backend_gone(database_url, pid)

    return release


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_a_killed_delivery_run_is_swept_and_the_next_run_delivers_each_posting_once(
    database_url: str, store: InvoiceStore, tmp_path: Path, point: str
) -> None:
    at = KILL_POINTS[point]
    folder = tmp_path / "books"
    with WebhookReceiver(SECRET) as receiver:
        # Timeouts far past the kill: the run must not give up on a held request by itself.
        erp = webhook_target(
            store, "acme", receiver.url, tmp_path / "secret", batch_size=BATCH, timeout_s=300
        )
        books = datev_target(store, "acme", folder, batch_size=BATCH)
        post_invoices(store, "acme", POSTINGS)
        receiver.then(*at.script)
        with delivery_run(database_url, tmp_path / "home") as run:
            if at.commit_blocked:
                release = reach_commit_blocked(database_url, receiver, erp)
            else:
                receiver.wait_for(at.requests_at_kill, timeout=300)
            files_at_kill = {p.name: p.read_bytes() for p in folder.glob("*.csv")}
            kill(run, tmp_path / "home")
        if at.commit_blocked:
            release()
        assert len(receiver.requests) == at.requests_at_kill
        held = age_export_leases(database_url)  # the dead run's silence, back-dated
        assert held > 0

        with DagsterInstance.from_config(str(tmp_path / "home" / "dagster")) as instance:
            (dead,) = instance.get_runs()
            assert dead.status == DagsterRunStatus.STARTED, "Dagster cannot tell the run's process died"
            resources = pipeline_resources(database_url)
            db = resources["invoice_db"]
            assert isinstance(db, InvoiceDatabase)
            report = run_maintenance(db, instance)
            assert report.export_leases_swept == held and report.reconciled_runs == [dead.run_id]
            context = build_sensor_context(instance=instance, resources={"invoice_db": db})
            (request,) = exports_due_sensor.evaluate_tick(context).run_requests
            job = make_definitions(resources).resolve_job_def(DELIVER_EXPORTS)
            assert job.execute_in_process(instance=instance, tags=request.tags).success
            failed = instance.get_run_by_id(dead.run_id)
            assert failed is not None and failed.status == DagsterRunStatus.FAILURE

    assert statuses(database_url, erp) == {"delivered": POSTINGS} == statuses(database_url, books)
    assert receiver.booked() == dict.fromkeys(posting_ids(database_url, "acme"), 1)
    assert set(receiver.acknowledged) == export_ids(database_url, erp)  # each key accepted
    assert len(receiver.requests) == POSTINGS + at.resent + (0 if at.commit_blocked else 1)
    assert sum(n > 1 for n in receiver.acknowledged.values()) == at.resent
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert len(files) == -(-POSTINGS // BATCH) and all(n.startswith("EXTF_Buchungsstapel_") for n in files)
    for name, content in files_at_kill.items():
        assert files[name] == content


def test_a_delivery_run_killed_before_its_first_claim_is_found_dead_and_the_sensor_goes_on(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    """Killed holding no lease (its claim waits on the target row the test holds): no lease to
    sweep, so the run is judged by its silence past the TTL; until then the sensor waits."""
    with WebhookReceiver(SECRET) as receiver:
        erp = webhook_target(store, "acme", receiver.url, tmp_path / "secret", batch_size=BATCH)
        post_invoices(store, "acme", POSTINGS)
        holder = psycopg.connect(database_url)
        # A new batch's row names its target: the claim's key check waits on this lock.
        holder.execute("SELECT 1 FROM export_targets WHERE id = %s FOR UPDATE", (erp.id,))
        try:
            with delivery_run(database_url, tmp_path / "home") as run:
                pid = wait_blocked(database_url, holder, "the claim to wait on the held target")
                kill(run, tmp_path / "home")
        finally:
            holder.rollback()
            holder.close()
        backend_gone(database_url, pid)
        assert sql(database_url, "SELECT count(*) FROM export_jobs") == [(0,)], "it held no lease"

        with DagsterInstance.from_config(str(tmp_path / "home" / "dagster")) as instance:
            (dead,) = instance.get_runs()
            resources = pipeline_resources(database_url)
            db = resources["invoice_db"]
            assert isinstance(db, InvoiceDatabase)
            context = build_sensor_context(instance=instance, resources={"invoice_db": db})
            assert not exports_due_sensor.evaluate_tick(context).run_requests, "the run still says STARTED"
            assert run_maintenance(db, instance).reconciled_runs == [], "silent for less than the TTL"
            # Its silence past the TTL, back-dated: its last event an hour old, not waited for.
            instance.store_event(
                EventLogEntry(
                    None,
                    logging.DEBUG,
                    "silent since",
                    dead.run_id,
                    time.time() - 3600,
                    job_name=DELIVER_EXPORTS,
                )
            )
            assert run_maintenance(db, instance).reconciled_runs == [dead.run_id]
            (request,) = exports_due_sensor.evaluate_tick(context).run_requests
            job = make_definitions(resources).resolve_job_def(DELIVER_EXPORTS)
            assert job.execute_in_process(instance=instance, tags=request.tags).success
    assert statuses(database_url, erp) == {"delivered": POSTINGS}
    assert receiver.booked() == dict.fromkeys(posting_ids(database_url, "acme"), 1)
    assert len(receiver.requests) == POSTINGS  # nothing was sent before the kill
