"""Liveness under contention (issue 25): a live holder is never hurt by someone else's wait.

Each test forces one interleaving with real PostgreSQL sessions and threads, synchronised on the
database itself: a blocker session holds a lock, and `pg_locks` (by application_name) says when a
session is waiting on it. No sleep decides an outcome.

1. A claim that should bounce, made while the holder is in the middle of a fenced write, bounces
   at once and the holder's stage goes through.
2. A chunk blocked in the middle of its write stops neither the heartbeats of its process's other
   leases nor the global sweep of a dead holder.
3. Maintenance never reschedules an invoice whose claim committed after the statement's snapshot.
4. A claim or a stage op that fails after taking its leases leaves none running with no worker.
And contention (a deadlock, a lock timeout) is one statement's problem: retried, then only the
invoice that still loses fails.

Each docstring says what the test showed against the code before the fix (sql/0009_lock_order.sql
and the store, ops and leases changes that came with it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit
from uuid import UUID, uuid4

import psycopg
import psycopg.sql
import pytest
from dagster import DagsterInstance

from invoice_pipeline.config import DEFAULT_MAX_DOCUMENT_BYTES
from invoice_pipeline.domain.keys import decision_lock_ids
from invoice_pipeline.domain.matching import MatchCandidate
from invoice_pipeline.engine.chunk_loop import claim_chunk, process_chunk
from invoice_pipeline.engine.leases import LeaseKeeper
from invoice_pipeline.engine.stages import (
    STAGES,
    Claimed,
    Done,
    StageEnv,
    run_stage,
)
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration import ops
from invoice_pipeline.orchestration.jobs import make_jobs
from invoice_pipeline.orchestration.resources import DocumentReader
from invoice_pipeline_tests.factories import pipeline_resources
from invoice_pipeline_tests.support import sweep_now
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import wait_for

T = TypeVar("T")
DETECT_DUPLICATES = STAGES[3]
assert DETECT_DUPLICATES.name == "detect_duplicates"


# -- harness -----------------------------------------------------------------------------------


@dataclass
class Background(Generic[T]):
    """`work()` in a thread; its result or its exception, and whether it has ended."""

    work: Callable[[], T]
    result: T | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.result = self.work()
        except BaseException as exc:  # handed to the test, which asserts on it
            self.error = exc
        finally:
            self.done.set()

    def join(self) -> None:
        self._thread.join(60)
        assert self.done.is_set(), "the background work never ended"


def named(url: str, application_name: str) -> str:
    """The URL, for sessions that pg_stat_activity shows under `application_name`."""
    return f"{url}{'&' if '?' in url else '?'}application_name={application_name}"


def waiting(url: str, application_name: str) -> bool:
    """Whether a session of `application_name` waits for a lock (of any kind) right now."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE a.application_name = %s AND NOT l.granted)",
            (application_name,),
        ).fetchone()
    return bool(row and row[0])


def waiting_transaction(url: str, application_name: str) -> tuple[int, Any] | None:
    """The session of `application_name` that waits for a lock right now, as (pid, xact_start):
    the same pair later means the same transaction is still waiting (a rollback and a retry
    would show a new xact_start)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT a.pid, a.xact_start FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE a.application_name = %s AND NOT l.granted LIMIT 1",
            (application_name,),
        ).fetchone()
    return (int(row[0]), row[1]) if row else None


def heartbeat_of(url: str, job_id: UUID) -> Any:
    """The job's committed heartbeat, and its age by the database clock, in seconds."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT heartbeat_at, extract(epoch FROM clock_timestamp() - heartbeat_at) "
            "FROM processing_jobs WHERE id = %s",
            (job_id,),
        ).fetchone()
    assert row is not None
    return row


def job_status(url: str, job_id: UUID) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT status FROM processing_jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


class InProcessReader:
    """The real document reader, in this process."""

    def __init__(self) -> None:
        self.inner = DocumentReader(isolate=False)

    def read_text(self, content: bytes, filename: str | None, max_bytes: int) -> Any:
        return self.inner.read_text(content, filename, max_bytes)

    def read_fields(self, extracted: Any) -> Any:
        return self.inner.read_fields(extracted)


