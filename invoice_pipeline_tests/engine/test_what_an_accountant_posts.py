"""What an accountant posts, through the real stages and a real database (issue 58 items 1, 2, 4):
a pro-forma is never posted, a correction is held beside the invoice it corrects, a prepayment is
not paid twice, amounts the document contradicts are held, a direct debit is no transfer, and a
credit note is one credit whatever sign its format writes.

Each case posted the document as written before the rule (see the commit of domain/doctypes.py).
"""

from __future__ import annotations

import threading
from decimal import Decimal
from uuid import UUID

import psycopg
import pytest

from invoice_pipeline.domain.corrected_invoices import original_lock_id
from invoice_pipeline.domain.review import (
    AMOUNT_DUE_UNFORMED,
    AMOUNT_PRECISION,
    CORRECTION,
    CURRENCY_MISMATCH,
    NOT_A_CLAIM,
)
from invoice_pipeline.engine.corrections import correct_invoice
from invoice_pipeline.engine.review import Actor, act
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.engine.review.helpers import (
    postings,
    process_documents,
    run_ok,
    sql,
    status_and_reasons,
)
from pipeline_support.einvoices import EInvoice, cii, corrected_invoice, ubl
from pipeline_support.helpers import wait_for

ALICE = Actor("os-user:alice", "review:alice@test:1")


def _process(database_url: str, store: InvoiceStore, *documents: bytes) -> list[UUID]:
    return process_documents(
        database_url, store, "acme", [(c, f"doc-{n}.xml") for n, c in enumerate(documents)]
    )


def _ledger(database_url: str, invoice_id: UUID) -> list[tuple[Decimal, str, str | None]]:
    return [
        (amount, currency, means)
        for amount, currency, means in sql(
            database_url,
            "SELECT amount, currency, payment_means FROM ledger_postings WHERE invoice_id = %s",
            (invoice_id,),
        )
    ]


def _held_for(database_url: str, invoice_id: UUID, code: str) -> None:
    status, reasons = status_and_reasons(database_url, invoice_id)
    assert status == "needs_review" and code in reasons, (status, reasons)
    assert postings(database_url, invoice_id) == 0


def test_a_pro_forma_is_never_posted(database_url: str, store: InvoiceStore) -> None:
    # Beside an ordinary invoice of the same seller in the same run, which is posted as before.
    pro_forma, invoice = _process(
        database_url,
        store,
        ubl(EInvoice(number="PF-3001", type_code="325")),
        ubl(
            EInvoice(number="INV-3900", type_code="380", net="10.00", tax="1.90", grand="11.90", due="11.90")
        ),
    )
    _held_for(database_url, pro_forma, NOT_A_CLAIM)
    assert [amount for amount, _, _ in _ledger(database_url, invoice)] == [Decimal("11.90")]
    # Nobody can approve it into a payment either: a person rejects it to file it.
    refused = act(store, "approve", pro_forma, ALICE)
    assert not refused.done and NOT_A_CLAIM in refused.message
    _held_for(database_url, pro_forma, NOT_A_CLAIM)


def _invoice_and_its_correction(database_url: str, store: InvoiceStore) -> list[UUID]:
    """INV-2001 at 1190.00, posted, and its correction K-5512 at 1249.50, held."""
    return _process(
        database_url,
        store,
        cii(EInvoice(number="INV-2001")),
        corrected_invoice("K-5512", "INV-2001", "1249.50"),
    )


def _held_invoice(number: str) -> bytes:
    """An invoice held for a person (a negative total), never posted by itself."""
    return cii(EInvoice(number=number, net="-4.20", tax="-0.80", grand="-5.00", due="-5.00"))


def _booked(database_url: str, original: UUID) -> Decimal:
    """What the ledger holds for the original: its posting and every correction's."""
    ((total,),) = sql(
        database_url,
        "SELECT coalesce(sum(amount), 0) FROM ledger_postings WHERE invoice_id = %s OR corrects_invoice_id = %s",
        (original, original),
    )
    return Decimal(total)


def test_a_correction_is_held_and_never_added_to_its_invoice(database_url: str, store: InvoiceStore) -> None:
    original, correction = _invoice_and_its_correction(database_url, store)
    assert postings(database_url, original) == 1
    _held_for(database_url, correction, CORRECTION)
    (reasons,) = sql(database_url, "SELECT review_reasons FROM invoices WHERE id = %s", (correction,))[0]
    assert any("corrects INV-2001 of 2026-11-02" in r for r in reasons)
    # A plain approval would pay it on top of the original: refused, naming the choice to make.
    refused = act(store, "approve", correction, ALICE)
    assert not refused.done and "replacing" in refused.message and "reversing" in refused.message
    assert postings(database_url, correction) == 0
    assert _booked(database_url, original) == Decimal("1190.00")


