"""Correcting a held invoice's fields (engine.corrections.correct_invoice), through the real pipeline."""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal
from uuid import UUID

import pytest

from invoice_pipeline.domain.corrections import CorrectionError, parse_changes
from invoice_pipeline.domain.review import AMOUNT_UNCONFIRMED, CORRECTED, CURRENCY_UNKNOWN
from invoice_pipeline.engine.corrections import correct_invoice
from invoice_pipeline.engine.review import Actor, act
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples.page_layouts import page_cases, page_pdf
from invoice_pipeline.samples.render import render_invoice
from invoice_pipeline_tests.engine.review.helpers import (
    failure_messages,
    postings,
    run_batch,
    sample,
    sql,
    status_and_reasons,
)

ALICE = Actor("os-user:alice", "review:alice@test:1")


def held_pdf(database_url: str, store: InvoiceStore, number: str = "NW-2026-501") -> UUID:
    """A text-PDF invoice whose page names no currency: held (currency_unknown), with boxes."""
    case = dataclasses.replace(
        page_cases(7, 1)[0], show_currency=False, seller_vat_id="US123456789", invoice_number=number
    )
    invoice_id = store.documents.store_document(page_pdf(case), "acme", f"{number}.pdf").invoice_id
    result = run_batch(database_url, [invoice_id])
    assert result.success, failure_messages(result)
    return invoice_id


def test_parse_changes_types_and_refusals() -> None:
    assert parse_changes(["payable_total=29.99", "issue_date=2015-07-02", "currency=eur"]) == {
        "payable_total": Decimal("29.99"),
        "issue_date": dt.date(2015, 7, 2),
        "currency": "EUR",
    }
    for bad in (["nope=1"], ["payable_total=abc"], ["issue_date=02.07.2015"], ["seller_name=a\x1bb"], []):
        with pytest.raises(CorrectionError):
            parse_changes(bad)


def test_a_held_pdf_corrected_then_approved_is_posted_once_with_the_corrected_values(
    database_url: str, store: InvoiceStore
) -> None:
    invoice_id = held_pdf(database_url, store)
    status, codes = status_and_reasons(database_url, invoice_id)
    assert status == "needs_review", codes
    assert CURRENCY_UNKNOWN in codes or AMOUNT_UNCONFIRMED in codes

    outcome = correct_invoice(
        store, invoice_id, ["payable_total=119.00", "currency=EUR"], ALICE, "checked the page"
    )
    assert outcome.done, outcome.message
    status, codes = status_and_reasons(database_url, invoice_id)
    assert status == "needs_review" and codes[-1] == CORRECTED
    assert CURRENCY_UNKNOWN not in codes and AMOUNT_UNCONFIRMED not in codes
    ((before, after, actor),) = sql(
        database_url,
        "SELECT values_before, values_after, actor FROM review_actions WHERE invoice_id = %s AND action = 'correct'",
        (invoice_id,),
    )
    assert after == {"payable_total": "119.00", "currency": "EUR"} and actor == ALICE.name
    assert "payable_total" in before

    assert act(store, "approve", invoice_id, ALICE).done
    result = run_batch(database_url, [invoice_id])
    assert result.success, failure_messages(result)
    assert sql(
        database_url, "SELECT amount, currency FROM ledger_postings WHERE invoice_id = %s", (invoice_id,)
    ) == [(Decimal("119.00"), "EUR")]

    refused = correct_invoice(store, invoice_id, ["payable_total=1.00"], ALICE)
    assert not refused.done and "posted" in refused.message and "credit note" in refused.message
    assert postings(database_url, invoice_id) == 1


def test_an_invalid_correction_is_refused_and_nothing_changes(database_url: str, store: InvoiceStore) -> None:
    invoice_id = held_pdf(database_url, store, "NW-2026-502")
    fields_before = sql(database_url, "SELECT fields FROM invoices WHERE id = %s", (invoice_id,))
    refused = correct_invoice(store, invoice_id, ["currency=ZZZ"], ALICE)
    assert not refused.done and "valid" in refused.message
    assert sql(database_url, "SELECT fields FROM invoices WHERE id = %s", (invoice_id,)) == fields_before
    # The lock was released: the next action can go ahead.
    assert sql(
        database_url,
        "SELECT count(*) FROM processing_jobs WHERE invoice_id = %s AND status = 'running'",
        (invoice_id,),
    ) == [(0,)]


def test_a_corrected_number_that_makes_it_a_copy_is_held_as_a_suspected_duplicate(
    database_url: str, store: InvoiceStore
) -> None:
    paid = store.documents.store_document(
        render_invoice(sample("NW-2026-777"), "ubl"), "acme", "paid.xml"
    ).invoice_id
    assert run_batch(database_url, [paid]).success
    assert postings(database_url, paid) == 1
    held = held_pdf(database_url, store, "NW-2026-778")
    outcome = correct_invoice(
        store,
        held,
        [
            "invoice_number=NW-2026-777",
            "seller_name=Nordwind Logistik GmbH",
            "seller_vat_id=DE811907980",
            "issue_date=2026-11-02",
            "currency=EUR",
            "payable_total=119.00",
        ],
        ALICE,
    )
    assert outcome.done, outcome.message
    dup, original = sql(
        database_url, "SELECT duplicate_status, duplicate_of FROM invoices WHERE id = %s", (held,)
    )[0]
    assert (dup, original) == ("suspected", paid)
    refused = act(store, "approve", held, ALICE)
    assert not refused.done and "suspected duplicate" in refused.message


def test_a_stale_version_is_refused_as_decided_meanwhile(database_url: str, store: InvoiceStore) -> None:
    invoice_id = held_pdf(database_url, store, "NW-2026-503")
    seen = store.review_pages.review_version(invoice_id)
    assert correct_invoice(store, invoice_id, ["currency=EUR"], ALICE, expect_version=seen).done
    late = act(store, "reject", invoice_id, ALICE, "wrong", expect_version=seen)
    assert not late.done and "meanwhile" in late.message
    assert status_and_reasons(database_url, invoice_id)[0] == "needs_review"
