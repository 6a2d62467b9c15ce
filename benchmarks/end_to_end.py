"""end_to_end: invoices/s through the real Dagster jobs vs the same work in a bare psycopg loop.

Three ways to process the same kind of invoices (generated JSON and UBL, cheap to parse, all
distinct originals over four orgs, so extraction does not hide the pipeline's own cost):

* bare loop: one Python loop doing, per invoice, what the ops do — invoice_state, the
  per-invoice sweep, acquire, then for each stage the same "already done?" read, fenced
  breadcrumb, heartbeat thread and store calls around the same pure functions
  (extract_text, extract_fields, validate_fields, decide_duplicate), then complete. Same
  InvoiceStore, same SQL, no Dagster.
* batch: one `process_invoice_batch` run (execute_in_process, in-process executor) over all
  invoices of the round, on a DagsterInstance with dagster-postgres storage configured by the
  product's own dagster.yaml (invoice_pipeline.dagster_home), in its own database; and the
  same on an in-memory (ephemeral) instance, to split storage cost from framework cost.
* per-invoice: one `process_invoice` run per invoice on the Postgres-backed instance.

bare / batch invoices/s is what Dagster costs per invoice. Not included on either side: a
launched run's process start (see recovery_time: "relaunch") and the sensor/queue latency.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit
from uuid import UUID

import psycopg
from psycopg import sql

from benchmarks.harness import BenchContext, BenchResult, cell, fmt, pivot, plot_bars, register
from invoice_pipeline.dagster_home import DAGSTER_YAML, ENV_DAGSTER_PG_URL, dagster_database_url
from invoice_pipeline.dedupe import decide_duplicate
from invoice_pipeline.documents import BadDocument, extract_fields, extract_text
from invoice_pipeline.domain.validation import validate_fields
from invoice_pipeline.leases import LeaseLost
from invoice_pipeline.records import Lease
from invoice_pipeline.resources import DocumentReader, InvoiceDatabase
from invoice_pipeline.resources.invoice_database import close_shared_stores
from invoice_pipeline.samples.generator import _Builder  # the demo's invoice generator
from invoice_pipeline.samples.render import invoice_json, ubl_xml
from invoice_pipeline.store import InvoiceStore

NAME = "end_to_end"
ORGS = 4
BARE = "bare loop"
BATCH = "batch run"
BATCH_MEMORY = "batch run, in-memory instance"
PER_INVOICE = "per-invoice runs"
VARIANTS = (BARE, BATCH, BATCH_MEMORY, PER_INVOICE)

# -- shared with recovery_time -----------------------------------------------------------------


@dataclass(frozen=True)
class DagsterSetup:
    home: Path
    url: str  # postgresql+psycopg2://... as dagster-postgres wants it
    plain_url: str  # the same database for psycopg

    def env(self) -> dict[str, str]:
        """What a run worker subprocess needs to open the same instance."""
        return {"DAGSTER_HOME": str(self.home), ENV_DAGSTER_PG_URL: self.url}


@contextmanager
def dagster_home_on_postgres(ctx: BenchContext, database_url: str) -> Iterator[DagsterSetup]:
    """A Dagster home with the product's dagster.yaml: storage in database `<name>_dagster`.

    DAGSTER_PG_URL is set in this process while the context is open (dagster.yaml reads it)
    and restored afterwards; the database and the directory are removed at the end.
    """
    url = dagster_database_url(database_url)
    name = urlsplit(url).path.lstrip("/")
    plain = urlunsplit(urlsplit(url)._replace(scheme="postgresql"))
    with psycopg.connect(ctx.server.admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    home = Path(tempfile.mkdtemp(prefix="invoice-bench-dagster-"))
    (home / "dagster.yaml").write_text(DAGSTER_YAML.format(max_concurrent_runs=4))
    previous = os.environ.get(ENV_DAGSTER_PG_URL)
    os.environ[ENV_DAGSTER_PG_URL] = url
    try:
        yield DagsterSetup(home, url, plain)
    finally:
        if previous is None:
            os.environ.pop(ENV_DAGSTER_PG_URL, None)
        else:
            os.environ[ENV_DAGSTER_PG_URL] = previous
        close_shared_stores()
        ctx.server.drop_database(plain)
        shutil.rmtree(home, ignore_errors=True)


class Documents:
    """Distinct valid invoices, alternately JSON and UBL, from the sample generator."""

    def __init__(self, seed: int = 7) -> None:
        self._tmp = Path(tempfile.mkdtemp(prefix="invoice-bench-docs-"))
        self._builder = _Builder(self._tmp, seed)
        self._n = 0

    def ingest(self, store: InvoiceStore, count: int) -> list[UUID]:
        ids = []
        for _ in range(count):
            inv = self._builder.invoice()
            fmt_json = self._n % 2 == 0
            content = invoice_json(inv) if fmt_json else ubl_xml(inv)
            name = f"bench-{self._n}.{'json' if fmt_json else 'xml'}"
            ids.append(store.store_document(content, f"bench-org-{self._n % ORGS}", name).invoice_id)
            self._n += 1
        return ids

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)


# -- the bare loop -----------------------------------------------------------------------------


def bare_process(store: InvoiceStore, db: InvoiceDatabase, invoice_id: UUID, owner: str) -> None:
    """One invoice through every stage: the ops' store calls and pure functions, without Dagster."""
    state = store.invoice_state(invoice_id)
    if state is None or state.is_terminal:
        raise AssertionError(f"invoice {invoice_id} is not processable: {state}")
    store.release_stale_locks(invoice_id, db.lock_ttl)
    lease = store.acquire(invoice_id, state.attempts + 1, owner)
    if lease is None:
        raise AssertionError(f"invoice {invoice_id} is held elsewhere")
    org_id = state.org_id

    def step(name: str, already_done: Callable[[], object | None], work: Callable[[Lease], None]) -> None:
        # run_step without Dagster: breadcrumb, fast-forward if done, else work under a heartbeat.
        if already_done() is not None:
            store.record_step(lease, name, skipped=True)
            return
        store.record_step(lease, name, skipped=False)
        with lease.keep_alive(db.heartbeat_interval):
            work(lease)
        if lease.lost:
            raise LeaseLost(lease.job_id, lease.invoice_id, "heartbeat found the job no longer running")

    def text(lease: Lease) -> None:
        document = store.load_document(invoice_id)
        assert document is not None
        extracted = extract_text(document.content, document.filename, max_bytes=db.max_document_bytes)
        store.save_extracted_text(lease, extracted)

    def fields(lease: Lease) -> None:
        extracted = store.load_extracted_text(invoice_id)
        assert extracted is not None
        store.save_fields(lease, extract_fields(extracted))

    def validate(lease: Lease) -> None:
        loaded = store.load_fields(invoice_id)
        assert loaded is not None
        problems = validate_fields(loaded)
        if problems:
            raise BadDocument(problems[0].code, "; ".join(p.reason for p in problems))

    def dedupe(lease: Lease) -> None:
        loaded = store.load_fields(invoice_id)
        assert loaded is not None
        decide_duplicate(store, lease, org_id, loaded)

    def approve(lease: Lease) -> None:
        decision = store.load_duplicate_decision(invoice_id)
        assert decision is not None
        if decision.is_suspected:
            store.hold_for_review(lease, [f"suspected_duplicate of {decision.original_id}"])
        elif decision.is_duplicate:
            store.record_approval(lease, "rejected", f"duplicate of {decision.original_id}")
        else:
            store.record_approval(lease, "approved", "auto-approved: valid, not a duplicate")

    def ledger_done() -> bool | None:
        if store.load_ledger_posting(invoice_id) is not None:
            return True
        approval = store.load_approval(invoice_id)
        return True if approval is None or approval.decision != "approved" else None

    def post(lease: Lease) -> None:
        loaded = store.load_fields(invoice_id)
        assert loaded is not None and loaded.payable_total is not None and loaded.currency
        amount = -loaded.payable_total if loaded.document_type == "credit_note" else loaded.payable_total
        store.post_to_ledger(lease, org_id, amount, loaded.currency)

    step("extract_text", lambda: store.load_extracted_text(invoice_id), text)
    step("extract_fields", lambda: store.load_fields(invoice_id), fields)
    step("validate", lambda: True if store.load_duplicate_decision(invoice_id) else None, validate)
    step("detect_duplicates", lambda: store.load_duplicate_decision(invoice_id), dedupe)
    step("approve", lambda: store.load_approval(invoice_id), approve)
    step("post_to_ledger", ledger_done, post)
    store.complete(lease)