def test_a_correction_that_replaces_books_only_the_difference(database_url: str, store: InvoiceStore) -> None:
    original, first, second = _process(
        database_url,
        store,
        cii(EInvoice(number="INV-2001")),
        corrected_invoice("K-5512", "INV-2001", "1249.50"),
        corrected_invoice("K-5513", "INV 2001", "1309.00"),  # the number in another format
    )
    approved = act(store, "approve", first, ALICE, correction="replace")
    assert approved.done, approved.message
    run_ok(database_url, [first])
    assert [a for a, _, _ in _ledger(database_url, first)] == [Decimal("59.50")]
    assert _booked(database_url, original) == Decimal("1249.50")
    ((choice, corrects),) = sql(
        database_url,
        "SELECT correction_choice, corrects_invoice_id FROM ledger_postings WHERE invoice_id = %s",
        (first,),
    )
    assert (choice, corrects) == ("replace", original)
    # A second correction replaces again: what is booked is its amount, never the sum.
    assert act(store, "approve", second, ALICE, correction="replace").done
    run_ok(database_url, [second])
    assert [a for a, _, _ in _ledger(database_url, second)] == [Decimal("59.50")]
    assert _booked(database_url, original) == Decimal("1309.00")


def test_a_correction_that_reverses_takes_back_what_was_booked(
    database_url: str, store: InvoiceStore
) -> None:
    original, correction = _invoice_and_its_correction(database_url, store)
    assert act(store, "approve", correction, ALICE, correction="reverse").done
    run_ok(database_url, [correction])
    assert [a for a, _, _ in _ledger(database_url, correction)] == [Decimal("-1190.00")]
    assert _booked(database_url, original) == 0


@pytest.mark.parametrize(
    ("documents", "why"),
    [
        # The original is not known: nothing to replace, and paying it in full is a guess.
        ([corrected_invoice("K-5512", "INV-2001", "1249.50")], "no invoice of this seller"),
        # Another seller's invoice with that number is not the one it corrects.
        (
            [
                cii(EInvoice(number="INV-2001", seller="Other Seller GmbH", seller_vat="ATU13585627")),
                corrected_invoice("K-5512", "INV-2001", "1249.50"),
            ],
            "no invoice of this seller",
        ),
        # The original is still held: decided first, so the correction is never booked beside a
        # posting that comes later.
        ([_held_invoice("INV-2001"), corrected_invoice("K-5512", "INV-2001", "1249.50")], "not decided yet"),
        # Booked in another currency.
        (
            [
                cii(EInvoice(number="INV-2001")),
                corrected_invoice("K-5512", "INV-2001", "1249.50", currency="USD"),
            ],
            "booked in EUR",
        ),
    ],
    ids=["unknown-original", "other-seller", "original-held", "other-currency"],
)
def test_a_correction_that_cannot_be_booked_stays_held(
    database_url: str, store: InvoiceStore, documents: list[bytes], why: str
) -> None:
    *_, correction = _process(database_url, store, *documents)
    refused = act(store, "approve", correction, ALICE, correction="replace")
    assert not refused.done and why in refused.message, refused.message
    _held_for(database_url, correction, CORRECTION)


def test_only_a_correction_takes_the_choice(database_url: str, store: InvoiceStore) -> None:
    (invoice,) = _process(database_url, store, _held_invoice("INV-9001"))
    refused = act(store, "approve", invoice, ALICE, correction="reverse")
    assert not refused.done and "not a corrected invoice" in refused.message


def test_a_correction_is_booked_against_what_is_booked_when_it_posts(
    database_url: str, store: InvoiceStore
) -> None:
    """Approved against 1190.00, posted after another correction booked meanwhile: the difference
    is taken from what is booked at posting (under the original's lock), not at approval."""
    original, first, second = _process(
        database_url,
        store,
        cii(EInvoice(number="INV-2001")),
        corrected_invoice("K-5512", "INV-2001", "1249.50"),
        corrected_invoice("K-5513", "INV-2001", "1309.00"),
    )
    assert act(store, "approve", first, ALICE, correction="replace").done
    assert act(store, "approve", second, ALICE, correction="replace").done
    run_ok(database_url, [first])
    run_ok(database_url, [second])
    assert _booked(database_url, original) == Decimal("1309.00")
    assert sorted(a for i in (first, second) for a, _, _ in _ledger(database_url, i)) == [
        Decimal("59.50"),
        Decimal("59.50"),
    ]


def test_a_prepayment_stated_without_an_amount_due_is_not_paid_again(
    database_url: str, store: InvoiceStore
) -> None:
    (invoice,) = _process(database_url, store, cii(EInvoice(number="INV-4001", due=None, prepaid="500.00")))
    # Without an amount due it breaks EN 16931 (BR-15): held einvoice_invalid (issue 55); the amount
    # a person's approval posts is the one BR-CO-16 forms, never the grand total paid again.
    assert act(store, "approve", invoice, ALICE).done
    run_ok(database_url, [invoice])
    assert [amount for amount, _, _ in _ledger(database_url, invoice)] == [Decimal("690.00")]


