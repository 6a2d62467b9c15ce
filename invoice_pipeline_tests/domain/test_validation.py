from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.validation import ACTIVE_CURRENCIES, validate_fields

TODAY = date(2025, 6, 1)
GOOD = InvoiceFields(
    invoice_number="INV-1",
    issue_date=date(2025, 5, 1),
    due_date=date(2025, 5, 31),
    currency="EUR",
    net_total=Decimal("100.00"),
    tax_total=Decimal("19.00"),
    payable_total=Decimal("119.00"),
    seller_name="Acme GmbH",
)


def codes(fields: InvoiceFields, **kw: object) -> list[str]:
    return [p.code for p in validate_fields(fields, today=TODAY, **kw)]  # type: ignore[arg-type]


def _with(**changes: object) -> InvoiceFields:
    from dataclasses import replace

    return replace(GOOD, **changes)  # type: ignore[arg-type]


def test_good_invoice_has_no_problems() -> None:
    assert validate_fields(GOOD, today=TODAY, include_warnings=True) == []


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"invoice_number": None}, "missing_invoice_number"),
        ({"invoice_number": "  "}, "missing_invoice_number"),
        ({"seller_name": None}, "missing_seller"),
        ({"payable_total": None}, "missing_total"),
        ({"payable_total": Decimal("NaN")}, "bad_amount"),
        ({"payable_total": Decimal("Infinity")}, "bad_amount"),
        ({"payable_total": Decimal("100000000.01")}, "amount_too_large"),
        ({"currency": "EURO"}, "unknown_currency"),
        ({"currency": "XXX"}, "unknown_currency"),
        ({"issue_date": date(1989, 12, 31), "due_date": None}, "bad_date"),
        ({"issue_date": date(2026, 6, 2), "due_date": None}, "bad_date"),
    ],
)
def test_errors(changes: dict[str, object], code: str) -> None:
    problems = validate_fields(_with(**changes), today=TODAY)
    assert code in [p.code for p in problems]
    assert all(p.reason and p.severity == "error" for p in problems)


def test_business_exceptions_are_not_errors() -> None:
    """Valid under EN 16931: held for a person by domain/review.py, never quarantined."""
    assert codes(_with(payable_total=Decimal("-1.00"), net_total=None, tax_total=None)) == []
    assert codes(_with(due_date=date(2025, 4, 1))) == []


def test_credit_notes_may_be_negative() -> None:
    assert codes(_with(document_type="credit_note", payable_total=Decimal("-119.00"), net_total=None)) == []


def test_totals_mismatch_is_only_a_warning() -> None:
    fields = _with(payable_total=Decimal("50.00"))
    assert codes(fields) == []
    assert [p.code for p in validate_fields(fields, today=TODAY, include_warnings=True)] == [
        "totals_mismatch"
    ]


def test_rounding_within_tolerance() -> None:
    assert validate_fields(_with(payable_total=Decimal("119.02")), today=TODAY, include_warnings=True) == []


def test_currency_list_is_complete_enough() -> None:
    for code in (
        "EUR",
        "USD",
        "GBP",
        "CHF",
        "JPY",
        "NOK",
        "DKK",
        "SEK",
        "PLN",
        "CZK",
        "HUF",
        "XOF",
        "XCG",
        "ZWG",
        "SLE",
    ):
        assert code in ACTIVE_CURRENCIES
    assert len(ACTIVE_CURRENCIES) >= 175