def stage_env(store: InvoiceStore) -> StageEnv:
    return StageEnv(
        store=store,
        parser=InProcessReader(),
        max_document_bytes=DEFAULT_MAX_DOCUMENT_BYTES,
        max_stage_seconds=120,
        max_attempts=5,
        retry_base=timedelta(minutes=1),
    )


def processed_original(store: InvoiceStore, number: str) -> UUID:
    """An invoice that went through the whole pipeline: an original, processed and posted."""
    invoice = store.documents.store_document(json_invoice(number), "acme", f"{number}.json").invoice_id
    chunk = claim_chunk(store, [(invoice, None)], "earlier-run")
    result = process_chunk(stage_env(store), chunk)
    assert invoice in result.finished.written
    return invoice


def up_to_dedupe(store: InvoiceStore, invoice: UUID, owner: str) -> list[Claimed]:
    """The invoice claimed by `owner` and taken through text, fields and validation."""
    chunk: list[Claimed] | tuple[Claimed, ...] = claim_chunk(store, [(invoice, None)], owner)
    assert [c.invoice_id for c in chunk] == [invoice]
    env = stage_env(store)
    for stage in STAGES[:3]:
        chunk = run_stage(stage, env, chunk).survivors
    assert [c.invoice_id for c in chunk] == [invoice]
    return list(chunk)


@pytest.fixture
def stores(database_url: str) -> Iterator[Callable[[str], InvoiceStore]]:
    """Stores whose sessions carry an application name, so pg_locks can tell who waits."""
    made: list[InvoiceStore] = []

    def make(application_name: str) -> InvoiceStore:
        made.append(InvoiceStore(named(database_url, application_name), max_size=3))
        return made[-1]

    yield make
    for store in made:
        store.close()


# -- 1. a claim that should bounce never aborts the holder --------------------------------------


@pytest.mark.parametrize("holder_waits_on", ["dedupe_lock", "original_row"])
def test_a_claim_bounces_off_a_holder_mid_write_and_the_holder_goes_on(
    database_url: str, stores: Callable[[str], InvoiceStore], holder_waits_on: str
) -> None:
    """The holder of invoice A is inside its duplicate decision's transaction, waiting: for a
    dedupe advisory lock another decision holds (`dedupe_lock`), or, after its fence, for the row
    of the original it is a copy of (`original_row`). Another run claims A meanwhile. The claim
    must bounce without waiting for the holder, and the holder's decision must be written.

    Against the old code (claim: invoice row, then job row; chunk write: job row, then invoice
    row) the claim did not bounce while the holder waited: it locked A's row and waited on the
    holder's fenced job row. dedupe_lock: once the holder went on it needed A's row, a deadlock,
    and after deadlock_timeout PostgreSQL aborted one of the two (in the recorded run the claim:
    `DeadlockDetected` from acquire_processing_locks; when it picks the holder, run_stage raises it
    as systemic and the whole stage fails). original_row: the claim stayed blocked until the
    holder's transaction ended ("the claim waited for the holder's write").
    """
    holder_store, intruder_store = stores("holder"), stores("intruder")
    if holder_waits_on == "original_row":
        original = processed_original(holder_store, "LV-100")
        invoice = holder_store.documents.store_document(
            json_invoice("LV-100", po_number="resent"), "acme"
        ).invoice_id
    else:
        invoice = holder_store.documents.store_document(json_invoice("LV-200"), "acme", "a.json").invoice_id
    chunk = up_to_dedupe(holder_store, invoice, "holder-run")
    fields = holder_store.documents.load_fields(invoice)
    assert fields is not None
    candidate = MatchCandidate.from_fields(str(invoice), "acme", fields)

    with psycopg.connect(database_url) as blocker:
        if holder_waits_on == "dedupe_lock":
            for lock_id in decision_lock_ids(candidate.block, candidate.number):
                blocker.execute("SELECT pg_advisory_xact_lock(%s)", (lock_id,))
        else:
            blocker.execute("SELECT 1 FROM invoices WHERE id = %s FOR UPDATE", (original,))
        holder = Background(lambda: run_stage(DETECT_DUPLICATES, stage_env(holder_store), chunk))
        wait_for(lambda: waiting(database_url, "holder"), what="the holder to wait inside its write")
        intruder = Background(lambda: claim_chunk(intruder_store, [(invoice, None)], "intruder-run"))
        wait_for(
            lambda: intruder.done.is_set() or waiting(database_url, "intruder"),
            what="the claim to bounce or to wait",
        )
        bounced_while_the_holder_waited = intruder.done.is_set()
        blocker.rollback()
    holder.join()
    intruder.join()

    assert holder.error is None, f"the holder's stage failed: {holder.error!r}"
    assert intruder.error is None, f"the claim failed instead of bouncing: {intruder.error!r}"
    assert intruder.result == [], "the claim bounced"
    assert holder.result is not None
    assert isinstance(holder.result.outcomes[invoice], Done), holder.result.outcomes
    decision = holder_store.dedupe.load_duplicate_decision(invoice)
    expected = "duplicate" if holder_waits_on == "original_row" else "original"
    assert decision is not None and decision.status == expected
    assert job_status(database_url, chunk[0].job_id) == "running"
    assert bounced_while_the_holder_waited, "the claim waited for the holder's write"


