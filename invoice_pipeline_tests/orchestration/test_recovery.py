"""Crash recovery with real processes: SIGKILL, SIGSTOP, redelivery storms through Dagster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from dagster import DagsterInstance, DagsterRunStatus

from chaos.common import worker_context
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.jobs import make_jobs
from invoice_pipeline.orchestration.maintenance import run_maintenance
from invoice_pipeline.orchestration.resources import InvoiceDatabase
from invoice_pipeline_tests.factories import pipeline_resources
from invoice_pipeline_tests.support import db_seconds_since
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import wait_for


@pytest.fixture
def dagster_home(tmp_path: Path) -> Path:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return home


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait(30)


def start_worker(
    workers: list[subprocess.Popen[str]],
    database_url: str,
    dagster_home: Path,
    invoice_id: object,
    gate_method: str,
    gate_file: Path,
) -> subprocess.Popen[str]:
    env = dict(
        os.environ,
        INVOICE_PIPELINE_DATABASE_URL=database_url,
        DAGSTER_HOME=str(dagster_home),
        GATE_METHOD=gate_method,
        GATE_FILE=str(gate_file),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline_support.run_worker", str(invoice_id)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    workers.append(proc)
    return proc


def step_events(database_url: str, invoice_id: object) -> list[tuple[str, str, str]]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT job_id::text, step, event FROM step_events WHERE invoice_id = %s ORDER BY id",
            (invoice_id,),
        ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def reached(database_url: str, invoice_id: object, step: str) -> bool:
    return any(s == step and e == "started" for _, s, e in step_events(database_url, invoice_id))


def wait_stale(database_url: str, invoice_id: object) -> None:
    wait_for(
        lambda: (
            db_seconds_since(
                database_url,
                "SELECT max(heartbeat_at) FROM processing_jobs WHERE invoice_id = %s AND status = 'running'",
                (invoice_id,),
            )
            > 1.2
        ),
        what="the frozen or dead holder's lease to age past its 1 s TTL",
    )


def run_in_process(database_url: str, invoice_id: object) -> bool:
    job, _ = make_jobs(pipeline_resources(database_url))
    result = job.execute_in_process(
        run_config={"ops": {"start": {"config": {"invoice_id": str(invoice_id)}}}}, raise_on_error=False
    )
    return result.success


def test_killed_after_text_extraction_resumes_without_extracting_again(
    database_url: str,
    store: InvoiceStore,
    dagster_home: Path,
    workers: list[subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    inv = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    worker = start_worker(workers, database_url, dagster_home, inv, "read_fields", tmp_path / "never")
    wait_for(
        lambda: reached(database_url, inv, "extract_fields"),
        timeout=120,
        what="the worker to be inside extract_fields",
    )
    assert store.documents.load_extracted_text(inv) is not None, "extract_text finished and checkpointed"
    worker.send_signal(signal.SIGKILL)
    worker.wait(30)

    holder = store.claims.current_holder(inv)
    assert holder is not None, "the lock survives the worker"
    wait_stale(database_url, inv)
    with instance_at(dagster_home) as instance:
        (run,) = instance.get_runs()
        assert run.status == DagsterRunStatus.STARTED, "Dagster cannot tell the worker died"
        report = run_maintenance(
            InvoiceDatabase(database_url=database_url, lock_ttl_seconds=1, retry_base_seconds=0), instance
        )
        assert report.swept == 1 and report.reconciled_runs == [run.run_id] and report.retried == 1
        reconciled = instance.get_run_by_id(run.run_id)
        assert reconciled is not None and reconciled.status == DagsterRunStatus.FAILURE

    assert run_in_process(database_url, inv)
    assert store.documents.count_step_executions(inv, "extract_text") == 1, (
        "text extraction ran exactly once in total"
    )
    starts = [s for _, s, e in step_events(database_url, inv) if e == "started"]
    assert starts.count("extract_fields") == 2, "the interrupted step ran again"
    # 'executed' means the result was saved: the killed attempt's never was.
    assert store.documents.count_step_executions(inv, "extract_fields") == 1
    state = store.documents.invoice_state(inv)
    assert state is not None and state.status == "processed" and state.attempts == 2
    with psycopg.connect(database_url) as conn:
        assert conn.execute(
            "SELECT count(*) FROM ledger_postings WHERE invoice_id = %s", (inv,)
        ).fetchone() == (1,)


def instance_at(dagster_home: Path) -> DagsterInstance:
    """The worker's instance, as a second process (the UI, the daemon) would open it."""
    return DagsterInstance.from_config(str(dagster_home))


def test_frozen_zombie_resumes_after_takeover_and_writes_nothing(
    database_url: str,
    store: InvoiceStore,
    dagster_home: Path,
    workers: list[subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    inv = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    gate = tmp_path / "gate"
    zombie = start_worker(workers, database_url, dagster_home, inv, "read_text", gate)
    wait_for(
        lambda: reached(database_url, inv, "extract_text"),
        timeout=120,
        what="the worker to be inside extract_text",
    )
    zombie_job = store.claims.current_holder(inv)
    assert zombie_job is not None
    os.kill(zombie.pid, signal.SIGSTOP)  # frozen: no heartbeats, no progress

    wait_stale(database_url, inv)
    sweeper = InvoiceStore(database_url, max_size=1, lock_ttl=timedelta(seconds=1))
    try:
        assert sweeper.maintenance.release_stale_locks(inv) == 1
    finally:
        sweeper.close()
    assert run_in_process(database_url, inv), "another run takes over and finishes"
    before = step_events(database_url, inv)

    gate.touch()
    os.kill(zombie.pid, signal.SIGCONT)
    output, _ = zombie.communicate(timeout=120)
    assert zombie.returncode == 1 and "FAILURE" in output
    assert "lease lost" in output
    after = step_events(database_url, inv)
    assert after == before, "the zombie wrote nothing after waking up"
    assert [e for e in after if e[0] == str(zombie_job.job_id)] == [
        (str(zombie_job.job_id), "extract_text", "started")
    ]
    with psycopg.connect(database_url) as conn:
        text_job = conn.execute("SELECT job_id FROM extracted_texts WHERE invoice_id = %s", (inv,)).fetchone()
        postings = conn.execute(
            "SELECT count(*) FROM ledger_postings WHERE invoice_id = %s", (inv,)
        ).fetchone()
    assert text_job is not None and text_job[0] != zombie_job.job_id
    assert postings == (1,)


def _launch_same_invoice(database_url: str, invoice_id: str, barrier, queue) -> None:  # type: ignore[no-untyped-def]
    barrier.wait()
    queue.put(run_in_process(database_url, invoice_id))


def test_redelivery_storm_through_dagster_does_the_work_once(database_url: str, store: InvoiceStore) -> None:
    inv = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    ctx = worker_context()
    n = 6
    barrier, queue = ctx.Barrier(n), ctx.Queue()
    procs = [
        ctx.Process(target=_launch_same_invoice, args=(database_url, str(inv), barrier, queue))
        for _ in range(n)
    ]
    for p in procs:
        p.start()
    outcomes = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
    assert all(outcomes), "every run ends cleanly: one does the work, the others bounce off the lock"
    assert store.documents.count_step_executions(inv, "extract_text") == 1
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM ledger_postings").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM processing_jobs WHERE status = 'succeeded'").fetchone() == (
            1,
        )
