"""recovery_default: SIGKILL a run worker mid-invoice under `invoice-pipeline dev`, default settings.

First, on the same server: one invoice launched from the UI (GraphQL, as the Launchpad does),
timed from the launch until its run reports SUCCESS.

Measured, not computed: the product as `make dev` runs it (embedded PostgreSQL, dagster dev with
its daemon, the sensor and the schedules, every setting at its default). A multi-page PDF is
ingested; when its run holds the lease and is extracting text, the process executing the run
is SIGKILLed. The figure is the time from the kill to another run
holding the invoice's lock, both read from the database's clock; then the invoice must end
processed and posted once.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from uuid import UUID

import psycopg

from benchmarks.harness import BenchContext, BenchResult, free_port, register
from invoice_pipeline.db.embedded import EmbeddedPostgres
from invoice_pipeline.engine.runs import InvoiceRef
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.run_requests import single_run_config
from invoice_pipeline.samples.drawing import InvoiceDrawer
from invoice_pipeline.samples.render import Line, invoice_pdf, ubl_xml
from pipeline_support.helpers import start_dev_server, stop_process_group, wait_for

NAME = "recovery_default"
LINES = 450  # ~440 pages, ~2 s of text extraction: long enough to be killed in it


def _slow_invoice(seed: int) -> bytes:
    builder = InvoiceDrawer(seed)
    inv = builder.invoice()
    lines = tuple(
        Line(f"Consulting hours, item {i}", Decimal(1), Decimal("10.00"), Decimal(19)) for i in range(LINES)
    )
    return invoice_pdf(replace(inv, lines=lines, invoice_number=f"REC-{seed:05d}"), "en")


def _run_workers(root_pid: int) -> list[int]:
    """The processes executing a run under `dagster dev`.

    The default run launcher starts each run as a multiprocessing child of the code server, and
    Dagster watches it with `watch_orphans.py <run pid> ...`: the pids those watchers name.
    """
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        watcher = next((i for i, arg in enumerate(argv) if arg.endswith(b"watch_orphans.py")), None)
        if watcher is not None and _descends_from(int(entry.name), root_pid):
            found.add(int(argv[watcher + 1]))
    return sorted(found)


def _descends_from(pid: int, root: int) -> bool:
    while pid > 1:
        if pid == root:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return False


def _kill_and_time(url: str, store: InvoiceStore, dev_pid: int, invoice: UUID) -> tuple[float, int, int]:
    """(seconds from the kill to another run's lock, run workers killed, ledger postings at the end)."""
    with psycopg.connect(url, autocommit=True) as conn:

        def extracting() -> bool:
            row = conn.execute(
                "SELECT i.processing_stage FROM invoices i JOIN processing_jobs j ON j.invoice_id = i.id"
                " AND j.status = 'running' WHERE i.id = %s",
                (invoice,),
            ).fetchone()
            return bool(row and row[0] == "extract_text")

        wait_for(extracting, timeout=180, interval=0.05, what="the run to be extracting text")
        workers = _run_workers(dev_pid)
        if not workers:
            raise RuntimeError("found no process executing the run")
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        killed_at = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]

        def reclaimed() -> dt.datetime | None:
            row = conn.execute(
                "SELECT min(started_at) FROM processing_jobs WHERE invoice_id = %s AND started_at > %s",
                (invoice, killed_at),
            ).fetchone()
            return row[0] if row else None

        again = wait_for(reclaimed, timeout=300, interval=0.2, what="another run to take the invoice")
        wait_for(
            lambda: store.documents.invoice_state(invoice).status == "processed",  # type: ignore[union-attr]
            timeout=300,
            interval=0.5,
            what="the invoice to be processed",
        )
        posted = conn.execute(
            "SELECT count(*) FROM ledger_postings WHERE invoice_id = %s", (invoice,)
        ).fetchone()
    return (again - killed_at).total_seconds(), len(workers), int(posted[0]) if posted else 0