# -- 2. heartbeats and the sweep never queue behind a blocked chunk --------------------------------


def test_a_blocked_chunk_stops_neither_its_siblings_heartbeats_nor_the_sweep(
    database_url: str, stores: Callable[[str], InvoiceStore]
) -> None:
    """One process holds two chunks: A, a copy whose fenced duplicate decision waits for its
    original's row (a stuck session holds it), and a sibling S. The process's LeaseKeeper must go
    on heartbeating S (and count A alive: it is being written), and the global sweep must free a
    dead holder D at once, without waiting on A's locked job row.

    Against the old code the keeper's one heartbeat statement (FOR UPDATE over all the process's
    job rows) waited behind A's fenced write: S's heartbeat did not move for as long as A was
    blocked (the wait for it timed out), so with a TTL shorter than the block S would be swept
    while alive, and the sweep of D waited on A's row (lock_timeout hit).
    """
    worker = stores("worker")
    original = processed_original(worker, "LV-300")
    copy = worker.documents.store_document(json_invoice("LV-300", po_number="again"), "acme").invoice_id
    sibling = worker.documents.store_document(json_invoice("LV-301"), "acme", "s.json").invoice_id
    dead = worker.documents.store_document(json_invoice("LV-302"), "acme", "d.json").invoice_id
    chunk = up_to_dedupe(worker, copy, "run")
    (sibling_claim,) = claim_chunk(worker, [(sibling, None)], "run")
    (dead_claim,) = claim_chunk(worker, [(dead, None)], "dead-run")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE processing_jobs SET heartbeat_at = heartbeat_at - interval '1 hour' WHERE id = %s",
            (dead_claim.job_id,),
        )
    keeper = LeaseKeeper(worker.claims.heartbeat_many, timedelta(milliseconds=50))
    keeper.hold(chunk[0].job_id)
    keeper.hold(sibling_claim.job_id)
    holder: Background[Any] | None = None
    try:
        with psycopg.connect(database_url) as blocker:
            blocker.execute("SELECT 1 FROM invoices WHERE id = %s FOR UPDATE", (original,))
            holder = Background(lambda: run_stage(DETECT_DUPLICATES, stage_env(worker), chunk))
            blocked_write = wait_for(
                lambda: waiting_transaction(database_url, "worker"), what="the chunk to wait inside its write"
            )
            before, _ = heartbeat_of(database_url, sibling_claim.job_id)
            wait_for(
                lambda: heartbeat_of(database_url, sibling_claim.job_id)[0] > before,
                what="the sibling's heartbeat while the other chunk is blocked",
            )
            # The beat must have gone through while that very write still waited: a heartbeat
            # queued behind it would only pass once the write's lock_timeout rolled it back.
            assert waiting_transaction(database_url, "worker") == blocked_write, (
                "the sibling's heartbeat moved only after the blocked write had ended"
            )
            # The sweep that follows takes every lease whose committed heartbeat is in the past
            # (stale_after 0): the dead holder, and the blocked chunk, whose job row its own write
            # holds and which the sweep must skip without waiting. The sibling leaves the keeper
            # and is stamped an hour ahead, so no pace of the keeper's decides the count.
            keeper.drop(sibling_claim.job_id)
            with psycopg.connect(database_url, autocommit=True) as conn:
                conn.execute(
                    "UPDATE processing_jobs SET heartbeat_at = clock_timestamp() + interval '1 hour' WHERE id = %s",
                    (sibling_claim.job_id,),
                )
            with psycopg.connect(database_url, autocommit=True) as sweeper:
                sweeper.execute("SET lock_timeout = '3s'")
                row = sweeper.execute("SELECT release_stale_locks(NULL, interval '0 seconds')").fetchone()
            assert row is not None and row[0] == 1, f"swept {row}: only the dead holder"
            assert not keeper.is_lost(chunk[0].job_id), "a lease being written counts as alive"
            assert not keeper.is_lost(sibling_claim.job_id)
            blocker.rollback()
        holder.join()
    finally:
        keeper.stop()
        if holder is not None:
            holder.join()
    assert holder.error is None and holder.result is not None, repr(holder.error)
    assert isinstance(holder.result.outcomes[copy], Done), holder.result.outcomes
    assert job_status(database_url, chunk[0].job_id) == "running"
    assert job_status(database_url, sibling_claim.job_id) == "running"
    assert job_status(database_url, dead_claim.job_id) == "failed"


