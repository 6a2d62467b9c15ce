"""PDF text heuristics on the ways people write invoice numbers and VAT ids (found by the
duplicate_accuracy benchmark: a spaced number was read as a quantity from the table below)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from invoice_pipeline.documents import extract_fields, extract_text
from invoice_pipeline.documents.reading.page_values import first_identifier, vat_value
from invoice_pipeline.samples.render import Line, Party, SampleInvoice, invoice_pdf


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("INV 42", "INV 42"),
        ("inv.#0042", "inv.#0042"),
        ("INV #42", "INV #42"),
        ("F.#2024/23339", "F.#2024/23339"),
        ("2025 29411", "2025 29411"),
        ("No-074613", "074613"),
        ("Nr. 2024-00042", "2024-00042"),
        (": INV-00042", "INV-00042"),
        ("RE2024-0042", "RE2024-0042"),
        # Unchanged: a date or an amount after the number is not joined to it.
        ("12345 2024-01-05", "12345"),
        ("4711 1.234,56 EUR", "4711"),
        ("INV 42 / page 1", "INV 42"),
        ("vom 12.03.2024", None),
        ("INV", None),
    ],
)
def test_first_identifier(text: str, number: str | None) -> None:
    assert first_identifier(text) == number


@pytest.mark.parametrize(
    ("text", "vat"),
    [
        (": DE 123 456 789", "DE123456789"),
        (": de 123.456.789", "de123.456.789"),
        (": nl123456789b01", "nl123456789b01"),
        # An upper-case id wins, and a lower-case word after it does not spoil it.
        (": DE123456789 Tel 0123", "DE123456789"),
        (" total: 1,234,567.89", None),
    ],
)
def test_vat_value(text: str, vat: str | None) -> None:
    assert vat_value(text) == vat


def test_spaced_number_and_lower_case_vat_read_from_a_pdf() -> None:
    seller = Party("Nordwind Logistik GmbH", "de 123.456.789", "Hafenstraße 12", "20457", "Hamburg", "DE")
    buyer = Party("Harbor Street Bakery", None, "Harbor Street 2", "10115", "Berlin", "DE")
    inv = SampleInvoice(
        invoice_number="INV 42",
        document_type="invoice",
        issue_date=dt.date(2025, 3, 20),
        due_date=dt.date(2025, 4, 19),
        currency="EUR",
        seller=seller,
        buyer=buyer,
        lines=(Line("Maintenance contract", Decimal(1), Decimal("1981.94"), Decimal(25)),),
        po_number=None,
    )
    for lang in ("en", "de", "fr"):
        fields = extract_fields(extract_text(invoice_pdf(inv, lang), "invoice.pdf"))
        assert fields.invoice_number == "INV 42", lang
        assert fields.seller_vat_id == "de123.456.789", lang
        assert fields.payable_total == inv.payable_total, lang
