"""Advisory-locked duplicate detection under real concurrency: processes, not threads."""

from __future__ import annotations

import queue
import re
import tempfile
import threading
from collections.abc import Callable
from typing import TypeVar
from uuid import UUID

import psycopg
import pytest
from psycopg import pq

from benchmarks.datasets import insert_decided_originals
from benchmarks.datasets import invoice_fields as fields_for
from chaos.common import worker_context
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.keys import lock_ids
from invoice_pipeline.domain.matching import MatchCandidate
from invoice_pipeline.domain.normalize import blocking_key
from invoice_pipeline.engine.dedupe import decide_duplicate, match_outcome
from invoice_pipeline.engine.records import Lease
from invoice_pipeline.engine.store import InvoiceStore
from pipeline_support.helpers import wait_for

PROCESSES = 8
ROUNDS = 5
T = TypeVar("T")

# One invoice written many ways: the same seller and total, the number reformatted, and the
# seller named by VAT id in some copies and by name alone in others (two business keys).
NUMBER_SPELLINGS = ["INV-00123", "inv 123", "INV123", "Inv.#0123", "INV-123", "inv-000123"]
VAT_IDS = ["DE123456789", None, "DE123456789"]


def _decider(  # type: ignore[no-untyped-def]
    url: str, inbox, barrier, results, *, lockstep: bool
) -> None:
    """One deciding process: round after round, it takes its share of invoices from `inbox` (None
    ends it) and decides them, all processes starting at the same moment.

    With `lockstep`, the processes meet at the barrier before every decision, so the i-th
    invoices of all processes are decided at the same moment (a race per round).
    """
    store = InvoiceStore(url, max_size=2)
    try:
        while (jobs := inbox.get()) is not None:
            try:
                leases = []
                for invoice_id, org, fields in jobs:
                    lease = store.claims.acquire(invoice_id, 1)
                    assert lease is not None
                    store.documents.save_fields(lease, fields)
                    leases.append((lease, org, fields))
                barrier.wait()
                for lease, org, fields in leases:
                    if lockstep:
                        barrier.wait()
                    decision = decide_duplicate(store, lease, org, fields)
                    results.put((str(lease.invoice_id), org, decision.status, str(decision.original_id)))
            except Exception as exc:  # reported to the test instead of leaving it waiting on the queue
                barrier.abort()  # the others stop waiting for this one
                results.put(("error", repr(exc), "", ""))
                raise
    finally:
        store.close()


class Deciders:
    """Processes that decide duplicates together, one race per `round` (forked from the
    preloaded fork server, chaos.common.worker_context).

    The processes are started once and serve every round: a round costs the race, not a Python
    start-up per process (which, ten rounds of four, was most of a test's time)."""

    def __init__(self, url: str, processes: int, *, lockstep: bool = False) -> None:
        ctx = worker_context()
        # Kept by the parent for the children's whole life: a collected barrier's semaphore is
        # unlinked before a child has unpickled it.
        self.barrier, self.results = ctx.Barrier(processes), ctx.Queue()
        self.inboxes = [ctx.Queue() for _ in range(processes)]
        self.procs = [
            ctx.Process(
                target=_decider, args=(url, inbox, self.barrier, self.results), kwargs={"lockstep": lockstep}
            )
            for inbox in self.inboxes
        ]
        for p in self.procs:
            p.start()

    def round(
        self, per_process: list[list[tuple[str, str, InvoiceFields]]]
    ) -> list[tuple[str, str, str, str]]:
        """Decide every job, one list per process; returns (invoice, org, status, original)."""
        assert len(per_process) == len(self.inboxes)
        for inbox, jobs in zip(self.inboxes, per_process, strict=True):
            inbox.put(jobs)
        results = [self._next_result() for _ in range(sum(len(jobs) for jobs in per_process))]
        assert not [r for r in results if r[0] == "error"], results
        return results

    def _next_result(self) -> tuple[str, str, str, str]:
        def arrived() -> tuple[str, str, str, str] | None:
            try:
                return self.results.get(timeout=0.5)  # type: ignore[no-any-return]
            except queue.Empty:
                ended = [p.exitcode for p in self.procs if p.exitcode is not None]
                assert not ended, f"a deciding process ended mid-round (exit codes {ended})"
                return None

        return wait_for(arrived, timeout=300, interval=0, what="a decision")

    def close(self) -> list[int | None]:
        """Ends every process; returns their exit codes."""
        for inbox in self.inboxes:
            inbox.put(None)
        for p in self.procs:
            p.join(60)
            if p.exitcode is None:
                p.kill()
                p.join()
        return [p.exitcode for p in self.procs]

    def __enter__(self) -> Deciders:
        return self

    def __exit__(self, failed: type[BaseException] | None, *_: object) -> None:
        exit_codes = self.close()
        # After a failed round, a process's error is already in the failure.
        assert failed is not None or exit_codes == [0] * len(exit_codes), exit_codes