SCALE_OUT_TTL = timedelta(seconds=4)


def test_a_write_that_waited_after_its_fence_commits_a_fresh_heartbeat(
    database_url: str, stores: Callable[[str], InvoiceStore]
) -> None:
    """The schedule of issue 38, with the scale-out TTL of 4 s: a copy's duplicate decision
    passes its fence, then waits on its original's row (a stuck session holds it) for over 3 s
    while its job row is locked; the keeper's heartbeat skips that row. The write commits, and
    a claim of the invoice comes right after, before any keeper beat. The claim must bounce: the
    write's commit is a heartbeat.

    The job's heartbeat is back-dated to 0.9 s before the write (so the fence's one-second rule
    does not refresh it), and the blocker lets go only once, by the database clock, that
    committed heartbeat is older than the TTL. No keeper runs: nothing but the write can beat.
    Against the code before beat_at_commit the job committed its old heartbeat: "the committed
    heartbeat predates the blocker's release", and the claim swept the live lease and took it.
    """
    writer = stores("writer")
    # A lock_timeout over the wait: this is the wait of a slow peer, not of a stuck one.
    patient = InvoiceStore(
        named(database_url, "worker"), max_size=3, lock_ttl=SCALE_OUT_TTL, lock_timeout=timedelta(seconds=30)
    )
    try:
        original = processed_original(writer, "LV-350")
        copy = writer.documents.store_document(json_invoice("LV-350", po_number="again"), "acme").invoice_id
        chunk = up_to_dedupe(patient, copy, "run")
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE processing_jobs SET heartbeat_at = clock_timestamp() - interval '0.9 seconds' WHERE id = %s",
                (chunk[0].job_id,),
            )
        with psycopg.connect(database_url) as blocker:
            blocker.execute("SELECT 1 FROM invoices WHERE id = %s FOR UPDATE", (original,))
            holder = Background(lambda: run_stage(DETECT_DUPLICATES, stage_env(patient), chunk))
            wait_for(lambda: waiting(database_url, "worker"), what="the write to wait after its fence")
            wait_for(
                lambda: heartbeat_of(database_url, chunk[0].job_id)[1] > SCALE_OUT_TTL.total_seconds(),
                timeout=60,
                what="the waiting write's committed heartbeat to be older than the TTL",
            )
            row = blocker.execute("SELECT clock_timestamp()").fetchone()
            assert row is not None
            released_at = row[0]
            blocker.rollback()
        holder.join()
        assert holder.error is None and holder.result is not None, repr(holder.error)
        assert isinstance(holder.result.outcomes[copy], Done), holder.result.outcomes
        claimed = claim_chunk(writer, [(copy, None)], "other-run")
        beat, _ = heartbeat_of(database_url, chunk[0].job_id)
        assert beat > released_at, "the committed heartbeat predates the blocker's release"
        assert claimed == [], "a claim right after the commit took the live lease"
        assert job_status(database_url, chunk[0].job_id) == "running"
    finally:
        patient.close()


