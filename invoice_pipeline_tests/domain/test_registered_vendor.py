"""What the vendor is known to be fills what its page cannot say (issue 54): the registry's name
and VAT id for a confirmed vendor, the page's reading kept in the source, a contradiction left
for the payment decision to hold, and a shared currency sign read as the currency a person
approved the vendor's invoices in. Pure: no database."""

from __future__ import annotations

from invoice_pipeline.documents.reading.page_values import shared_currency_signs
from invoice_pipeline.domain.fields import FieldSource, InvoiceFields
from invoice_pipeline.domain.identity import Identifier, Vendor
from invoice_pipeline.domain.registered_vendor import contradiction, with_registered_vendor

VAT, OTHER_VAT, IBAN = "DE811907980", "DE136695976", "DE89370400440532013000"
VENDOR = Vendor(
    7,
    "acme",
    "Prairie Tools Incorporated",
    None,
    (Identifier("vat", VAT, VAT), Identifier("iban", IBAN, IBAN)),
)
DOLLARS = shared_currency_signs("Total      $1,190.00")


def page_read(**values: object) -> InvoiceFields:
    sources = {name: FieldSource(f"pdf-text:page 1:line 1:{name!r}", 0.9) for name in values}
    return InvoiceFields(**values, sources=sources)  # type: ignore[arg-type]


def test_a_confirmed_vendors_registered_name_and_vat_id_are_the_sellers_with_the_page_beside_them() -> None:
    fields = page_read(seller_name="Bénéficiaire", payee_iban=IBAN)
    filled = with_registered_vendor(fields, VENDOR)
    assert (filled.seller_name, filled.seller_vat_id) == (VENDOR.name, VAT)
    name = filled.sources["seller_name"]
    assert name.source.startswith("registry:vendor #7 ") and "'Bénéficiaire'" in (name.reason or ""), name
    assert filled.sources["seller_vat_id"].source.startswith("registry:vendor #7 ")


def test_a_page_naming_another_sellers_vat_id_is_a_contradiction_and_nothing_is_filled() -> None:
    fields = page_read(seller_name="Someone Else GmbH", seller_vat_id=OTHER_VAT, payee_iban=IBAN)
    assert contradiction(fields, VENDOR) is not None
    assert with_registered_vendor(fields, VENDOR) == fields
    # The vendor's own VAT id, or one whose check digits fail, is no contradiction.
    assert contradiction(page_read(seller_vat_id=VAT), VENDOR) is None
    assert contradiction(page_read(seller_vat_id="DE811907981"), VENDOR) is None


def test_a_structured_invoice_or_an_unconfirmed_vendor_is_left_as_it_is() -> None:
    structured = InvoiceFields(seller_name="X", sources={"seller_name": FieldSource("/Invoice/Seller")})
    assert with_registered_vendor(structured, VENDOR) == structured
    fields = page_read(seller_name="X")
    assert with_registered_vendor(fields, None) == fields


def test_a_shared_sign_is_the_currency_a_person_approved_the_vendors_invoices_in_and_held_otherwise() -> None:
    fields = page_read(seller_vat_id=VAT)
    assert DOLLARS and "USD" in DOLLARS["$"] and "CAD" in DOLLARS["$"]
    usd = with_registered_vendor(fields, VENDOR, approved_currencies=("USD",), shared_signs=DOLLARS)
    assert usd.currency == "USD"
    assert (
        usd.sources["currency"].source.startswith("registry:vendor #7 ")
        and "'$'" in usd.sources["currency"].source
    )
    # Nobody approved one in a dollar yet, or in two of them, or the sign is another one: unread.
    for approved, signs in (((), DOLLARS), (("EUR",), DOLLARS), (("USD", "CAD"), DOLLARS), (("USD",), {})):
        assert (
            with_registered_vendor(fields, VENDOR, approved_currencies=approved, shared_signs=signs).currency
            is None
        )
    # A currency the page itself says is never replaced.
    read = page_read(seller_vat_id=VAT, currency="CAD")
    assert (
        with_registered_vendor(read, VENDOR, approved_currencies=("USD",), shared_signs=DOLLARS).currency
        == "CAD"
    )


def test_shared_signs_are_only_those_printed_by_amounts_and_never_a_prefixed_dollar() -> None:
    assert set(shared_currency_signs("Summa   1 250,00 kr")) == {"kr"}
    assert shared_currency_signs("Total   US$1,190.00") == {}
    assert shared_currency_signs("Krone kr\nTotal 100.00") == {}