def run_deciders(
    url: str, per_process: list[list[tuple[str, str, InvoiceFields]]], *, lockstep: bool = False
) -> list[tuple[str, str, str, str]]:
    """One round of Deciders: every job decided, one process per list."""
    with Deciders(url, len(per_process), lockstep=lockstep) as deciders:
        return deciders.round(per_process)


def new_invoice(url: str, org: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute("INSERT INTO invoices (org_id) VALUES (%s) RETURNING id", (org,)).fetchone()
        assert row is not None
        return str(row[0])


def forget_duplicate_decisions(url: str) -> None:
    """Every invoice undecided again, before the next round's race."""
    with psycopg.connect(url) as conn:
        conn.execute(
            "UPDATE invoices SET duplicate_status = NULL, duplicate_of = NULL, duplicate_group_id = NULL"
        )
        conn.execute("DELETE FROM duplicate_groups")


def _race_copies_of_one_invoice(url: str, deciders: Deciders) -> None:
    """One round: copies of one invoice in two orgs, decided by every process at once."""
    forget_duplicate_decisions(url)
    per_process: list[list[tuple[str, str, InvoiceFields]]] = [[] for _ in range(PROCESSES)]
    for i in range(PROCESSES * 3):
        org = "acme" if i % 4 else "globex"  # a second org with the very same invoice
        fields = fields_for(NUMBER_SPELLINGS[i % len(NUMBER_SPELLINGS)], vat=VAT_IDS[i % len(VAT_IDS)])
        per_process[i % PROCESSES].append((new_invoice(url, org), org, fields))
    results = deciders.round(per_process)
    for org in ("acme", "globex"):
        mine = [r for r in results if r[1] == org]
        originals = [r for r in mine if r[2] == "original"]
        assert len(originals) == 1, f"{org}: {len(originals)} originals among {len(mine)} copies"
        copies = [r for r in mine if r[2] in ("duplicate", "suspected")]
        assert len(copies) == len(mine) - 1
        assert {r[3] for r in copies} == {originals[0][0]}, "every copy points at the one original"
        # Named by VAT id on both sides: exact. By name on one side only: suspected.
        assert {r[2] for r in copies} == {"duplicate", "suspected"}


@pytest.mark.slow
def test_concurrent_copies_yield_exactly_one_original_per_org(database_url: str) -> None:
    with Deciders(database_url, PROCESSES) as deciders:
        for _ in range(ROUNDS):
            _race_copies_of_one_invoice(database_url, deciders)
    with psycopg.connect(database_url) as conn:
        cross = conn.execute(
            "SELECT count(*) FROM invoices d JOIN invoices o ON o.id = d.duplicate_of WHERE d.org_id <> o.org_id"
        ).fetchone()
    assert cross == (0,), "no org's invoice was ever grouped with another org's"


def test_different_keys_do_not_wait_on_each_other(database_url: str, store: InvoiceStore) -> None:
    """Hold key A's advisory lock in another session; deciding key B completes, deciding A waits."""
    a_inv, b_inv, a2_inv = (new_invoice(database_url, "acme") for _ in range(3))
    a_fields, b_fields = fields_for("A-1", total="100.00"), fields_for("B-7", total="200.00")
    a_locks = lock_ids(blocking_key("acme", a_fields))
    assert not set(a_locks) & set(lock_ids(blocking_key("acme", b_fields)))
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (a_locks[-1],))  # held until rollback below
        lease_b = store.claims.acquire(b_inv, 1)
        assert lease_b is not None
        store.documents.save_fields(lease_b, b_fields)
        assert decide_duplicate(store, lease_b, "acme", b_fields).status == "original"

        lease_a = store.claims.acquire(a_inv, 1)
        assert lease_a is not None
        store.documents.save_fields(lease_a, a_fields)
        done = threading.Event()
        outcome: list[str] = []

        def decide_a() -> None:
            outcome.append(decide_duplicate(store, lease_a, "acme", a_fields).status)
            done.set()

        worker = threading.Thread(target=decide_a)
        worker.start()
        with psycopg.connect(database_url) as observer:

            def a_is_waiting_on_the_advisory_lock() -> bool:
                row = observer.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                ).fetchone()
                return bool(row and row[0] == 1)

            wait_for(a_is_waiting_on_the_advisory_lock, what="deciding key A to block on A's lock")
        assert not done.is_set()
        holder.rollback()
    worker.join(30)
    assert outcome == ["original"]
    lease_a2 = store.claims.acquire(a2_inv, 1)
    assert lease_a2 is not None
    store.documents.save_fields(lease_a2, fields_for("a 1", total="100.00"))
    second = decide_duplicate(store, lease_a2, "acme", fields_for("a 1", total="100.00"))
    assert second.status == "duplicate" and second.original_id == UUID(a_inv)


