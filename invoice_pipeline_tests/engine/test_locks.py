"""The durable job lock: contention, process death, heartbeats, fencing — real processes, real Postgres."""

from __future__ import annotations

import os
import random
import signal
from datetime import timedelta
from decimal import Decimal
from uuid import UUID

import psycopg
import pytest

from chaos.common import worker_context
from invoice_pipeline.documents import ExtractedText
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.matching import MatchCandidate
from invoice_pipeline.engine.chunk_loop import claim_chunk
from invoice_pipeline.engine.leases import LeaseKeeper, LeaseLost
from invoice_pipeline.engine.records import MatchOutcome
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.support import db_seconds_since, sweep_now
from pipeline_support.helpers import wait_for

PROCESSES = 8
ROUNDS = 25
INVOICES = 6


def _new_invoices(url: str, n: int, org: str = "acme") -> list[UUID]:
    with psycopg.connect(url) as conn:
        return [
            conn.execute("INSERT INTO invoices (org_id) VALUES (%s) RETURNING id", (org,)).fetchone()[0]
            for _ in range(n)
        ]  # type: ignore[index]


def _hammer(url: str, invoices: list[str], rounds: int, barrier, queue) -> None:  # type: ignore[no-untyped-def]
    store = InvoiceStore(url, max_size=2)
    rng = random.Random(os.getpid())
    try:
        for rnd in range(1, rounds + 1):
            order = invoices[:]
            rng.shuffle(order)
            barrier.wait()
            won = []
            for inv in order:
                lease = store.claims.acquire(inv, rnd, owner=f"pid:{os.getpid()}")
                if lease is not None:
                    won.append(lease)
            queue.put((rnd, os.getpid(), [str(lease.invoice_id) for lease in won]))
            barrier.wait()  # everyone has tried while the winners still hold
            for lease in won:
                assert store.claims.finish(lease.job_id, "succeeded")
            barrier.wait()
    finally:
        store.close()


