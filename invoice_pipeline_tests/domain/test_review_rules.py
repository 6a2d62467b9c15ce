"""Business exceptions (domain/review.py): valid invoices a person must see, never quarantined."""

from __future__ import annotations

from dataclasses import replace
from datetime import date
from decimal import Decimal

import pytest

from invoice_pipeline.domain.fields import AmountCheck, FieldSource, InvoiceFields
from invoice_pipeline.domain.review import (
    AMOUNT_UNCONFIRMED,
    CURRENCY_UNKNOWN,
    DEFAULT_POLICY,
    DUPLICATE_CHECK_IMPOSSIBLE,
    ReviewPolicy,
    reason_code,
    review_reasons,
    with_default_currency,
)
from invoice_pipeline.domain.validation import posting_gaps, validate_fields

TODAY = date(2026, 11, 30)
GOOD = InvoiceFields(
    invoice_number="INV-1",
    issue_date=date(2026, 11, 1),
    due_date=date(2026, 12, 1),
    currency="EUR",
    net_total=Decimal("100.00"),
    tax_total=Decimal("19.00"),
    payable_total=Decimal("119.00"),
    seller_name="Acme GmbH",
)
DEFAULT = ReviewPolicy()


def codes(fields: InvoiceFields, policy: ReviewPolicy = DEFAULT) -> list[str]:
    return [reason_code(r) for r in review_reasons(fields, policy, today=TODAY)]


def test_a_plain_invoice_needs_nobody() -> None:
    assert review_reasons(GOOD, DEFAULT, today=TODAY) == []


def test_negative_invoice_is_held_with_amount_and_type() -> None:
    fields = replace(GOOD, payable_total=Decimal("-120.00"), net_total=None, tax_total=None)
    assert validate_fields(fields, today=TODAY) == []
    (reason,) = review_reasons(fields, DEFAULT, today=TODAY)
    assert reason.startswith("negative_total: payable -120.00 EUR on an invoice (type 380)")


@pytest.mark.parametrize("total", ["-119.00", "119.00"])
def test_credit_notes_of_either_sign_need_nobody(total: str) -> None:
    assert codes(replace(GOOD, document_type="credit_note", payable_total=Decimal(total))) == []


def test_due_before_issue_is_held_not_quarantined() -> None:
    fields = replace(GOOD, due_date=date(2026, 10, 20))
    assert validate_fields(fields, today=TODAY) == []
    (reason,) = review_reasons(fields, DEFAULT, today=TODAY)
    assert reason.startswith("due_before_issue: due 2026-10-20 is 12 day(s) before issue 2026-11-01")


def test_impossible_values_stay_quarantined() -> None:
    assert [p.code for p in validate_fields(replace(GOOD, currency="XYZ"), today=TODAY)] == [
        "unknown_currency"
    ]
    assert [p.code for p in validate_fields(replace(GOOD, issue_date=date(1980, 1, 1)), today=TODAY)] == [
        "bad_date"
    ]


def test_auto_approval_limit_per_org() -> None:
    limit = ReviewPolicy(auto_approve_limit=Decimal("119.00"))
    assert codes(GOOD, limit) == []  # at the limit: fine
    assert codes(replace(GOOD, payable_total=Decimal("119.01")), limit) == ["over_approval_limit"]
    # The limit is on the size of the amount: a large negative invoice is over it too.
    assert codes(replace(GOOD, payable_total=Decimal("-500")), limit) == [
        "negative_total",
        "over_approval_limit",
    ]
    assert codes(replace(GOOD, payable_total=Decimal("99999999"))) == []  # default: unlimited


def test_home_currency_and_stale_invoices() -> None:
    policy = ReviewPolicy(home_currency="EUR", stale_after_days=90)
    assert codes(GOOD, policy) == []
    assert codes(replace(GOOD, currency="GBP"), policy) == ["foreign_currency"]
    assert codes(replace(GOOD, issue_date=date(2026, 8, 1), due_date=None), policy) == ["stale_invoice"]


def test_reason_codes_are_machine_readable() -> None:
    assert reason_code("suspected_duplicate of 0b6c...: number reformatted") == "suspected_duplicate"
    assert reason_code("negative_total: payable -1 EUR") == "negative_total"
    assert reason_code("Free text") == ""


@pytest.mark.parametrize(
    "kwargs",
    [
        {"auto_approve_limit": Decimal("-1")},
        {"auto_approve_limit": Decimal("NaN")},
        {"home_currency": "euro"},
        {"stale_after_days": 0},
    ],
)
def test_policy_refuses_nonsense(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        ReviewPolicy(**kwargs)  # type: ignore[arg-type]


def _page_read(total: str, check: AmountCheck | None, currency: str | None = "EUR") -> InvoiceFields:
    source = FieldSource("pdf-text:page 1:line 30:'Total'", 0.8)
    return InvoiceFields(
        invoice_number="INV-1",
        issue_date=date(2024, 5, 1),
        currency=currency,
        payable_total=Decimal(total),
        seller_name="Acme GmbH",
        sources={"payable_total": source, "currency": FieldSource("pdf-text", 0.8)},
        amount_check=check,
    )


def test_a_page_read_total_no_arithmetic_confirms_is_held() -> None:
    held = review_reasons(_page_read("24.99", AmountCheck(False, "no tax found")), DEFAULT_POLICY)
    assert [reason_code(r) for r in held] == [AMOUNT_UNCONFIRMED]
    assert "no tax found" in held[0]
    # No check at all (an old reader, a bug) is the same: fail closed.
    assert [reason_code(r) for r in review_reasons(_page_read("24.99", None), DEFAULT_POLICY)] == [
        AMOUNT_UNCONFIRMED
    ]


def test_a_confirmed_page_total_and_a_structured_total_need_nobody() -> None:
    confirmed = AmountCheck(True, "net 24.99 + tax 5.00 = gross 29.99")
    assert review_reasons(_page_read("29.99", confirmed), DEFAULT_POLICY) == []
    assert review_reasons(replace(GOOD, payable_total=Decimal("29.99")), DEFAULT_POLICY) == []


def test_no_currency_is_held_unless_the_org_names_a_default() -> None:
    fields = _page_read("29.99", AmountCheck(True, "ok"), currency=None)
    assert [reason_code(r) for r in review_reasons(fields, DEFAULT_POLICY)] == [
        CURRENCY_UNKNOWN,
        DUPLICATE_CHECK_IMPOSSIBLE,
    ]
    policy = ReviewPolicy(default_currency="CHF")
    filled = with_default_currency(fields, policy)
    assert filled.currency == "CHF" and filled.sources["currency"].source == "org policy: default currency"
    assert review_reasons(filled, policy) == []
    assert posting_gaps(fields) == ["a currency"] and posting_gaps(filled) == []