# -- regressions: the three ways duplicates were paid twice ---------------------------------------

RACE_PAIRS = 40


@pytest.mark.slow
def test_fuzzy_copies_decided_at_the_same_moment_are_never_both_originals(database_url: str) -> None:
    """'INV-5000' and '5000' of one seller and total, decided by two processes released together.

    They used to lock disjoint keys (each its own normalised number) and both became originals.
    """
    first: list[tuple[str, str, InvoiceFields]] = []
    second: list[tuple[str, str, InvoiceFields]] = []
    for i in range(RACE_PAIRS):
        total = f"{500 + i}.25"
        first.append((new_invoice(database_url, "acme"), "acme", fields_for(f"INV-{5000 + i}", total=total)))
        second.append((new_invoice(database_url, "acme"), "acme", fields_for(f"{5000 + i}", total=total)))
    results = {r[0]: r for r in run_deciders(database_url, [first, second], lockstep=True)}
    for (a, _, _), (b, _, _) in zip(first, second, strict=True):
        statuses = sorted((results[a][2], results[b][2]))
        assert statuses == ["original", "suspected"], (a, b, statuses)
        copy, original = (
            (results[a], results[b]) if results[a][2] == "suspected" else (results[b], results[a])
        )
        assert copy[3] == original[0]


def test_copy_is_found_among_ten_thousand_originals_of_its_vendor_and_of_its_amount(
    database_url: str, store: InvoiceStore
) -> None:
    """The candidate search used to read the oldest 200 originals by vendor or amount."""
    same_vendor = [fields_for(f"INV-{n}", total=f"{100 + n % 5000}.{n % 100:02d}") for n in range(10_000)]
    same_amount = [
        fields_for(f"X-{n}", seller=f"Vendor {n}", vat=f"DE{n:09d}", total="777.70") for n in range(10_000)
    ]
    insert_decided_originals(database_url, "acme", same_vendor + same_amount)

    original = store.documents.store_document(b"{}", "acme", "original.json").invoice_id
    lease = store.claims.acquire(original, 1)
    assert lease is not None
    target = fields_for("INV-424242", total="777.70")
    store.documents.save_fields(lease, target)
    assert decide_duplicate(store, lease, "acme", target).status == "original"

    for number, vat, want in (("INV-424242", "DE123456789", "duplicate"), ("424242", None, "suspected")):
        copy = new_invoice(database_url, "acme")
        lease = store.claims.acquire(copy, 1)
        assert lease is not None
        fields = fields_for(number, total="777.70", vat=vat)
        store.documents.save_fields(lease, fields)
        decision = decide_duplicate(store, lease, "acme", fields)
        assert (decision.status, decision.original_id) == (want, original)