@pytest.mark.slow
def test_redelivery_race_one_winner_per_invoice_per_round(database_url: str) -> None:
    invoices = [str(i) for i in _new_invoices(database_url, INVOICES)]
    ctx = worker_context()
    barrier, queue = ctx.Barrier(PROCESSES), ctx.Queue()
    procs = [
        ctx.Process(target=_hammer, args=(database_url, invoices, ROUNDS, barrier, queue))
        for _ in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    results = [queue.get(timeout=300) for _ in range(PROCESSES * ROUNDS)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    for rnd in range(1, ROUNDS + 1):
        winners: dict[str, list[int]] = {}
        for r, pid, won in results:
            if r == rnd:
                for inv in won:
                    winners.setdefault(inv, []).append(pid)
        assert sorted(winners) == sorted(invoices), f"round {rnd}: some invoice had no winner"
        doubles = {inv: pids for inv, pids in winners.items() if len(pids) != 1}
        assert not doubles, f"round {rnd}: two holders at once: {doubles}"
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT invoice_id, attempt, count(*) FROM processing_jobs GROUP BY 1, 2 HAVING count(*) <> 1"
        ).fetchall()
        assert rows == []
        total = conn.execute("SELECT count(*) FROM processing_jobs").fetchone()
        assert total is not None and total[0] == INVOICES * ROUNDS


def _acquire_and_hang(url: str, invoice_id: str, ready) -> None:  # type: ignore[no-untyped-def]
    store = InvoiceStore(url, max_size=1)
    lease = store.claims.acquire(invoice_id, 1, owner=f"doomed:{os.getpid()}")
    assert lease is not None
    ready.set()
    signal.pause()  # hold the lock until killed


def test_holder_killed_with_sigkill_is_swept_and_retried(database_url: str, store: InvoiceStore) -> None:
    (invoice,) = _new_invoices(database_url, 1)
    ctx = worker_context()
    ready = ctx.Event()
    child = ctx.Process(target=_acquire_and_hang, args=(database_url, str(invoice), ready))
    child.start()
    assert ready.wait(60)
    os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
    child.join(30)
    assert child.exitcode == -signal.SIGKILL

    holder = store.claims.current_holder(invoice)
    assert holder is not None and holder.owner == f"doomed:{child.pid}", (
        "the lock must survive its holder's death"
    )
    assert store.claims.acquire(invoice, 2) is None, "a live-looking lock still refuses others"
    assert sweep_now(database_url, invoice, ttl=timedelta(hours=1)) == 0, "not stale yet"

    ttl = timedelta(milliseconds=200)
    wait_for(
        lambda: (
            db_seconds_since(
                database_url, "SELECT heartbeat_at FROM processing_jobs WHERE invoice_id = %s", (invoice,)
            )
            > 0.2
        ),
        what="the dead holder's heartbeat to age past the TTL on the DB clock",
    )
    assert sweep_now(database_url, invoice, ttl) == 1
    retry = store.claims.acquire(invoice, 2, owner="rescuer")
    assert retry is not None
    history = store.claims.job_history(invoice)
    assert [(j.attempt, j.status) for j in history] == [(1, "failed"), (2, "running")]
    assert history[0].error is not None and history[0].error.startswith("swept:")
    assert history[0].owner == f"doomed:{child.pid}"


def test_heartbeating_lease_outlives_ttl_and_silent_one_is_swept(
    database_url: str, store: InvoiceStore
) -> None:
    alive_inv, silent_inv = _new_invoices(database_url, 2)
    ttl = timedelta(milliseconds=600)
    alive = store.claims.acquire(alive_inv, 1, owner="alive")
    silent = store.claims.acquire(silent_inv, 1, owner="silent")
    assert alive is not None and silent is not None
    swept_total = 0
    keeper = LeaseKeeper(store.claims.heartbeat_many, timedelta(milliseconds=100))
    keeper.hold(alive.job_id)
    sweeper = InvoiceStore(database_url, max_size=1, lock_ttl=ttl)
    try:

        def sweep_until_alive_ran_past_ttl() -> bool:
            nonlocal swept_total
            swept_total += sweeper.maintenance.release_stale_locks()
            return (
                db_seconds_since(
                    database_url, "SELECT started_at FROM processing_jobs WHERE id = %s", (alive.job_id,)
                )
                > 4 * ttl.total_seconds()
            )

        wait_for(sweep_until_alive_ran_past_ttl, interval=0.05, what="the live lease to run 4x its TTL")
        assert not keeper.is_lost(alive.job_id)
        assert store.claims.heartbeat(alive.job_id), "the heartbeating lease is still running"
    finally:
        keeper.stop()
        sweeper.close()
    assert swept_total == 1, "exactly the silent lease was swept"
    assert [j.status for j in store.claims.job_history(silent_inv)] == ["failed"]
    assert not store.claims.heartbeat(silent.job_id)


def test_the_store_sweeps_with_the_ttl_it_was_opened_with_on_claim_and_in_the_sweep(
    database_url: str, store: InvoiceStore
) -> None:
    """The lease TTL is the store's, set once when it is opened (issue 57): a chunk claim's sweep
    and the sweep free a lease whose heartbeat is older than it, never a younger one, and
    nobody passes a TTL per call."""
    young, old, swept, alive = _new_invoices(database_url, 4)
    for invoice in (young, old, swept, alive):
        assert store.claims.acquire(invoice, 1, owner="holder") is not None

    def backdate(invoice: UUID, interval: str) -> None:
        with psycopg.connect(database_url) as conn:
            conn.execute(
                "UPDATE processing_jobs SET heartbeat_at = clock_timestamp() - %s::interval "
                "WHERE invoice_id = %s AND status = 'running'",
                (interval, invoice),
            )

    for invoice in (young, alive):
        backdate(invoice, "30 seconds")  # the product's default TTL, but within this store's
    for invoice in (old, swept):
        backdate(invoice, "2 minutes")
    minute = InvoiceStore(database_url, max_size=1, lock_ttl=timedelta(minutes=1))
    try:
        assert minute.lock_ttl == timedelta(minutes=1)
        claimed = claim_chunk(minute, [(young, None), (old, None)], "claimer")
        assert [c.invoice_id for c in claimed] == [old], "the claim swept the stale lease alone"
        assert minute.maintenance.release_stale_locks() == 1, "the sweep frees the stale lease alone"
    finally:
        minute.close()
    for invoice, owner in ((young, "holder"), (old, "claimer"), (alive, "holder")):
        holder = store.claims.current_holder(invoice)
        assert holder is not None and holder.owner == owner, invoice
    assert store.claims.current_holder(swept) is None


def _snapshot(url: str) -> dict[str, list[tuple[object, ...]]]:
    tables = [
        "invoices",
        "processing_jobs",
        "extracted_texts",
        "approvals",
        "ledger_postings",
        "duplicate_groups",
        "step_events",
    ]
    with psycopg.connect(url) as conn:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in tables}  # noqa: S608


