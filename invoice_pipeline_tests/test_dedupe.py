"""Advisory-locked duplicate detection under real concurrency: processes, not threads."""

from __future__ import annotations

import multiprocessing
import threading
from decimal import Decimal
from uuid import UUID

import psycopg

from invoice_pipeline.dedupe import decide_duplicate
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.normalize import business_key
from invoice_pipeline.store import InvoiceStore
from invoice_pipeline_tests.support import wait_for

PROCESSES = 8
ROUNDS = 5

# One invoice written many ways: the same seller and total, the number reformatted, and the
# seller named by VAT id in some copies and by name alone in others (two business keys).
NUMBER_SPELLINGS = ["INV-00123", "inv 123", "INV123", "Inv.#0123", "INV-123", "inv-000123"]
VAT_IDS = ["DE123456789", None, "DE123456789"]


def fields_for(
    number: str, seller: str = "Acme Supplies GmbH", total: str = "1436.50", vat: str | None = "DE123456789"
) -> InvoiceFields:
    return InvoiceFields(
        invoice_number=number,
        currency="EUR",
        payable_total=Decimal(total),
        seller_name=seller,
        seller_vat_id=vat,
    )


def _decide_all(url: str, jobs: list[tuple[str, str, str, str | None]], barrier, queue) -> None:  # type: ignore[no-untyped-def]
    """Each process decides its share of invoices, all starting at the same moment."""
    store = InvoiceStore(url, max_size=2)
    try:
        leases = []
        for invoice_id, org, number, vat in jobs:
            lease = store.acquire(invoice_id, 1)
            assert lease is not None
            store.save_fields(lease, fields_for(number, vat=vat))
            leases.append((lease, org, number, vat))
        barrier.wait()
        for lease, org, number, vat in leases:
            decision = decide_duplicate(store, lease, org, fields_for(number, vat=vat))
            queue.put((str(lease.invoice_id), org, decision.status, str(decision.original_id)))
    except Exception as exc:  # reported to the test instead of leaving it waiting on the queue
        queue.put(("error", repr(exc), "", ""))
        raise
    finally:
        store.close()


def new_invoice(url: str, org: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute("INSERT INTO invoices (org_id) VALUES (%s) RETURNING id", (org,)).fetchone()
        assert row is not None
        return str(row[0])


def test_concurrent_copies_yield_exactly_one_original_per_org(database_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    for _ in range(ROUNDS):
        with psycopg.connect(database_url) as conn:
            conn.execute(
                "UPDATE invoices SET duplicate_status = NULL, duplicate_of = NULL, duplicate_group_id = NULL"
            )
            conn.execute("DELETE FROM duplicate_groups")
        per_process: list[list[tuple[str, str, str, str | None]]] = [[] for _ in range(PROCESSES)]
        for i in range(PROCESSES * 3):
            org = "acme" if i % 4 else "globex"  # a second org with the very same invoice
            per_process[i % PROCESSES].append(
                (
                    new_invoice(database_url, org),
                    org,
                    NUMBER_SPELLINGS[i % len(NUMBER_SPELLINGS)],
                    VAT_IDS[i % len(VAT_IDS)],
                )
            )
        barrier, queue = ctx.Barrier(PROCESSES), ctx.Queue()
        procs = [
            ctx.Process(target=_decide_all, args=(database_url, jobs, barrier, queue)) for jobs in per_process
        ]
        for p in procs:
            p.start()
        results = [queue.get(timeout=120) for _ in range(PROCESSES * 3)]
        assert not [r for r in results if r[0] == "error"], results
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        for org in ("acme", "globex"):
            mine = [r for r in results if r[1] == org]
            originals = [r for r in mine if r[2] == "original"]
            assert len(originals) == 1, f"{org}: {len(originals)} originals among {len(mine)} copies"
            duplicates = [r for r in mine if r[2] == "duplicate"]
            assert {r[3] for r in duplicates} == {originals[0][0]}, "every copy points at the one original"
    with psycopg.connect(database_url) as conn:
        cross = conn.execute(
            "SELECT count(*) FROM invoices d JOIN invoices o ON o.id = d.duplicate_of WHERE d.org_id <> o.org_id"
        ).fetchone()
    assert cross == (0,), "no org's invoice was ever grouped with another org's"


def test_different_keys_do_not_wait_on_each_other(database_url: str, store: InvoiceStore) -> None:
    """Hold key A's advisory lock in another session; deciding key B completes, deciding A waits."""
    a_inv, b_inv, a2_inv = (new_invoice(database_url, "acme") for _ in range(3))
    a_fields, b_fields = fields_for("A-1", total="100.00"), fields_for("B-7", total="200.00")
    a_key = business_key("acme", a_fields)
    assert a_key.lock_id != business_key("acme", b_fields).lock_id
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (a_key.lock_id,))  # held until rollback below
        lease_b = store.acquire(b_inv, 1)
        assert lease_b is not None
        store.save_fields(lease_b, b_fields)
        assert decide_duplicate(store, lease_b, "acme", b_fields).status == "original"

        lease_a = store.acquire(a_inv, 1)
        assert lease_a is not None
        store.save_fields(lease_a, a_fields)
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
    lease_a2 = store.acquire(a2_inv, 1)
    assert lease_a2 is not None
    store.save_fields(lease_a2, fields_for("a 1", total="100.00"))
    second = decide_duplicate(store, lease_a2, "acme", fields_for("a 1", total="100.00"))
    assert second.status == "duplicate" and second.original_id == UUID(a_inv)