@pytest.mark.parametrize("resent_vat", ["123456789", "DE 123.456.789", "de123456789", "DE-123 456 789"])
def test_vat_id_without_its_country_prefix_names_the_same_seller(
    database_url: str, store: InvoiceStore, resent_vat: str
) -> None:
    """Processed one after the other, the re-send used to count as another seller's invoice."""
    decisions = []
    for vat in ("DE123456789", resent_vat):
        invoice = new_invoice(database_url, "acme")
        lease = store.claims.acquire(invoice, 1)
        assert lease is not None
        fields = fields_for("INV-0042", total="250.00", vat=vat)
        store.documents.save_fields(lease, fields)
        decisions.append(decide_duplicate(store, lease, "acme", fields))
    assert decisions[0].status == "original"
    assert decisions[1].status == "duplicate" and decisions[1].original_id == decisions[0].invoice_id


# -- a chunk decided at once ----------------------------------------------------------------------


def _leased(
    store: InvoiceStore, database_url: str, org: str, fields: InvoiceFields
) -> tuple[Lease, MatchCandidate]:
    """A new invoice of the org with its fields saved, leased: an item of a duplicate decision."""
    invoice = new_invoice(database_url, org)
    lease = store.claims.acquire(invoice, 1)
    assert lease is not None
    store.documents.save_fields(lease, fields)
    return lease, MatchCandidate.from_fields(invoice, org, fields)


