from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.normalize import business_key, normalize_invoice_number, normalize_vendor


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
        ("Anything", "de 123.456-789", "vat:DE123456789"),
        (None, "NL8200.98.395.B.01", "vat:NL820098395B01"),
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
    for out in ("name:acme", "vat:DE123456789", normalize_vendor("Kettle & Pine LLC")):
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
