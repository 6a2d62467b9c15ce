"""Money fails closed through the real pipeline: a duplicate check that cannot use a blocking key
still compares, an unknown currency is held, and nothing unsure is posted (issue 18).

Each case failed before number twins: the invoice without a blocking key (no digits in its
number, or no currency) was compared with nothing, became an original, and was posted.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from uuid import UUID

import pytest

from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.review import (
    CURRENCY_UNKNOWN,
    DUPLICATE_CHECK_IMPOSSIBLE,
    SUSPECTED_DUPLICATE,
    ReviewPolicy,
    reason_code,
)
from invoice_pipeline.engine.review import Actor, act
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples.render import render_invoice
from invoice_pipeline_tests.engine.review.helpers import postings, process_documents, sample, sql
from invoice_pipeline_tests.engine.test_dedupe import Deciders, forget_duplicate_decisions, new_invoice
from pipeline_support.factories import json_invoice

ALICE = Actor("os-user:alice", "review:alice@test:1")
ROUNDS = 10


def _process(database_url: str, store: InvoiceStore, documents: list[tuple[bytes, str]]) -> list[UUID]:
    """Ingest the documents in this order and process them as one batch (one chunk, arrival order)."""
    return process_documents(database_url, store, "acme", documents)


def _state(database_url: str, invoice_id: UUID) -> tuple[str, str | None, list[str]]:
    status, duplicate, reasons = sql(
        database_url,
        "SELECT status, duplicate_status, coalesce(review_reasons, '{}') FROM invoices WHERE id = %s",
        (invoice_id,),
    )[0]
    return status, duplicate, [reason_code(r) for r in reasons]


def test_copies_of_a_number_without_digits_are_paid_once(database_url: str, store: InvoiceStore) -> None:
    first, copy = _process(
        database_url,
        store,
        [
            (json_invoice("INV-ABC", total="250.00"), "a.json"),
            (json_invoice("inv abc", total="250.00", buyer="Example Buyer Limited"), "b.json"),
        ],
    )
    assert postings(database_url, first) == 1
    assert postings(database_url, copy) == 0
    assert _state(database_url, copy)[1] == "duplicate"


def test_a_document_without_currency_is_held_never_posted_until_the_org_names_one(
    database_url: str, store: InvoiceStore
) -> None:
    (held,) = _process(database_url, store, [(json_invoice("INV-7001", currency=None), "nocur.json")])  # type: ignore[arg-type]
    status, duplicate, reasons = _state(database_url, held)
    assert status == "needs_review" and duplicate == "original"
    assert reasons == [CURRENCY_UNKNOWN, DUPLICATE_CHECK_IMPOSSIBLE]
    assert postings(database_url, held) == 0
    # A person cannot approve what posting could not book.
    refused = act(store, "approve", held, ALICE)
    assert not refused.done and "no currency" in refused.message
    assert postings(database_url, held) == 0

    store.review.set_review_policy("acme", ReviewPolicy(default_currency="CHF"), "test")
    (filled,) = _process(database_url, store, [(json_invoice("INV-7002", currency=None), "nocur2.json")])  # type: ignore[arg-type]
    assert sql(
        database_url, "SELECT amount, currency FROM ledger_postings WHERE invoice_id = %s", (filled,)
    ) == [(pytest.approx(119), "CHF")]


def test_a_copy_without_currency_of_a_paid_invoice_is_suspected_not_paid(
    database_url: str, store: InvoiceStore
) -> None:
    """A scan that found no currency, of an invoice paid earlier: linked to it and held."""
    paid, scan = _process(
        database_url,
        store,
        [
            (json_invoice("RE-2024-0815"), "paid.json"),
            (json_invoice("RE 2024 0815", currency=None, vat_id=None), "scan.json"),  # type: ignore[arg-type]
        ],
    )
    assert postings(database_url, paid) == 1
    status, duplicate, reasons = _state(database_url, scan)
    assert (status, duplicate) == ("needs_review", "suspected")
    assert SUSPECTED_DUPLICATE in reasons and CURRENCY_UNKNOWN in reasons
    assert postings(database_url, scan) == 0


def test_a_text_pdf_of_an_e_invoice_is_linked_to_it(database_url: str, store: InvoiceStore) -> None:
    inv = sample("NW-2026-311", issue=dt.date(2026, 11, 2))
    xml, page = _process(
        database_url, store, [(render_invoice(inv, "ubl"), "e.xml"), (render_invoice(inv, "pdf"), "page.pdf")]
    )
    assert postings(database_url, xml) == 1
    assert _state(database_url, page)[1] in ("duplicate", "suspected")
    assert postings(database_url, page) == 0


@pytest.mark.parametrize("number", ["INV-ABC", "Rechnung XY/Z"])
@pytest.mark.slow
def test_number_twins_decided_at_the_same_moment_never_make_two_originals(
    database_url: str, number: str
) -> None:
    """Four processes decide copies of one invoice at the same instant, round after round: some
    without digits in the number, some without currency. Without the number key's lock (and
    search) this makes up to four originals a round."""
    with Deciders(database_url, 4, lockstep=True) as deciders:
        for _ in range(ROUNDS):
            forget_duplicate_decisions(database_url)
            per_process: list[list[tuple[str, str, InvoiceFields]]] = []
            for currency in ("EUR", None, "EUR", None):
                fields = InvoiceFields(
                    invoice_number=number,
                    currency=currency,
                    payable_total=Decimal("99.00"),
                    seller_name="Acme Supplies GmbH",
                    seller_vat_id="DE123456789",
                )
                per_process.append([(new_invoice(database_url, "acme"), "acme", fields)])
            results = deciders.round(per_process)
            originals = [r for r in results if r[2] == "original"]
            assert len(originals) == 1, results
            assert {r[3] for r in results if r[2] != "original"} == {originals[0][0]}