def test_zombie_cannot_write_anything(database_url: str, store: InvoiceStore) -> None:
    (invoice,) = _new_invoices(database_url, 1)
    lease = store.claims.acquire(invoice, 1, owner="zombie")
    assert lease is not None
    assert sweep_now(database_url, invoice) == 1  # the holder "died"
    before = _snapshot(database_url)
    fields = InvoiceFields(
        invoice_number="INV-1", currency="EUR", payable_total=Decimal("10.00"), seller_name="Zed"
    )
    writes = {
        "breadcrumb": lambda: store.documents.record_step(lease, "extract_text", skipped=False),
        "skip crumb": lambda: store.documents.record_step(lease, "extract_text", skipped=True),
        "text": lambda: store.documents.save_extracted_text(lease, ExtractedText("pdf", "t", None, "x", 1)),
        "fields": lambda: store.documents.save_fields(lease, fields),
        "dedupe": lambda: store.dedupe.decide_duplicate(
            lease, MatchCandidate.from_fields(str(invoice), "acme", fields), lambda candidate, rows: None
        ),
        "approval": lambda: store.documents.record_approval(lease, "approved", "test"),
        "ledger": lambda: store.documents.post_to_ledger(lease, "acme", Decimal("10.00"), "EUR"),
        "complete": lambda: store.claims.complete(lease),
        "quarantine": lambda: store.claims.quarantine(lease, "x", "y"),
    }
    for write in writes.values():
        with pytest.raises(LeaseLost, match="swept"):
            write()
    assert store.claims.heartbeat(lease.job_id) is False
    assert store.claims.finish(lease.job_id, "succeeded") is False
    assert _snapshot(database_url) == before, "a zombie write landed"


def test_fenced_write_in_flight_holds_off_the_sweep(database_url: str, store: InvoiceStore) -> None:
    """The fence row-locks the job: a sweep cannot slip in between an in-flight write's fence and
    its commit. Since sql/0009 it does not wait for the write either: the row being written is
    skipped as alive (a lock_timeout shows that nothing waited), and swept once it is stale and
    no longer being written."""
    (invoice,) = _new_invoices(database_url, 1)
    lease = store.claims.acquire(invoice, 1)
    assert lease is not None
    with store.database.fenced(lease):  # a write in progress
        with psycopg.connect(database_url, autocommit=True) as other:
            other.execute("SET lock_timeout = '300ms'")
            row = other.execute("SELECT release_stale_locks(%s, '0')", (invoice,)).fetchone()
            assert row == (0,), "the sweep skipped the job being written"
            row = other.execute("SELECT release_stale_locks(NULL, '0')").fetchone()
            assert row == (0,), "the global sweep skipped it too"
    assert sweep_now(database_url, invoice) == 1


def test_a_write_refreshes_a_heartbeat_over_a_second_old_and_leaves_a_fresh_one(
    database_url: str, store: InvoiceStore
) -> None:
    """A fenced write counts as a heartbeat (sql/0009), but rewrites the job row only when its
    heartbeat is over a second old (sql/0013): a chunk's many writes do not rewrite its rows."""
    (invoice,) = _new_invoices(database_url, 1)
    lease = store.claims.acquire(invoice, 1)
    assert lease is not None

    def heartbeat() -> tuple[object, int]:
        with psycopg.connect(database_url) as conn:
            row = conn.execute(
                "SELECT heartbeat_at, xmin::text::bigint FROM processing_jobs WHERE id = %s", (lease.job_id,)
            ).fetchone()
        assert row is not None
        return row[0], row[1]

    def backdate(interval: str) -> None:
        with psycopg.connect(database_url) as conn:
            conn.execute(
                "UPDATE processing_jobs SET heartbeat_at = clock_timestamp() - %s::interval WHERE id = %s",
                (interval, lease.job_id),
            )

    backdate("1 hour")
    store.documents.record_executed("validate", [lease])
    assert (
        db_seconds_since(
            database_url, "SELECT heartbeat_at FROM processing_jobs WHERE id = %s", (lease.job_id,)
        )
        < 60
    )
    backdate("200 milliseconds")
    before = heartbeat()
    store.documents.record_executed("approve", [lease])
    assert heartbeat() == before, "a fresh heartbeat: the job row was locked, not rewritten"


