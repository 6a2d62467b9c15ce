"""One seller's number is paid once, through the real stages (issue 58 item 3).

Hand-built UBL and CII documents of one seller, ingested, read by the real parsers, validated,
decided under the advisory locks and posted (or held) by the real pipeline on a real database.
Each case posted both documents before: the duplicate check then needed equal totals, issue
dates at most 3 days apart for a reformatted number, and signed credit-note totals.
"""

from __future__ import annotations

from uuid import UUID

from invoice_pipeline.domain.review import SUSPECTED_DUPLICATE, reason_code
from invoice_pipeline.engine.review import Actor, act
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.engine.review.helpers import failure_messages, postings, run_batch, sql

ALICE = Actor("os-user:alice", "review:alice@test:1")
SELLER = "Nordwind Logistik GmbH"
SELLER_VAT = "DE123456788"  # check digits valid: an identifier


def ubl(number: str, issued: str, net: str, tax: str, payable: str, *, credit: bool = False) -> bytes:
    """A UBL 2.1 invoice (or CreditNote) of one line, written by hand as a seller's system would."""
    root, type_tag, type_code, line_tag, qty_tag = (
        ("CreditNote", "CreditNoteTypeCode", "381", "CreditNoteLine", "CreditedQuantity")
        if credit
        else ("Invoice", "InvoiceTypeCode", "380", "InvoiceLine", "InvoicedQuantity")
    )
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<{root} xmlns="urn:oasis:names:specification:ubl:schema:xsd:{root}-2"
 xmlns:cac="urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2"
 xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2">
 <cbc:CustomizationID>urn:cen.eu:en16931:2017</cbc:CustomizationID>
 <cbc:ID>{number}</cbc:ID>
 <cbc:IssueDate>{issued}</cbc:IssueDate>
 <cbc:{type_tag}>{type_code}</cbc:{type_tag}>
 <cbc:DocumentCurrencyCode>EUR</cbc:DocumentCurrencyCode>
 <cac:AccountingSupplierParty><cac:Party>
  <cac:PartyName><cbc:Name>{SELLER}</cbc:Name></cac:PartyName>
  <cac:PostalAddress><cbc:CityName>Hamburg</cbc:CityName><cbc:PostalZone>20457</cbc:PostalZone>
   <cac:Country><cbc:IdentificationCode>DE</cbc:IdentificationCode></cac:Country></cac:PostalAddress>
  <cac:PartyTaxScheme><cbc:CompanyID>{SELLER_VAT}</cbc:CompanyID><cac:TaxScheme><cbc:ID>VAT</cbc:ID></cac:TaxScheme></cac:PartyTaxScheme>
  <cac:PartyLegalEntity><cbc:RegistrationName>{SELLER}</cbc:RegistrationName></cac:PartyLegalEntity>
 </cac:Party></cac:AccountingSupplierParty>
 <cac:AccountingCustomerParty><cac:Party>
  <cac:PartyName><cbc:Name>Maison Verte Paysage</cbc:Name></cac:PartyName>
  <cac:PostalAddress><cbc:CityName>Paris</cbc:CityName><cbc:PostalZone>75016</cbc:PostalZone>
   <cac:Country><cbc:IdentificationCode>FR</cbc:IdentificationCode></cac:Country></cac:PostalAddress>
  <cac:PartyLegalEntity><cbc:RegistrationName>Maison Verte Paysage</cbc:RegistrationName></cac:PartyLegalEntity>
 </cac:Party></cac:AccountingCustomerParty>
 <cac:TaxTotal><cbc:TaxAmount currencyID="EUR">{tax}</cbc:TaxAmount>
  <cac:TaxSubtotal><cbc:TaxableAmount currencyID="EUR">{net}</cbc:TaxableAmount><cbc:TaxAmount currencyID="EUR">{tax}</cbc:TaxAmount>
   <cac:TaxCategory><cbc:ID>S</cbc:ID><cbc:Percent>19</cbc:Percent><cac:TaxScheme><cbc:ID>VAT</cbc:ID></cac:TaxScheme></cac:TaxCategory></cac:TaxSubtotal>
 </cac:TaxTotal>
 <cac:LegalMonetaryTotal>
  <cbc:LineExtensionAmount currencyID="EUR">{net}</cbc:LineExtensionAmount>
  <cbc:TaxExclusiveAmount currencyID="EUR">{net}</cbc:TaxExclusiveAmount>
  <cbc:TaxInclusiveAmount currencyID="EUR">{payable}</cbc:TaxInclusiveAmount>
  <cbc:PayableAmount currencyID="EUR">{payable}</cbc:PayableAmount>
 </cac:LegalMonetaryTotal>
 <cac:{line_tag}><cbc:ID>1</cbc:ID><cbc:{qty_tag} unitCode="C62">1</cbc:{qty_tag}>
  <cbc:LineExtensionAmount currencyID="EUR">{net}</cbc:LineExtensionAmount>
  <cac:Item><cbc:Name>Freight Hamburg-Paris</cbc:Name>
   <cac:ClassifiedTaxCategory><cbc:ID>S</cbc:ID><cbc:Percent>19</cbc:Percent><cac:TaxScheme><cbc:ID>VAT</cbc:ID></cac:TaxScheme></cac:ClassifiedTaxCategory></cac:Item>
  <cac:Price><cbc:PriceAmount currencyID="EUR">{net}</cbc:PriceAmount></cac:Price>
 </cac:{line_tag}>