def _ui_launch_to_success(
    ctx: BenchContext, url: str, store: InvoiceStore, ui_port: int, result: BenchResult
) -> None:
    """One invoice launched from the UI (GraphQL, as the Launchpad does) until its run's SUCCESS."""
    from dagster import DagsterRunStatus
    from dagster_graphql import DagsterGraphQLClient

    gql = DagsterGraphQLClient("127.0.0.1", port_number=ui_port)
    builder = InvoiceDrawer(99)
    for trial in range(ctx.pick(2, 5)):
        inv = replace(builder.invoice(), invoice_number=f"UI-{trial:04d}")
        invoice = store.documents.store_document(ubl_xml(inv), "acme", f"ui-{trial}.xml").invoice_id
        with psycopg.connect(url, autocommit=True) as conn:
            # Requested already, as far as the sensor knows: only this launch processes it.
            conn.execute(
                "UPDATE invoices SET requested_at = now() + interval '1 day' WHERE id = %s", (invoice,)
            )
        started = time.monotonic()
        run_id = gql.submit_job_execution(
            "process_invoice",
            run_config=single_run_config(InvoiceRef(str(invoice))),
            tags={"launched_by": "bench"},
        )

        def finished(run_id: str = run_id) -> DagsterRunStatus | None:
            s = gql.get_run_status(run_id)
            return (
                s
                if s in (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)
                else None
            )

        status = wait_for(
            finished,
            timeout=240,
            interval=0.1,
            what="the launched run to finish",
        )
        seconds = time.monotonic() - started
        state = store.documents.invoice_state(invoice)
        result.check(
            f"UI launch {trial + 1}: run SUCCESS and the invoice processed by it",
            status == DagsterRunStatus.SUCCESS and state is not None and state.status == "processed",
            f"run {status}, invoice {state.status if state else 'missing'}",
        )
        result.figure("one invoice launched from the UI: launch to SUCCESS", "s").add(seconds)
        ctx.log(f"UI launch {trial + 1}: SUCCESS after {seconds:.1f} s")


@register(NAME, "SIGKILL a run worker mid-invoice under `invoice-pipeline dev` with default settings")
def run(ctx: BenchContext) -> BenchResult:
    trials = ctx.pick(2, 6)
    result = BenchResult(
        NAME,
        f"{trials} SIGKILLs of the run worker while it extracts text, under `invoice-pipeline dev` with every "
        "setting at its default; time from the kill until another run holds the invoice's lock (database clock).",
        params={"trials": trials, "pdf_pages": LINES},
    )
    work = Path(tempfile.mkdtemp(prefix="recovery-default-"))
    home, port, ui_port = work / "home", free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("INVOICE_PIPELINE_DATABASE_URL", "DAGSTER_HOME")}
    env.update(INVOICE_PIPELINE_HOME=str(home), INVOICE_PIPELINE_PG_PORT=str(port))
    cli = [sys.executable, "-m", "invoice_pipeline.cli"]
    subprocess.run([*cli, "migrate"], env=env, check=True, capture_output=True, timeout=300)
    server = EmbeddedPostgres(home / "pgdata", port)
    server.use_password_file()
    url = server.url("invoice_pipeline")
    dev = start_dev_server(env, ui_port, work / "dev.log")
    store = InvoiceStore(url, max_size=2)
    try:
        _ui_launch_to_success(ctx, url, store, ui_port, result)
        for trial in range(trials):
            invoice = store.documents.store_document(
                _slow_invoice(trial), "acme", f"slow-{trial}.pdf"
            ).invoice_id
            seconds, workers, posted = _kill_and_time(url, store, dev.pid, invoice)
            ctx.log(f"trial {trial}: killed {workers} worker(s); reclaimed after {seconds:.1f} s")
            result.figure("recovery: kill to lock held by another run", "s").add(seconds)
            result.figure("run workers killed", "processes").add(workers)
            result.figure("ledger postings of the invoice", "postings").add(posted)
    finally:
        store.close()
        stop_process_group(dev)
        subprocess.run([*cli, "db", "stop"], env=env, capture_output=True, timeout=120)
        server.destroy()
        shutil.rmtree(work, ignore_errors=True)
    recovery = result.get("recovery: kill to lock held by another run")
    result.check("median recovery at most 60 s", recovery.median <= 60, f"median {recovery.median:.1f} s")
    result.check("worst recovery at most 90 s", recovery.max <= 90, f"worst {recovery.max:.1f} s")
    result.check(
        "every killed invoice posted exactly once",
        all(v == 1 for v in result.get("ledger postings of the invoice").values),
        str(result.get("ledger postings of the invoice").values),
    )
    result.notes.append(
        "Where the time goes, by design: the lease TTL (30 s) after the last heartbeat, then the next sensor "
        "tick (every 10 s or so) sweeps the lock, reschedules the invoice at once and requests a run in the same "
        "tick, then the daemon dequeues and launches it (a few seconds)."
    )
    return result