# -- 3. maintenance re-checks under the row lock ------------------------------------------------

# Test-only: the maintenance store's sessions run as a role without superuser rights, under a
# row-level security policy on invoices whose check first waits for an advisory lock the test
# holds. A policy is evaluated while the statement reads its rows: after lock_orphans took its
# snapshot and before it locks the row, which is exactly the window of the race. (A trigger
# cannot pause a SELECT ... FOR UPDATE, and a pause in reschedule_failed's UPDATE comes after
# lock_orphans already holds the row, when no claim can commit any more.)
PAUSE_KEY = 2025_0025
PAUSE_SQL = f"""
CREATE FUNCTION test_pause_maintenance() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock({PAUSE_KEY});
    RETURN true;
END
$$;
ALTER TABLE invoices ENABLE ROW LEVEL SECURITY;
CREATE POLICY test_pause_maintenance ON invoices AS RESTRICTIVE TO {{role}} USING (test_pause_maintenance());
CREATE POLICY everyone_else ON invoices TO PUBLIC USING (true);
GRANT ALL ON ALL TABLES IN SCHEMA public TO {{role}};
GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {{role}};
"""


@pytest.fixture
def paused_role(database_url: str) -> Iterator[str]:
    """A role (cluster-wide, so uniquely named) whose reads of invoices pause at the gate. The
    test server trusts local connections, as it does for its superuser."""
    role = f"ip_test_paused_{uuid4().hex[:12]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            psycopg.sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                psycopg.sql.Identifier(role), psycopg.sql.Literal(role)
            )
        )
        conn.execute(PAUSE_SQL.format(role=role))
    yield role
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("DROP OWNED BY {}").format(psycopg.sql.Identifier(role)))
        conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))


def test_maintenance_never_reschedules_an_invoice_claimed_after_its_snapshot(
    database_url: str, stores: Callable[[str], InvoiceStore], paused_role: str
) -> None:
    """Invoice X was left 'processing' by a holder that was swept (an orphan). The maintenance
    statement that locks orphans takes its snapshot and pauses before it locks X's row; a run
    claims X and commits; maintenance goes on, locks X (its row still says 'processing') and
    reschedules. X must end held by the run and 'processing', not 'failed': reschedule_failed's
    re-check (`NOT EXISTS` a running job, read after the row lock) is what leaves it alone.

    Against the old code the one reschedule statement decided "no running job" from its snapshot
    and FOR UPDATE SKIP LOCKED re-checked only the invoice row's own columns (still
    'processing'): X was marked failed (due at once, so the sensor would request a second run)
    while the claimer's job was running. With the re-check removed from reschedule_failed, this
    test fails the same way: "a live invoice was marked failed".
    """
    store, claimer_store = stores("setup"), stores("claimer")
    host_and_port = urlsplit(database_url).netloc.rpartition("@")[2]
    maintenance = InvoiceStore(
        named(
            urlsplit(database_url)._replace(netloc=f"{paused_role}:{paused_role}@{host_and_port}").geturl(),
            "paused-maintenance",
        ),
        max_size=2,
    )
    orphan = store.documents.store_document(json_invoice("LV-400"), "acme", "x.json").invoice_id
    claim_chunk(store, [(orphan, None)], "dead-run")
    assert sweep_now(database_url, orphan) == 1

    with psycopg.connect(database_url, autocommit=True) as gate:
        gate.execute("SELECT pg_advisory_lock(%s)", (PAUSE_KEY,))
        rescheduling = Background(
            lambda: maintenance.maintenance.reschedule_orphans(max_attempts=5, retry_base=timedelta(0))
        )
        wait_for(lambda: waiting(database_url, "paused-maintenance"), what="maintenance to pause")
        claimed = claim_chunk(claimer_store, [(orphan, None)], "live-run")
        assert [c.invoice_id for c in claimed] == [orphan], "the claim committed while maintenance paused"
        gate.execute("SELECT pg_advisory_unlock(%s)", (PAUSE_KEY,))
    rescheduling.join()
    maintenance.close()

    assert rescheduling.error is None, rescheduling.error
    assert rescheduling.result is not None
    holder = store.claims.current_holder(orphan)
    assert holder is not None and holder.owner == "live-run"
    state = store.documents.invoice_state(orphan)
    assert state is not None
    assert state.status == "processing", f"a live invoice was marked {state.status}: {state.last_error}"