def test_finished_jobs_are_immutable_and_never_deleted(database_url: str, store: InvoiceStore) -> None:
    (invoice,) = _new_invoices(database_url, 1)
    lease = store.claims.acquire(invoice, 1)
    assert lease is not None and store.claims.finish(lease.job_id, "succeeded")
    with psycopg.connect(database_url) as conn:
        with pytest.raises(psycopg.errors.RestrictViolation, match="never deleted"):
            conn.execute("DELETE FROM processing_jobs")
    with psycopg.connect(database_url) as conn:
        with pytest.raises(psycopg.errors.RestrictViolation, match="cannot change"):
            conn.execute("UPDATE processing_jobs SET status = 'running', finished_at = NULL")


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda s: s.claims.acquire("not-a-uuid", 1), "invoice_id must be a UUID"),
        (
            lambda s: s.claims.acquire("00000000-0000-0000-0000-000000000001", 0),
            "attempt must be a positive integer",
        ),
        (
            lambda s: s.claims.acquire("00000000-0000-0000-0000-000000000001", -3),
            "attempt must be a positive integer",
        ),
        (lambda s: s.claims.finish("00000000-0000-0000-0000-000000000001", "done"), "status must be one of"),
    ],
)
def test_bad_arguments_fail_before_any_sql(store: InvoiceStore, call, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        call(store)


def test_sql_functions_refuse_bad_arguments_too(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="succeeded or failed"):
            conn.execute("SELECT finish_processing_lock(gen_random_uuid(), 'done')")
    with psycopg.connect(database_url) as conn:
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("INSERT INTO invoices (org_id) VALUES ('a') RETURNING id")
            conn.execute("SELECT acquire_processing_lock((SELECT id FROM invoices LIMIT 1), 0)")


def test_matcher_never_sees_another_orgs_rows(database_url: str, store: InvoiceStore) -> None:
    seen: list[str] = []

    def record(candidate: MatchCandidate, rows: list[tuple[UUID, str, InvoiceFields]]) -> MatchOutcome | None:
        seen.extend(org for _, org, _ in rows)
        return None

    # One number, totals a cent apart: the same block neighbourhood in both orgs.
    for org, total in (("org-a", "5.00"), ("org-b", "5.00"), ("org-a", "5.01")):
        fields = InvoiceFields(
            invoice_number="1", currency="EUR", payable_total=Decimal(total), seller_name="V"
        )
        (inv,) = _new_invoices(database_url, 1, org)
        lease = store.claims.acquire(inv, 1)
        assert lease is not None
        store.documents.save_fields(lease, fields)
        decision = store.dedupe.decide_duplicate(
            lease, MatchCandidate.from_fields(str(inv), org, fields), record
        )
        assert decision.status == "original"
    assert seen == ["org-a"], "only the first org-a invoice is a candidate for the second one"


def test_unique_index_refuses_a_second_original_even_without_the_lock(database_url: str) -> None:
    insert = (
        "INSERT INTO invoices (org_id, business_key, payable_total, currency, block_key, duplicate_status)"
        " VALUES (%s, 'k', 10, 'EUR', 42, 'original')"
    )
    with psycopg.connect(database_url) as conn:
        conn.execute(insert, ("acme",))
        conn.execute(insert, ("other-org",))  # another org's key space
        with pytest.raises(psycopg.errors.UniqueViolation, match="invoices_one_original_per_key"):
            conn.execute(insert, ("acme",))
