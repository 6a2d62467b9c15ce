"""What an accountant posts, through the real stages and a real database (issue 58 items 1, 2, 4):
a pro-forma is never posted, a correction is held beside the invoice it corrects, a prepayment is
not paid twice, amounts the document contradicts are held, a direct debit is no transfer, and a
credit note is one credit whatever sign its format writes.

Each case posted the document as written before the rule (see the commit of domain/doctypes.py).
"""

from __future__ import annotations

from decimal import Decimal
from uuid import UUID

import pytest

from invoice_pipeline.domain.review import (
    AMOUNT_PRECISION,
    CORRECTION,
    CURRENCY_MISMATCH,
    NOT_A_CLAIM,
)
from invoice_pipeline.engine.review import Actor, act
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.engine.review.helpers import (
    postings,
    process_documents,
    sql,
    status_and_reasons,
)
from pipeline_support.einvoices import EInvoice, cii, ubl

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


def test_a_correction_is_held_and_never_added_to_its_invoice(database_url: str, store: InvoiceStore) -> None:
    original, correction = _process(
        database_url,
        store,
        cii(EInvoice(number="INV-2001")),
        cii(
            EInvoice(
                number="K-5512",  # its own number: only its type says it corrects INV-2001
                type_code="384",
                preceding="INV-2001",
                preceding_date="2026-11-02",
                net="1050.00",
                tax="199.50",
                grand="1249.50",
                due="1249.50",
            )
        ),
    )
    assert postings(database_url, original) == 1
    _held_for(database_url, correction, CORRECTION)
    (reasons,) = sql(database_url, "SELECT review_reasons FROM invoices WHERE id = %s", (correction,))[0]
    assert any("corrects INV-2001 of 2026-11-02" in r for r in reasons)
    # A plain approval would pay it on top of the original: refused (replacing or reversing the
    # original is a decision of its own, not yet offered).
    refused = act(store, "approve", correction, ALICE)
    assert not refused.done and CORRECTION in refused.message
    assert postings(database_url, correction) == 0


def test_a_prepayment_stated_without_an_amount_due_is_not_paid_again(
    database_url: str, store: InvoiceStore
) -> None:
    (invoice,) = _process(database_url, store, cii(EInvoice(number="INV-4001", due=None, prepaid="500.00")))
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