</{root}>
""".encode()


def cii(number: str, issued: str, net: str, tax: str, payable: str, *, type_code: str = "380") -> bytes:
    """A CII (UN/CEFACT D16B) invoice of one line, written by hand; 381 is a credit note."""
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<rsm:CrossIndustryInvoice xmlns:rsm="urn:un:unece:uncefact:data:standard:CrossIndustryInvoice:100"
 xmlns:ram="urn:un:unece:uncefact:data:standard:ReusableAggregateBusinessInformationEntity:100"
 xmlns:udt="urn:un:unece:uncefact:data:standard:UnqualifiedDataType:100">
 <rsm:ExchangedDocumentContext><ram:GuidelineSpecifiedDocumentContextParameter>
  <ram:ID>urn:cen.eu:en16931:2017</ram:ID></ram:GuidelineSpecifiedDocumentContextParameter></rsm:ExchangedDocumentContext>
 <rsm:ExchangedDocument><ram:ID>{number}</ram:ID><ram:TypeCode>{type_code}</ram:TypeCode>
  <ram:IssueDateTime><udt:DateTimeString format="102">{issued.replace("-", "")}</udt:DateTimeString></ram:IssueDateTime>
 </rsm:ExchangedDocument>
 <rsm:SupplyChainTradeTransaction>
  <ram:IncludedSupplyChainTradeLineItem>
   <ram:AssociatedDocumentLineDocument><ram:LineID>1</ram:LineID></ram:AssociatedDocumentLineDocument>
   <ram:SpecifiedTradeProduct><ram:Name>Freight Hamburg-Paris</ram:Name></ram:SpecifiedTradeProduct>
   <ram:SpecifiedLineTradeAgreement><ram:NetPriceProductTradePrice><ram:ChargeAmount>{net}</ram:ChargeAmount></ram:NetPriceProductTradePrice></ram:SpecifiedLineTradeAgreement>
   <ram:SpecifiedLineTradeDelivery><ram:BilledQuantity unitCode="C62">1</ram:BilledQuantity></ram:SpecifiedLineTradeDelivery>
   <ram:SpecifiedLineTradeSettlement>
    <ram:ApplicableTradeTax><ram:TypeCode>VAT</ram:TypeCode><ram:CategoryCode>S</ram:CategoryCode><ram:RateApplicablePercent>19</ram:RateApplicablePercent></ram:ApplicableTradeTax>
    <ram:SpecifiedTradeSettlementLineMonetarySummation><ram:LineTotalAmount>{net}</ram:LineTotalAmount></ram:SpecifiedTradeSettlementLineMonetarySummation>
   </ram:SpecifiedLineTradeSettlement>
  </ram:IncludedSupplyChainTradeLineItem>
  <ram:ApplicableHeaderTradeAgreement>
   <ram:SellerTradeParty><ram:Name>{SELLER}</ram:Name>
    <ram:PostalTradeAddress><ram:PostcodeCode>20457</ram:PostcodeCode><ram:CityName>Hamburg</ram:CityName><ram:CountryID>DE</ram:CountryID></ram:PostalTradeAddress>
    <ram:SpecifiedTaxRegistration><ram:ID schemeID="VA">{SELLER_VAT}</ram:ID></ram:SpecifiedTaxRegistration>
   </ram:SellerTradeParty>
   <ram:BuyerTradeParty><ram:Name>Maison Verte Paysage</ram:Name>
    <ram:PostalTradeAddress><ram:PostcodeCode>75016</ram:PostcodeCode><ram:CityName>Paris</ram:CityName><ram:CountryID>FR</ram:CountryID></ram:PostalTradeAddress>
   </ram:BuyerTradeParty>
  </ram:ApplicableHeaderTradeAgreement>
  <ram:ApplicableHeaderTradeDelivery/>
  <ram:ApplicableHeaderTradeSettlement>
   <ram:InvoiceCurrencyCode>EUR</ram:InvoiceCurrencyCode>
   <ram:ApplicableTradeTax><ram:CalculatedAmount>{tax}</ram:CalculatedAmount><ram:TypeCode>VAT</ram:TypeCode><ram:BasisAmount>{net}</ram:BasisAmount><ram:CategoryCode>S</ram:CategoryCode><ram:RateApplicablePercent>19</ram:RateApplicablePercent></ram:ApplicableTradeTax>
   <ram:SpecifiedTradeSettlementHeaderMonetarySummation>
    <ram:LineTotalAmount>{net}</ram:LineTotalAmount><ram:TaxBasisTotalAmount>{net}</ram:TaxBasisTotalAmount>
    <ram:TaxTotalAmount currencyID="EUR">{tax}</ram:TaxTotalAmount>
    <ram:GrandTotalAmount>{payable}</ram:GrandTotalAmount><ram:DuePayableAmount>{payable}</ram:DuePayableAmount>
   </ram:SpecifiedTradeSettlementHeaderMonetarySummation>
  </ram:ApplicableHeaderTradeSettlement>
 </rsm:SupplyChainTradeTransaction>
</rsm:CrossIndustryInvoice>
""".encode()