def test_the_sweep_skips_an_orphan_someone_is_writing_and_takes_it_at_the_next_sweep(
    database_url: str, stores: Callable[[str], InvoiceStore]
) -> None:
    """An orphan whose row another transaction holds (a review, a claim in flight) is left to the
    next sweep, never waited for: a sweep queued behind a row lock would stall every other
    orphan and the requests behind it. The sweeper's lock_timeout is short, so a wait would
    show as contention (or an error), not as a slow test."""
    store = stores("setup")
    orphan = store.documents.store_document(json_invoice("LV-401"), "acme", "x.json").invoice_id
    claim_chunk(store, [(orphan, None)], "dead-run")
    assert sweep_now(database_url, orphan) == 1
    sweeper = InvoiceStore(
        named(database_url, "orphan-sweeper"), max_size=2, lock_timeout=timedelta(milliseconds=300)
    )
    try:
        with psycopg.connect(database_url) as writer:
            writer.execute("SELECT 1 FROM invoices WHERE id = %s FOR NO KEY UPDATE", (orphan,))
            first = sweeper.maintenance.reschedule_orphans(max_attempts=5, retry_base=timedelta(0))
            assert orphan not in [r.invoice_id for r in first], "an orphan someone is writing was rescheduled"
            assert not sweeper.contention, (
                f"the sweep waited for a row someone holds: {dict(sweeper.contention)}"
            )
            writer.rollback()
        second = sweeper.maintenance.reschedule_orphans(max_attempts=5, retry_base=timedelta(0))
    finally:
        sweeper.close()
    assert [r.invoice_id for r in second if r.invoice_id == orphan] == [orphan], "the next sweep left it"


# -- 4. no lease without a worker ----------------------------------------------------------------


def _run_batch(database_url: str, invoice_ids: list[UUID]) -> Any:
    _, batch = make_jobs(pipeline_resources(database_url, reader=DocumentReader(isolate=False)))
    with DagsterInstance.ephemeral() as instance:
        return batch.execute_in_process(
            run_config={"ops": {"fan_out": {"config": {"invoice_ids": [str(i) for i in invoice_ids]}}}},
            raise_on_error=False,
            instance=instance,
        )


def _assert_nothing_left_running(store: InvoiceStore, invoice: UUID) -> None:
    holder = store.claims.current_holder(invoice)
    assert holder is None, f"after the run ended, its lease is still running: {holder}"
    state = store.documents.invoice_state(invoice)
    assert state is not None and state.status in ("failed", "pending"), state