def _round_trips(store: InvoiceStore, work: Callable[[], T]) -> tuple[T, int]:
    """`work()`'s result and how many times it waited for the server: the Syncs and simple
    queries libpq's protocol trace shows on the store's one pooled connection (a pipeline of
    many statements is one wait)."""
    with tempfile.TemporaryFile("w+") as trace:
        with store.database.pool.connection() as conn:
            conn.pgconn.trace(trace.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            result = work()
        finally:
            with store.database.pool.connection() as conn:
                conn.pgconn.untrace()
        trace.seek(0)
        # A message is a line "F|B <length> <type> ...", tab-separated; a statement's text
        # continues it on lines of its own.
        waits = [line for line in trace if re.match(r"F\t\d+\t(Sync|Query)\b", line)]
    return result, len(waits)


def test_a_chunk_is_decided_in_a_few_round_trips_as_each_invoice_alone_would_be(database_url: str) -> None:
    """One chunk: copies of originals of an earlier chunk and of its own, a near copy, another
    org's twin, a decision made already. Each gets what deciding it alone, in the chunk's order,
    gives; the chunk waits for the server as often as a chunk of three does."""
    store = InvoiceStore(database_url, min_size=1, max_size=1)  # one connection: the one traced
    try:
        # An original of an earlier chunk, and one decided by a first attempt of this chunk's
        # step: its lease (still running) comes again.
        earlier = _leased(store, database_url, "acme", fields_for("E-1", total="100.00"))
        decided_already = _leased(store, database_url, "acme", fields_for("R-9", total="300.00"))
        for lease, candidate in (earlier, decided_already):
            assert store.dedupe.decide_duplicate(lease, candidate, match_outcome).status == "original"

        copy_of_decided = _leased(store, database_url, "acme", fields_for("R-9", total="300.00"))
        copy_of_earlier = _leased(store, database_url, "acme", fields_for("E-1", total="100.00"))
        first = _leased(store, database_url, "acme", fields_for("INV-7100", total="200.00"))
        second = _leased(store, database_url, "acme", fields_for("INV-7100", total="200.00"))
        third = _leased(
            store, database_url, "acme", fields_for("INV 7100", total="200.00", vat="DE 123.456.789")
        )
        near = _leased(store, database_url, "acme", fields_for("7100", total="200.00"))
        other_org = _leased(store, database_url, "globex", fields_for("INV-7100", total="200.00"))
        chunk = [copy_of_decided, copy_of_earlier, first, second, third, near, other_org, decided_already]

        write, trips = _round_trips(
            store, lambda: store.dedupe.decide_duplicates(chunk, match_outcome, step="detect_duplicates")
        )
        assert not write.lost and not write.failed
        got = {lease.invoice_id: write.written[lease.invoice_id] for lease, _ in chunk}

        def decided(item: tuple[Lease, MatchCandidate]) -> tuple[str, UUID | None]:
            d = got[item[0].invoice_id]
            return d.status, d.original_id

        assert decided(copy_of_earlier) == ("duplicate", earlier[0].invoice_id)
        assert decided(first) == ("original", None)
        assert decided(second) == ("duplicate", first[0].invoice_id)
        assert decided(third) == ("duplicate", first[0].invoice_id)
        assert decided(near) == ("suspected", first[0].invoice_id)
        assert decided(other_org) == ("original", None), "never a match across orgs"
        assert decided(copy_of_decided) == ("duplicate", decided_already[0].invoice_id)
        assert decided(decided_already) == ("original", None), "a decision made already stands"
        # The copies of one original share its group, and the original is in it.
        group = got[second[0].invoice_id].group_id
        assert group is not None and got[third[0].invoice_id].group_id == group
        assert got[near[0].invoice_id].group_id is None, "a suspected copy joins no group"
        stored = store.dedupe.load_duplicate_decisions([lease.invoice_id for lease, _ in chunk])
        assert stored[first[0].invoice_id].group_id == group
        # The decision made already, read at its turn, is in the group its copy made before it.
        assert (
            got[decided_already[0].invoice_id].group_id
            == got[copy_of_decided[0].invoice_id].group_id
            is not None
        )
        assert {
            i: (d.status, d.original_id, d.group_id) for i, d in stored.items() if i != first[0].invoice_id
        } == {i: (d.status, d.original_id, d.group_id) for i, d in got.items() if i != first[0].invoice_id}

        # A chunk of three with every kind of decision: an original, its near copy, and an exact
        # copy of an earlier chunk's original.
        small = [
            _leased(store, database_url, "acme", fields_for("INV-8200", total="400.00")),
            _leased(store, database_url, "acme", fields_for("8200", total="400.00")),
            _leased(store, database_url, "acme", fields_for("E-1", total="100.00")),
        ]
        small_write, small_trips = _round_trips(
            store, lambda: store.dedupe.decide_duplicates(small, match_outcome, step="detect_duplicates")
        )
        assert [small_write.written[lease.invoice_id].status for lease, _ in small] == [
            "original",
            "suspected",
            "duplicate",
        ]
        assert small_write.written[small[1][0].invoice_id].original_id == small[0][0].invoice_id
        # BEGIN, the dedupe locks, the fence, two reads, one pipeline per kind of mark, the
        # breadcrumb, the heartbeat at commit (beat_at_commit, issue 38), COMMIT, and the pool's
        # check of the connection before and after: however many invoices the chunk has
        # (deciding them one by one cost two or three each).
        assert trips == small_trips <= 13, (trips, small_trips)
    finally:
        store.close()