def process(database_url: str, store: InvoiceStore, content: bytes, name: str) -> UUID:
    """Ingest one document and run it through the pipeline, after everything before it."""
    invoice_id = store.documents.store_document(content, "acme", name).invoice_id
    result = run_batch(database_url, [invoice_id])
    assert result.success, failure_messages(result)
    return invoice_id


def state(database_url: str, invoice_id: UUID) -> tuple[str, str | None, UUID | None, list[str]]:
    status, duplicate, original, reasons = sql(
        database_url,
        "SELECT status, duplicate_status, duplicate_of, coalesce(review_reasons, '{}') FROM invoices WHERE id = %s",
        (invoice_id,),
    )[0]
    return status, duplicate, original, [reason_code(r) for r in reasons]


def test_ubl_at_1190_00_and_cii_at_1190_02_post_once_and_hold_the_other(
    database_url: str, store: InvoiceStore
) -> None:
    first = process(
        database_url, store, ubl("INV-1001", "2026-11-02", "1000.00", "190.00", "1190.00"), "a.xml"
    )
    second = process(
        database_url, store, cii("INV-1001", "2026-11-02", "1000.02", "190.00", "1190.02"), "b.xml"
    )
    assert postings(database_url, first) == 1
    assert state(database_url, second) == ("needs_review", "suspected", first, [SUSPECTED_DUPLICATE])
    assert postings(database_url, second) == 0


def test_inv_1001_resent_as_1001_nine_days_later_is_held(database_url: str, store: InvoiceStore) -> None:
    first = process(
        database_url, store, ubl("INV-1001", "2026-11-02", "1000.00", "190.00", "1190.00"), "a.xml"
    )
    resend = process(database_url, store, cii("1001", "2026-11-11", "1000.00", "190.00", "1190.00"), "b.xml")
    assert postings(database_url, first) == 1
    assert state(database_url, resend) == ("needs_review", "suspected", first, [SUSPECTED_DUPLICATE])
    assert postings(database_url, resend) == 0


def test_credit_note_as_ubl_plus_and_cii_minus_is_credited_once(
    database_url: str, store: InvoiceStore
) -> None:
    ubl_credit = process(
        database_url, store, ubl("CN-1", "2026-11-02", "100.00", "19.00", "119.00", credit=True), "cn.xml"
    )
    cii_credit = process(
        database_url,
        store,
        cii("CN-1", "2026-11-02", "-100.00", "-19.00", "-119.00", type_code="381"),
        "cn2.xml",
    )
    assert postings(database_url, ubl_credit) == 1
    assert state(database_url, cii_credit)[1:3] == ("duplicate", ubl_credit)
    assert postings(database_url, cii_credit) == 0


def test_invoice_7_of_2026_is_held_beside_invoice_7_of_2025_not_rejected(
    database_url: str, store: InvoiceStore
) -> None:
    last_year = process(database_url, store, ubl("7", "2025-11-02", "1000.00", "190.00", "1190.00"), "a.xml")
    this_year = process(database_url, store, ubl("7", "2026-11-02", "1000.00", "190.00", "1190.00"), "b.xml")
    assert postings(database_url, last_year) == 1
    assert state(database_url, this_year) == ("needs_review", "suspected", last_year, [SUSPECTED_DUPLICATE])
    assert postings(database_url, this_year) == 0
    # The person says these are two invoices: the second becomes an original beside the first
    # (sql/0021 lets one seller's number and amount be an original once per year) and is posted.
    released = act(store, "not_duplicate", this_year, ALICE, "a new year, the number counted from 1 again")
    assert released.done, released.message
    result = run_batch(database_url, [this_year])
    assert result.success, failure_messages(result)
    assert state(database_url, this_year) == ("processed", "original", None, [])
    assert postings(database_url, this_year) == 1
