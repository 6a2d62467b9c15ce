"""Small e-invoices built by hand, as an accountant tries the pipeline with (issue 58): UBL 2.1
Invoice or CreditNote and UN/CEFACT CII, with only the elements a test sets.

Amounts are passed as the text the document writes ("1190.00", "-119.00"); None leaves the
element out. `currency_ids` overrides the currencyID attribute of named UBL amounts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

UBL_NS = {
    "Invoice": "urn:oasis:names:specification:ubl:schema:xsd:Invoice-2",
    "CreditNote": "urn:oasis:names:specification:ubl:schema:xsd:CreditNote-2",
}
_CAC = "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2"
_CBC = "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"


@dataclass(frozen=True)
class EInvoice:
    number: str = "INV-1001"
    issue_date: str = "2026-11-02"
    currency: str = "EUR"
    type_code: str | None = "380"
    seller: str = "Nordwind Logistik GmbH"
    seller_vat: str = "DE123456788"  # check digits valid: an identifier
    buyer: str = "Maison Verte Paysage"
    iban: str | None = "DE89370400440532013000"
    net: str | None = "1000.00"
    tax: str | None = "190.00"
    grand: str | None = "1190.00"
    prepaid: str | None = None
    rounding: str | None = None
    due: str | None = "1190.00"
    payment_means: str | None = "58"
    mandate: str | None = None
    debited_account: str | None = None
    preceding: str | None = None
    preceding_date: str | None = None
    tax_currency: str | None = None
    tax_in_tax_currency: str | None = None
    # UBL only: another currencyID on an amount, by element name (e.g. {"PayableAmount": "CHF"}).
    currency_ids: Mapping[str, str] = field(default_factory=dict)
    # What EN 16931 requires besides (issue 55: the e-invoice validator holds a document without
    # them): the parties' countries; one line and a VAT breakdown are formed from net and tax.
    seller_country: str = "DE"
    buyer_country: str = "FR"
    # CII only: the specification identifier (BT-24), e.g. a Factur-X profile's.
    guideline: str = "urn:cen.eu:en16931:2017"


# The parts every document carries so that it is a valid EN 16931 invoice (BR-08..BR-11, BR-16,
# BR-CO-18, BR-CO-25): the tests here are about other things than these.
PAYMENT_TERMS = "30 days net"
LINE_ITEM = "Services as agreed"
_UBL_ADDRESS = (
    "<cac:PostalAddress><cbc:CityName>Hamburg</cbc:CityName><cbc:PostalZone>20457</cbc:PostalZone>"
    "<cac:Country><cbc:IdentificationCode>{country}</cbc:IdentificationCode></cac:Country></cac:PostalAddress>"
)
_CII_ADDRESS = (
    "<ram:PostalTradeAddress><ram:PostcodeCode>20457</ram:PostcodeCode><ram:CityName>Hamburg</ram:CityName>"
    "<ram:CountryID>{country}</ram:CountryID></ram:PostalTradeAddress>"
)


@dataclass(frozen=True)
class _VatLine:
    """The one invoice line (net amount, quantity, unit price) and its VAT rate, from net and tax."""

    net: str | None
    quantity: str = "1"
    price: str | None = None
    rate: str = "0"


def _vat_line(inv: EInvoice) -> _VatLine:
    if inv.net is None:
        return _VatLine(None)
    net = Decimal(inv.net)
    rate = (
        (Decimal(inv.tax) * 100 / net).quantize(Decimal("0.01")).normalize()
        if inv.tax and net
        else Decimal(0)
    )
    # A negative line is a negative quantity of a positive price (BR-27: no negative price).
    return _VatLine(inv.net, "-1" if net < 0 else "1", str(abs(net)), f"{rate:f}")


def _cii_line(inv: EInvoice, vat: _VatLine) -> str:
    if vat.net is None:
        return ""
    return (
        "<ram:IncludedSupplyChainTradeLineItem><ram:AssociatedDocumentLineDocument><ram:LineID>1</ram:LineID>"
        f"</ram:AssociatedDocumentLineDocument><ram:SpecifiedTradeProduct><ram:Name>{LINE_ITEM}</ram:Name>"
        "</ram:SpecifiedTradeProduct><ram:SpecifiedLineTradeAgreement><ram:NetPriceProductTradePrice>"
        f"<ram:ChargeAmount>{vat.price}</ram:ChargeAmount></ram:NetPriceProductTradePrice>"
        f'</ram:SpecifiedLineTradeAgreement><ram:SpecifiedLineTradeDelivery><ram:BilledQuantity unitCode="C62">'
        f"{vat.quantity}</ram:BilledQuantity></ram:SpecifiedLineTradeDelivery><ram:SpecifiedLineTradeSettlement>"
        "<ram:ApplicableTradeTax><ram:TypeCode>VAT</ram:TypeCode><ram:CategoryCode>S</ram:CategoryCode>"
        f"<ram:RateApplicablePercent>{vat.rate}</ram:RateApplicablePercent></ram:ApplicableTradeTax>"
        "<ram:SpecifiedTradeSettlementLineMonetarySummation>"
        f"<ram:LineTotalAmount>{vat.net}</ram:LineTotalAmount></ram:SpecifiedTradeSettlementLineMonetarySummation>"
        "</ram:SpecifiedLineTradeSettlement></ram:IncludedSupplyChainTradeLineItem>"
    )


def ubl(inv: EInvoice, *, root: str = "Invoice") -> bytes:
    """A UBL Invoice (or CreditNote: `root="CreditNote"`, its type code element renamed)."""

    def amount(name: str, value: str | None) -> str:
        if value is None:
            return ""
        cur = inv.currency_ids.get(name, inv.currency)
        return f'<cbc:{name} currencyID="{cur}">{value}</cbc:{name}>'

    type_element = "CreditNoteTypeCode" if root == "CreditNote" else "InvoiceTypeCode"
    parts = [
        f'<{root} xmlns="{UBL_NS[root]}" xmlns:cac="{_CAC}" xmlns:cbc="{_CBC}">',
        "<cbc:CustomizationID>urn:cen.eu:en16931:2017</cbc:CustomizationID>",
        f"<cbc:ID>{inv.number}</cbc:ID><cbc:IssueDate>{inv.issue_date}</cbc:IssueDate>",
        f"<cbc:{type_element}>{inv.type_code}</cbc:{type_element}>" if inv.type_code else "",
        f"<cbc:DocumentCurrencyCode>{inv.currency}</cbc:DocumentCurrencyCode>",
        f"<cbc:TaxCurrencyCode>{inv.tax_currency}</cbc:TaxCurrencyCode>" if inv.tax_currency else "",
        (
            "<cac:BillingReference><cac:InvoiceDocumentReference>"
            f"<cbc:ID>{inv.preceding}</cbc:ID>"
            + (f"<cbc:IssueDate>{inv.preceding_date}</cbc:IssueDate>" if inv.preceding_date else "")
            + "</cac:InvoiceDocumentReference></cac:BillingReference>"
            if inv.preceding
            else ""
        ),
        "<cac:AccountingSupplierParty><cac:Party>",
        _UBL_ADDRESS.format(country=inv.seller_country),
        f"<cac:PartyTaxScheme><cbc:CompanyID>{inv.seller_vat}</cbc:CompanyID>"
        "<cac:TaxScheme><cbc:ID>VAT</cbc:ID></cac:TaxScheme></cac:PartyTaxScheme>",
        f"<cac:PartyLegalEntity><cbc:RegistrationName>{inv.seller}</cbc:RegistrationName></cac:PartyLegalEntity>",
        "</cac:Party></cac:AccountingSupplierParty>",
        "<cac:AccountingCustomerParty><cac:Party>",
        _UBL_ADDRESS.format(country=inv.buyer_country),
        f"<cac:PartyLegalEntity><cbc:RegistrationName>{inv.buyer}</cbc:RegistrationName></cac:PartyLegalEntity>",
        "</cac:Party></cac:AccountingCustomerParty>",
    ]
    if inv.payment_means or inv.iban or inv.mandate:
        parts.append("<cac:PaymentMeans>")
        if inv.payment_means:
            parts.append(f"<cbc:PaymentMeansCode>{inv.payment_means}</cbc:PaymentMeansCode>")
        if inv.iban:
            parts.append(
                f"<cac:PayeeFinancialAccount><cbc:ID>{inv.iban}</cbc:ID></cac:PayeeFinancialAccount>"
            )
        if inv.mandate:
            parts.append(f"<cac:PaymentMandate><cbc:ID>{inv.mandate}</cbc:ID>")
            if inv.debited_account:
                parts.append(
                    f"<cac:PayerFinancialAccount><cbc:ID>{inv.debited_account}</cbc:ID></cac:PayerFinancialAccount>"
                )
            parts.append("</cac:PaymentMandate>")
        parts.append("</cac:PaymentMeans>")
    parts.append(f"<cac:PaymentTerms><cbc:Note>{PAYMENT_TERMS}</cbc:Note></cac:PaymentTerms>")
    vat = _vat_line(inv)
    if inv.tax is not None:
        breakdown = (
            f"<cac:TaxSubtotal>{amount('TaxableAmount', vat.net)}{amount('TaxAmount', inv.tax)}"
            f"<cac:TaxCategory><cbc:ID>S</cbc:ID><cbc:Percent>{vat.rate}</cbc:Percent>"
            "<cac:TaxScheme><cbc:ID>VAT</cbc:ID></cac:TaxScheme></cac:TaxCategory></cac:TaxSubtotal>"
            if vat.net is not None
            else ""
        )
        parts.append(f"<cac:TaxTotal>{amount('TaxAmount', inv.tax)}{breakdown}</cac:TaxTotal>")
    if inv.tax_in_tax_currency is not None and inv.tax_currency:
        parts.append(
            f'<cac:TaxTotal><cbc:TaxAmount currencyID="{inv.tax_currency}">{inv.tax_in_tax_currency}'
            "</cbc:TaxAmount></cac:TaxTotal>"
        )
    parts += [
        "<cac:LegalMonetaryTotal>",
        amount("LineExtensionAmount", inv.net),
        amount("TaxExclusiveAmount", inv.net),
        amount("TaxInclusiveAmount", inv.grand),
        amount("PrepaidAmount", inv.prepaid),
        amount("PayableRoundingAmount", inv.rounding),
        amount("PayableAmount", inv.due),
        "</cac:LegalMonetaryTotal>",
    ]
    if vat.net is not None:
        line = "CreditNoteLine" if root == "CreditNote" else "InvoiceLine"
        quantity = "CreditedQuantity" if root == "CreditNote" else "InvoicedQuantity"
        parts.append(
            f'<cac:{line}><cbc:ID>1</cbc:ID><cbc:{quantity} unitCode="C62">{vat.quantity}</cbc:{quantity}>'
            f"{amount('LineExtensionAmount', vat.net)}<cac:Item><cbc:Name>{LINE_ITEM}</cbc:Name>"
            f"<cac:ClassifiedTaxCategory><cbc:ID>S</cbc:ID><cbc:Percent>{vat.rate}</cbc:Percent>"
            "<cac:TaxScheme><cbc:ID>VAT</cbc:ID></cac:TaxScheme></cac:ClassifiedTaxCategory></cac:Item>"
            f"<cac:Price>{amount('PriceAmount', vat.price)}</cac:Price></cac:{line}>"
        )
    parts.append(f"</{root}>")
    return "".join(parts).encode()


_CII_NS = (
    'xmlns:rsm="urn:un:unece:uncefact:data:standard:CrossIndustryInvoice:100" '
    'xmlns:ram="urn:un:unece:uncefact:data:standard:ReusableAggregateBusinessInformationEntity:100" '
    'xmlns:udt="urn:un:unece:uncefact:data:standard:UnqualifiedDataType:100" '
    'xmlns:qdt="urn:un:unece:uncefact:data:standard:QualifiedDataType:100"'
)


def cii(inv: EInvoice) -> bytes:
    """A CII CrossIndustryInvoice (D16B, as in Factur-X)."""

    def amount(name: str, value: str | None) -> str:
        return f"<ram:{name}>{value}</ram:{name}>" if value is not None else ""

    date = inv.issue_date.replace("-", "")
    settlement = [
        f"<ram:InvoiceCurrencyCode>{inv.currency}</ram:InvoiceCurrencyCode>",
        f"<ram:TaxCurrencyCode>{inv.tax_currency}</ram:TaxCurrencyCode>" if inv.tax_currency else "",
    ]
    if inv.payment_means or inv.iban or inv.debited_account:
        settlement.append("<ram:SpecifiedTradeSettlementPaymentMeans>")
        if inv.payment_means:
            settlement.append(f"<ram:TypeCode>{inv.payment_means}</ram:TypeCode>")
        if inv.debited_account:
            settlement.append(
                f"<ram:PayerPartyDebtorFinancialAccount><ram:IBANID>{inv.debited_account}</ram:IBANID>"
                "</ram:PayerPartyDebtorFinancialAccount>"
            )
        if inv.iban:
            settlement.append(
                f"<ram:PayeePartyCreditorFinancialAccount><ram:IBANID>{inv.iban}</ram:IBANID>"
                "</ram:PayeePartyCreditorFinancialAccount>"
            )
        settlement.append("</ram:SpecifiedTradeSettlementPaymentMeans>")
    vat = _vat_line(inv)
    if inv.tax is not None and vat.net is not None:
        settlement.append(
            f"<ram:ApplicableTradeTax><ram:CalculatedAmount>{inv.tax}</ram:CalculatedAmount><ram:TypeCode>VAT"
            f"</ram:TypeCode><ram:BasisAmount>{vat.net}</ram:BasisAmount><ram:CategoryCode>S</ram:CategoryCode>"
            f"<ram:RateApplicablePercent>{vat.rate}</ram:RateApplicablePercent></ram:ApplicableTradeTax>"
        )
    mandate = f"<ram:DirectDebitMandateID>{inv.mandate}</ram:DirectDebitMandateID>" if inv.mandate else ""
    settlement.append(
        f"<ram:SpecifiedTradePaymentTerms><ram:Description>{PAYMENT_TERMS}</ram:Description>{mandate}"
        "</ram:SpecifiedTradePaymentTerms>"
    )
    settlement += [
        "<ram:SpecifiedTradeSettlementHeaderMonetarySummation>",
        amount("LineTotalAmount", inv.net),
        amount("TaxBasisTotalAmount", inv.net),
        f'<ram:TaxTotalAmount currencyID="{inv.currency}">{inv.tax}</ram:TaxTotalAmount>'
        if inv.tax is not None
        else "",
        f'<ram:TaxTotalAmount currencyID="{inv.tax_currency}">{inv.tax_in_tax_currency}</ram:TaxTotalAmount>'
        if inv.tax_in_tax_currency is not None and inv.tax_currency
        else "",
        amount("RoundingAmount", inv.rounding),
        amount("GrandTotalAmount", inv.grand),
        amount("TotalPrepaidAmount", inv.prepaid),
        amount("DuePayableAmount", inv.due),
        "</ram:SpecifiedTradeSettlementHeaderMonetarySummation>",
    ]
    if inv.preceding:
        settlement.append(
            f"<ram:InvoiceReferencedDocument><ram:IssuerAssignedID>{inv.preceding}</ram:IssuerAssignedID>"
            + (
                '<ram:FormattedIssueDateTime><qdt:DateTimeString format="102">'
                f"{inv.preceding_date.replace('-', '')}</qdt:DateTimeString></ram:FormattedIssueDateTime>"
                if inv.preceding_date
                else ""
            )
            + "</ram:InvoiceReferencedDocument>"
        )
    return (
        f"<rsm:CrossIndustryInvoice {_CII_NS}>"
        "<rsm:ExchangedDocumentContext><ram:GuidelineSpecifiedDocumentContextParameter>"
        f"<ram:ID>{inv.guideline}</ram:ID></ram:GuidelineSpecifiedDocumentContextParameter>"
        "</rsm:ExchangedDocumentContext>"
        f"<rsm:ExchangedDocument><ram:ID>{inv.number}</ram:ID>"
        + (f"<ram:TypeCode>{inv.type_code}</ram:TypeCode>" if inv.type_code else "")
        + f'<ram:IssueDateTime><udt:DateTimeString format="102">{date}</udt:DateTimeString></ram:IssueDateTime>'
        "</rsm:ExchangedDocument><rsm:SupplyChainTradeTransaction>"
        + _cii_line(inv, vat)
        + "<ram:ApplicableHeaderTradeAgreement>"
        f"<ram:SellerTradeParty><ram:Name>{inv.seller}</ram:Name>{_CII_ADDRESS.format(country=inv.seller_country)}"
        f'<ram:SpecifiedTaxRegistration><ram:ID schemeID="VA">{inv.seller_vat}</ram:ID></ram:SpecifiedTaxRegistration>'
        f"</ram:SellerTradeParty><ram:BuyerTradeParty><ram:Name>{inv.buyer}</ram:Name>"
        f"{_CII_ADDRESS.format(country=inv.buyer_country)}</ram:BuyerTradeParty>"
        "</ram:ApplicableHeaderTradeAgreement><ram:ApplicableHeaderTradeDelivery/>"
        "<ram:ApplicableHeaderTradeSettlement>"
        + "".join(settlement)
        + "</ram:ApplicableHeaderTradeSettlement>"
        "</rsm:SupplyChainTradeTransaction></rsm:CrossIndustryInvoice>"
    ).encode()


def corrected_invoice(number: str, corrects: str, grand: str, **kw: Any) -> bytes:
    """A CII corrected invoice (type 384) of the default seller, naming `corrects` as the invoice it
    corrects (BT-25), for `grand` in all (19 % VAT); its own number says nothing of what it corrects."""
    net = (Decimal(grand) / Decimal("1.19")).quantize(Decimal("0.01"))
    return cii(
        EInvoice(
            number=number,
            type_code="384",
            preceding=corrects,
            preceding_date="2026-11-02",
            net=str(net),
            tax=str(Decimal(grand) - net),
            grand=grand,
            due=grand,
            **kw,
        )
    )
