from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.normalize import (
    business_key,
    normalize_invoice_number,
    normalize_vat_id,
    normalize_vendor,
    number_skeleton,
)


@pytest.mark.parametrize("raw", ["INV-00123", "inv 123", "INV123", "Inv.#123", " inv_0123 ", "ＩＮＶ１２３"])
def test_invoice_number_variants_agree(raw: str) -> None:
    assert normalize_invoice_number(raw) == "INV123"


@pytest.mark.parametrize(
    ("a", "b"),
    [("INV-1001", "INV-1002"), ("2020-1", "20201"), ("RE-20201121/508", "RE-2020112150/8"), ("A1", "B1")],
)
def test_different_numbers_stay_different(a: str, b: str) -> None:
    assert normalize_invoice_number(a) != normalize_invoice_number(b)


def test_zero_is_kept() -> None:
    assert normalize_invoice_number("INV-000") == "INV0"
    assert normalize_invoice_number("---") == ""


@pytest.mark.parametrize(
    ("name", "vat", "want"),
    [
        ("Acme Inc.", None, "name:acme"),
        ("ACME, LLC", None, "name:acme"),
        ("Acme GmbH & Co. KG", None, "name:acme"),
        ("Société Générale S.A.", None, "name:societe generale"),
        ("Van Dijk Installatie B.V.", None, "name:van dijk installatie"),
        ("Salescompany ltd.", None, "name:salescompany"),
        ("Bergquell Getränke AG", None, "name:bergquell getranke"),
        ("Robert'); DROP TABLE invoices; --\x07", None, "name:robert drop table invoices"),
        ("Anything", "de 123.456-789", "vat:123456789"),
        ("Anything", "123456789", "vat:123456789"),
        (None, "NL8200.98.395.B.01", "vat:820098395B01"),
        (None, "NO 123 456 789 MVA", "vat:123456789"),
        (None, "CHE-123.456.789 MWST", "vat:123456789"),
        (None, "ATU12345678", "vat:U12345678"),
        ("Acme Gesellschaft mit beschränkter Haftung", None, "name:acme"),
        ("ACME LIMITED", None, "name:acme"),
        ("Acme S.A.", None, "name:acme"),
        ("AG", None, "name:ag"),
    ],
)
def test_vendor_table(name: str | None, vat: str | None, want: str) -> None:
    assert normalize_vendor(name, vat) == want


def test_vendor_requires_something() -> None:
    with pytest.raises(ValueError):
        normalize_vendor(None, None)
    with pytest.raises(ValueError):
        normalize_vendor("  ...  ", " - ")


def test_vendor_is_idempotent_on_its_output() -> None:
    for out in ("name:acme", "vat:123456789", normalize_vendor("Kettle & Pine LLC")):
        assert normalize_vendor(out) == out


def test_business_key() -> None:
    fields = InvoiceFields(invoice_number="INV-007", seller_name="Acme Ltd", document_type="credit_note")
    key = business_key("org-1", fields)
    assert (key.org_id, key.vendor, key.invoice_number, key.document_type) == (
        "org-1",
        "name:acme",
        "INV7",
        "credit_note",
    )
    with pytest.raises(ValueError):
        business_key("org-1", InvoiceFields(seller_name="Acme"))


@given(st.text())
def test_invoice_number_idempotent(raw: str) -> None:
    once = normalize_invoice_number(raw)
    assert normalize_invoice_number(once) == once


@given(st.text(), st.one_of(st.none(), st.text()))
def test_vendor_idempotent(name: str, vat: str | None) -> None:
    try:
        once = normalize_vendor(name, vat)
    except ValueError:
        return
    assert normalize_vendor(once) == once
    assert once.startswith(("name:", "vat:"))


@given(
    st.from_regex(r"[A-Za-z]{1,4}", fullmatch=True),
    st.integers(0, 10**8),
    st.sampled_from(["-", " ", "", ".#", "/"]),
)
def test_reformatted_numbers_normalise_equal(prefix: str, n: int, sep: str) -> None:
    assert normalize_invoice_number(f"{prefix}{sep}{n:08d}") == normalize_invoice_number(
        f"{prefix.lower()} {n}"
    )


@pytest.mark.parametrize(
    "raw", ["DE123456789", "de 123.456.789", "123456789", "DE-123 456 789", "vat:DE123456789"]
)
def test_vat_id_written_with_or_without_its_country_prefix_is_one_seller(raw: str) -> None:
    assert normalize_vat_id(raw) == "123456789"
    assert normalize_vendor("Some Name", raw) == "vat:123456789"


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("INV-1001", "1001"),
        ("1001", "1001"),
        ("inv 01001", "1001"),
        ("INV-1O01", "1001"),  # OCR: O for 0
        ("INV-1OO1", "1001"),
        ("INV-I001", "1001"),  # a confusable starting a later token is a digit
        ("INV-B7019", "87019"),
        ("B7019", "7019"),  # ... but the first token's leading letter is its series
        ("1NV-26137", "26137"),  # a word OCR began with a digit is still a word
        ("INV1", "1"),
        ("INV-10l1", "1011"),
        ("RE-2024-0042", "2024-42"),
        ("2024INV042", "2024-42"),  # a word between digit groups separates them
        ("F-12S45", "12545"),
        ("INV-000", "0"),
        ("ABC", ""),
    ],
)
def test_number_skeleton(raw: str, want: str) -> None:
    assert number_skeleton(raw) == want


@pytest.mark.parametrize(
    ("a", "b"), [("INV-1001", "INV-1002"), ("2020-1", "20201"), ("RE-2024-41", "RE-2024-42")]
)
def test_number_skeletons_of_different_numbers_differ(a: str, b: str) -> None:
    assert number_skeleton(a) != number_skeleton(b)