# -- checks and measurements on the database ---------------------------------------------------

OUTCOME = """
SELECT count(*) FILTER (WHERE i.status = 'processed'),
       count(p.invoice_id),
       count(*) FILTER (WHERE i.attempts = 1)
FROM invoices i LEFT JOIN ledger_postings p ON p.invoice_id = i.id
WHERE i.id = ANY(%s)
"""
# The longest a lease went without a recorded event: acquire, each step's breadcrumb, completion.
# Heartbeats leave no history, so this is how long a branch waited, not how stale its lease got.
LEASE_GAP = """
WITH t AS (
    SELECT id AS job_id, started_at AS at FROM processing_jobs WHERE invoice_id = ANY(%(ids)s)
    UNION ALL
    SELECT job_id, at FROM step_events WHERE invoice_id = ANY(%(ids)s)
    UNION ALL
    SELECT id, finished_at FROM processing_jobs WHERE invoice_id = ANY(%(ids)s)
), g AS (
    SELECT at - lag(at) OVER (PARTITION BY job_id ORDER BY at) AS gap FROM t
)
SELECT extract(epoch FROM max(gap))::float8 FROM g
"""


def _outcome(conn: psycopg.Connection[Any], ids: list[UUID]) -> tuple[int, int, int]:
    row = conn.execute(OUTCOME, (ids,)).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