def test_a_claim_that_fails_after_taking_its_leases_releases_them(
    database_url: str, store: InvoiceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim op takes invoice A's lease, then fails while explaining why another invoice of
    the chunk (held elsewhere) was not claimed, on every try. When the run has ended, A must not
    be left running: released and rescheduled.

    Against the old code A's job stayed 'running' after the run ended, heartbeated by the
    process's LeaseKeeper (the retries' claims bounced off it: no same-owner adoption), so no
    sweep could free it while the process lived.
    """
    free = store.documents.store_document(json_invoice("LV-500"), "acme", "a.json").invoice_id
    held = store.documents.store_document(json_invoice("LV-501"), "acme", "b.json").invoice_id
    assert store.claims.acquire(held, 1, owner="elsewhere") is not None

    def explaining_fails(*args: object) -> None:
        raise RuntimeError("the run's log storage is unreachable")

    monkeypatch.setattr(ops, "_explain_unclaimed", explaining_fails)
    result = _run_batch(database_url, [free, held])
    assert not result.success
    _assert_nothing_left_running(store, free)


def test_a_stage_op_that_fails_outside_its_stage_releases_its_chunk(
    database_url: str, store: InvoiceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The extract_text op does its work, then fails reporting it (materializing its assets), on
    every try. When the run has ended, the chunk's lease must not be left running.

    Against the old code the failure escaped the op's try block, which only covered the stage
    itself: the lease stayed 'running', heartbeated by the LeaseKeeper, with no stage to work it.
    """
    invoice = store.documents.store_document(json_invoice("LV-600"), "acme", "a.json").invoice_id

    def reporting_fails(*args: object) -> None:
        raise RuntimeError("the event log is unreachable")

    monkeypatch.setattr(ops, "report_stage", reporting_fails)
    result = _run_batch(database_url, [invoice])
    assert not result.success
    _assert_nothing_left_running(store, invoice)


# -- contention is one statement's problem ------------------------------------------------------


def test_a_write_that_loses_to_contention_is_retried_then_fails_only_its_invoice(
    database_url: str, store: InvoiceStore
) -> None:
    """A chunk of two whose write cannot get one invoice's row (a stuck session holds it, past
    the store's lock_timeout): the chunk write is retried, then written an invoice at a time, and
    only that invoice fails; the stage does not raise. A second write, whose blocker lets go after
    the first lock timeout, is retried and goes through.

    Not run against the old code as is (the store had no lock_timeout setting, and
    `is_contention` is new): there a lock timeout (LockNotAvailable, an OperationalError) was
    systemic by `is_systemic`, so the write raised out of the stage instead of failing one invoice.
    """
    from invoice_pipeline.engine.store import is_contention, is_systemic

    for error in (
        psycopg.errors.DeadlockDetected,
        psycopg.errors.LockNotAvailable,
        psycopg.errors.SerializationFailure,
        psycopg.errors.QueryCanceled,
    ):
        assert is_contention(error()) and not is_systemic(error())
    assert is_systemic(psycopg.errors.AdminShutdown()) and not is_contention(psycopg.errors.AdminShutdown())

    impatient = InvoiceStore(
        named(database_url, "impatient"), max_size=2, lock_timeout=timedelta(milliseconds=50)
    )
    try:
        stuck, free, later = (
            store.documents.store_document(json_invoice(f"LV-70{n}"), "acme", f"{n}.json").invoice_id
            for n in range(3)
        )
        chunk = claim_chunk(store, [(stuck, None), (free, None), (later, None)], "run")
        leases = {c.invoice_id: c.lease for c in chunk}
        with psycopg.connect(database_url) as blocker:
            blocker.execute("SELECT 1 FROM invoices WHERE id = %s FOR UPDATE", (stuck,))
            written = impatient.documents.record_steps(
                "extract_text", [leases[stuck], leases[free]], {stuck, free}
            )
        assert set(written.written) == {free}
        assert set(written.failed) == {stuck} and isinstance(
            written.failed[stuck], psycopg.errors.LockNotAvailable
        )
        assert impatient.contention["gave_up"] >= 2, impatient.contention

        before = sum(impatient.contention.values())
        with psycopg.connect(database_url) as blocker:
            blocker.execute("SELECT 1 FROM invoices WHERE id = %s FOR UPDATE", (later,))
            writing = Background(
                lambda: impatient.documents.record_steps("extract_text", [leases[later]], {later})
            )
            wait_for(lambda: sum(impatient.contention.values()) > before, what="the first lock timeout")
            blocker.rollback()
        writing.join()
        assert writing.error is None and writing.result is not None
        assert set(writing.result.written) == {later}, writing.result
    finally:
        impatient.close()