@pytest.mark.parametrize(
    "document",
    [
        pytest.param(
            ubl(EInvoice(number="INV-5001", net="100.00", tax="19.006", grand="119.006", due="119.006")),
            id="EUR-3-decimals",
        ),
        pytest.param(
            cii(
                EInvoice(
                    number="INV-5002",
                    currency="JPY",
                    net="1000",
                    tax="100.55",
                    grand="1100.55",
                    due="1100.55",
                )
            ),
            id="JPY-2-decimals",
        ),
    ],
)
def test_more_decimals_than_the_currency_has_are_held(
    database_url: str, store: InvoiceStore, document: bytes
) -> None:
    (invoice,) = _process(database_url, store, document)
    _held_for(database_url, invoice, AMOUNT_PRECISION)


def test_chf_amounts_in_a_euro_document_are_held(database_url: str, store: InvoiceStore) -> None:
    every = ("LineExtensionAmount", "TaxExclusiveAmount", "TaxInclusiveAmount", "PayableAmount", "TaxAmount")
    (invoice,) = _process(
        database_url, store, ubl(EInvoice(number="INV-6001", currency_ids=dict.fromkeys(every, "CHF")))
    )
    _held_for(database_url, invoice, CURRENCY_MISMATCH)


def test_a_direct_debit_is_posted_as_collected_not_as_a_transfer(
    database_url: str, store: InvoiceStore
) -> None:
    (invoice,) = _process(
        database_url,
        store,
        ubl(
            EInvoice(
                number="INV-7001",
                payment_means="59",
                mandate="MANDATE-7",
                debited_account="DE02120300000000202051",
            )
        ),
    )
    assert _ledger(database_url, invoice) == [(Decimal("1190.00"), "EUR", "direct_debit")]


def test_a_positive_ubl_credit_note_and_a_negative_cii_381_post_the_same_credit(
    database_url: str, store: InvoiceStore
) -> None:
    positive, negative = _process(
        database_url,
        store,
        ubl(
            EInvoice(number="CN-1", type_code="381", net="100.00", tax="19.00", grand="119.00", due="119.00"),
            root="CreditNote",
        ),
        cii(
            EInvoice(
                number="CN-2", type_code="381", net="-100.00", tax="-19.00", grand="-119.00", due="-119.00"
            )
        ),
    )
    for invoice in (positive, negative):
        assert [amount for amount, _, _ in _ledger(database_url, invoice)] == [Decimal("-119.00")]
        (stored,) = sql(database_url, "SELECT payable_total FROM invoices WHERE id = %s", (invoice,))[0]
        assert stored == Decimal("119.00")


def test_a_correction_is_booked_under_its_originals_lock(database_url: str, store: InvoiceStore) -> None:
    """While the original's advisory lock is held elsewhere (another correction of it being
    booked), the posting waits on exactly that lock before it reads what is booked: two
    corrections of one original are booked one after the other, never both against 1190.00."""
    original, correction = _invoice_and_its_correction(database_url, store)
    assert act(store, "approve", correction, ALICE, correction="replace").done
    lock_id = original_lock_id("acme", original)
    errors: list[BaseException] = []

    def post() -> None:
        try:
            run_ok(database_url, [correction])
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    with psycopg.connect(database_url) as holder, psycopg.connect(database_url, autocommit=True) as observer:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (lock_id,))
        worker = threading.Thread(target=post)
        worker.start()

        def posting_waits_on_the_originals_lock() -> bool:
            row = observer.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                "AND ((classid::bigint << 32) | objid::bigint) = (%s::bigint & x'ffffffffffffffff'::bigint)",
                (lock_id,),
            ).fetchone()
            return bool(row and row[0] == 1)

        wait_for(
            posting_waits_on_the_originals_lock,
            what="the correction's posting to wait on its original's lock",
        )
        assert postings(database_url, correction) == 0
        holder.rollback()
    worker.join(120)
    assert not errors, errors
    assert _booked(database_url, original) == Decimal("1249.50")


def test_an_amount_due_nothing_forms_is_held_for_a_person_not_quarantined(
    database_url: str, store: InvoiceStore
) -> None:
    """A prepayment stated without a grand total or an amount due: the amount owed cannot be
    formed (BR-CO-16), so a person reads it, and the invoice is posted at what they typed."""
    (invoice,) = _process(
        database_url, store, cii(EInvoice(number="INV-4002", grand=None, due=None, prepaid="500.00"))
    )
    _held_for(database_url, invoice, AMOUNT_DUE_UNFORMED)
    corrected = correct_invoice(store, invoice, {"payable_total": "690.00"}, ALICE)
    assert corrected.done, corrected.message
    assert act(store, "approve", invoice, ALICE).done
    run_ok(database_url, [invoice])
    assert [amount for amount, _, _ in _ledger(database_url, invoice)] == [Decimal("690.00")]