DB_COUNTERS = """
SELECT sessions, xact_commit FROM pg_stat_database WHERE datname = current_database()
"""


def _db_counters(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """Sessions ended and commits in this database; short-lived backends report them when they exit."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(DB_COUNTERS).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _dagster_events(dagster_plain_url: str, run_ids: list[str]) -> int:
    with psycopg.connect(dagster_plain_url) as conn:
        row = conn.execute("SELECT count(*) FROM event_logs WHERE run_id = ANY(%s)", (run_ids,)).fetchone()
    return int(row[0]) if row else 0


# -- the benchmark -----------------------------------------------------------------------------


def _connect_ms(url: str, times: int) -> float:
    """Median time to open a psycopg2 connection: what dagster-postgres' NullPool pays per write."""
    import psycopg2

    samples = []
    for _ in range(times):
        t = time.perf_counter()
        psycopg2.connect(url).close()
        samples.append((time.perf_counter() - t) * 1000)
    return statistics.median(samples)


@register(NAME, "invoices/s: process_invoice_batch and per-invoice runs (Dagster on Postgres) vs a bare loop")
def run(ctx: BenchContext) -> BenchResult:
    from dagster import DagsterInstance

    from invoice_pipeline.jobs import make_jobs

    n_batch: int = ctx.pick(10, 50)
    n_single: int = ctx.pick(3, 30)
    rounds: int = ctx.pick(2, 3)
    result = BenchResult(
        NAME,
        f"Invoices/s: {n_batch} invoices in one process_invoice_batch run (the sensor's batch size) vs the same "
        f"work in a bare psycopg loop, and {n_single} process_invoice runs (one run per invoice). In-process "
        "execution; Dagster storage in PostgreSQL via the product's dagster.yaml (plus one batch on an "
        "in-memory instance to split storage from framework cost); product default settings.",
        params={
            "batch_and_bare_invoices": n_batch,
            "per_invoice_runs": n_single,
            "rounds": rounds,
            "formats": "JSON/UBL alternating, all distinct originals",
            "orgs": ORGS,
        },
    )
    url = ctx.database(NAME)
    docs = Documents()
    # Product defaults (TTL 120 s, heartbeat 15 s, retry base 30 s): the jobs and the loop alike.
    db = InvoiceDatabase(database_url=url)
    process_invoice, process_invoice_batch = make_jobs(
        {"invoice_db": db, "document_reader": DocumentReader()}
    )
    store = db.store

    def batch_config(batch: list[UUID]) -> dict[str, Any]:
        return {"ops": {"fan_out": {"config": {"invoice_ids": [str(i) for i in batch]}}}}

    def single_config(invoice_id: UUID) -> dict[str, Any]:
        return {"ops": {"start": {"config": {"invoice_id": str(invoice_id)}}}}

    try:
        with (
            dagster_home_on_postgres(ctx, url) as setup,
            DagsterInstance.from_config(str(setup.home)) as instance,
            DagsterInstance.ephemeral() as memory,
        ):
            t0 = time.monotonic()
            # Warm-up: Dagster's schema in the fresh database, imports, plan caches, pool connections.
            warm = docs.ingest(store, 4)
            bare_process(store, db, warm[0], "bench-bare")
            process_invoice_batch.execute_in_process(run_config=batch_config(warm[1:2]), instance=instance)
            process_invoice_batch.execute_in_process(run_config=batch_config(warm[2:3]), instance=memory)
            process_invoice.execute_in_process(run_config=single_config(warm[3]), instance=instance)
            ctx.log(f"warm-up (instance schema, imports) {time.monotonic() - t0:.1f} s")

            with (
                psycopg.connect(url, autocommit=True) as conn,
                psycopg.connect(setup.plain_url, autocommit=True) as monitor,
            ):
                for r in range(rounds):
                    ids = {v: docs.ingest(store, n_single if v == PER_INVOICE else n_batch) for v in VARIANTS}
                    order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]  # rotate
                    for variant in order:
                        batch = ids[variant]
                        run_ids: list[str] = []
                        sessions_before, commits_before = _db_counters(monitor)
                        t = time.perf_counter()
                        if variant == BARE:
                            for invoice_id in batch:
                                bare_process(store, db, invoice_id, "bench-bare")
                            ok = True
                        elif variant in (BATCH, BATCH_MEMORY):
                            res = process_invoice_batch.execute_in_process(
                                run_config=batch_config(batch),
                                instance=instance if variant == BATCH else memory,
                                raise_on_error=False,
                            )
                            ok = res.success
                            run_ids.append(res.run_id)
                        else:
                            ok = True
                            for invoice_id in batch:
                                res = process_invoice.execute_in_process(
                                    run_config=single_config(invoice_id),
                                    instance=instance,
                                    raise_on_error=False,
                                )
                                ok = ok and res.success
                                run_ids.append(res.run_id)
                        elapsed = time.perf_counter() - t
                        processed, posted, first_attempt = _outcome(conn, batch)
                        result.check(
                            f"{variant}, round {r + 1}: every invoice processed and posted once",
                            ok and processed == posted == first_attempt == len(batch),
                            f"run success={ok}; {processed} processed, {posted} postings, {first_attempt} "
                            f"on attempt 1, of {len(batch)}",
                        )
                        result.figure(f"{variant}: invoices/s", "invoices/s", better="higher").add(
                            len(batch) / elapsed
                        )
                        result.figure(f"{variant}: ms per invoice", "ms").add(elapsed / len(batch) * 1000)
                        gap = conn.execute(LEASE_GAP, {"ids": batch}).fetchone()
                        result.figure(
                            f"{variant}: longest lease gap",
                            "s",
                            note="longest stretch between acquire, breadcrumbs and completion of one lease",
                        ).add(float(gap[0]) if gap and gap[0] is not None else 0.0)
                        if variant in (BATCH, PER_INVOICE):
                            events = _dagster_events(setup.plain_url, run_ids)
                            result.figure(f"{variant}: Dagster events per invoice", "events").add(
                                events / len(batch)
                            )
                            time.sleep(0.5)  # let the last NullPool backends exit and report
                            sessions_after, commits_after = _db_counters(monitor)
                            result.figure(
                                f"{variant}: Dagster DB connections per invoice", "connections"
                            ).add((sessions_after - sessions_before) / len(batch))
                            result.figure(f"{variant}: Dagster DB commits per invoice", "commits").add(
                                (commits_after - commits_before) / len(batch)
                            )
                        ctx.log(
                            f"round {r + 1}/{rounds} {variant}: {len(batch)} in {elapsed:.1f} s "
                            f"({len(batch) / elapsed:.1f}/s)"
                        )
                    result.figure("PostgreSQL connection setup (psycopg2)", "ms").add(
                        _connect_ms(setup.plain_url, 20)
                    )
    finally:
        docs.close()

    result.ratio("bare loop / batch run (invoices/s)", f"{BARE}: invoices/s", f"{BATCH}: invoices/s")
    result.ratio(
        "batch run, in-memory / Postgres storage (invoices/s)",
        f"{BATCH_MEMORY}: invoices/s",
        f"{BATCH}: invoices/s",
    )
    result.ratio(
        "batch run / per-invoice runs (invoices/s)", f"{BATCH}: invoices/s", f"{PER_INVOICE}: invoices/s"
    )
    columns = [
        "invoices/s",
        "ms per invoice",
        "Dagster events per invoice",
        "Dagster DB connections per invoice",
        "longest lease gap",
    ]
    result.tables.append(
        pivot(
            "variant, median (min–max)",
            list(VARIANTS),
            [c + (" (s)" if c == "longest lease gap" else "") for c in columns],
            lambda row, col: cell(result.find(f"{row}: {col.removesuffix(' (s)')}")),
        )
    )

    def ms(variant: str) -> float:
        return result.get(f"{variant}: ms per invoice").median

    events = result.get(f"{BATCH}: Dagster events per invoice").median
    connections = result.get(f"{BATCH}: Dagster DB connections per invoice").median
    commits = result.get(f"{BATCH}: Dagster DB commits per invoice").median
    storage_ms = ms(BATCH) - ms(BATCH_MEMORY)
    gap = result.get(f"{BATCH}: longest lease gap").median
    result.notes += [
        f"Dagster's cost per invoice in a batch run: {fmt(ms(BATCH) - ms(BARE))} ms on top of the bare loop's "
        f"{fmt(ms(BARE))} ms (medians); the bare loop is {fmt(result.ratios[0].median)}× faster. "
        f"{fmt(storage_ms)} ms of it is the PostgreSQL storage (Postgres-backed minus in-memory instance), "
        f"{fmt(ms(BATCH_MEMORY) - ms(BARE))} ms the framework itself.",
        f"Why storage costs that much: {fmt(events)} events per invoice (step start/input/output/success, asset "
        f"materializations, log lines); dagster-postgres opens a new connection for each write (SQLAlchemy "
        f"NullPool): {fmt(connections)} connections and {fmt(commits)} commits per invoice in the Dagster "
        f"database, i.e. ~{fmt(storage_ms / connections if connections else float('nan'))} ms per connection "
        f"with its backend start, authentication, statement and commit (a bare psycopg2 connect takes "
        f"{fmt(result.get('PostgreSQL connection setup (psycopg2)').median)} ms here).",
        f"Per-invoice runs add each run's fixed cost (create, plan, resources, run events): {fmt(ms(PER_INVOICE))} "
        f"ms per invoice vs {fmt(ms(BATCH))} ms in a batch — before the process start a launched run adds "
        "(DefaultRunLauncher: one Python process per run, ~2 s; see recovery_time, 'relaunch').",
        "Not in these numbers: the sensor interval and the run queue. execute_in_process uses the in-memory "
        "IO manager; launched runs also pickle each op output (a small Claim) to the filesystem.",
        f"Longest lease gap: the longest time one lease went without a fenced write or breadcrumb. The "
        f"in-process executor runs a batch breadth-first — every claim, then every extract_text, ... — so an "
        f"invoice waits while the other {n_batch - 1} go through a stage: {fmt(gap)} s here with cheap "
        "JSON/UBL. That wait grows with batch size × stage time (OCR); the LeaseKeeper heartbeats every lease "
        "the run holds every heartbeat interval whatever stage is running, so a waiting branch's lease stays "
        "fresh (before it existed, this benchmark found waiting leases going silent: the test "
        "test_waiting_batch_branches_keep_their_leases_under_a_running_sweep guards it now).",
    ]
    result.plots.append(
        plot_bars(
            ctx.out_dir / "end_to_end.png",
            f"End to end: invoices/s ({n_batch} per batch/bare round, {n_single} per-invoice runs)",
            "invoices/s (median, min–max)",
            {v: result.get(f"{v}: invoices/s") for v in VARIANTS},
        )
    )
    return result
