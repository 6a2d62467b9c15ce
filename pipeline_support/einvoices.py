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
        f"<cac:PartyTaxScheme><cbc:CompanyID>{inv.seller_vat}</cbc:CompanyID>"
        "<cac:TaxScheme><cbc:ID>VAT</cbc:ID></cac:TaxScheme></cac:PartyTaxScheme>",
        f"<cac:PartyLegalEntity><cbc:RegistrationName>{inv.seller}</cbc:RegistrationName></cac:PartyLegalEntity>",
        "</cac:Party></cac:AccountingSupplierParty>",
        "<cac:AccountingCustomerParty><cac:Party>",
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
    if inv.tax is not None:
        parts.append(f"<cac:TaxTotal>{amount('TaxAmount', inv.tax)}</cac:TaxTotal>")
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
        f"</{root}>",
    ]
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
    if inv.mandate:
        settlement.append(
            f"<ram:SpecifiedTradePaymentTerms><ram:DirectDebitMandateID>{inv.mandate}</ram:DirectDebitMandateID>"
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
        "<ram:ID>urn:cen.eu:en16931:2017</ram:ID></ram:GuidelineSpecifiedDocumentContextParameter>"
        "</rsm:ExchangedDocumentContext>"
        f"<rsm:ExchangedDocument><ram:ID>{inv.number}</ram:ID>"
        + (f"<ram:TypeCode>{inv.type_code}</ram:TypeCode>" if inv.type_code else "")
        + f'<ram:IssueDateTime><udt:DateTimeString format="102">{date}</udt:DateTimeString></ram:IssueDateTime>'
        "</rsm:ExchangedDocument><rsm:SupplyChainTradeTransaction><ram:ApplicableHeaderTradeAgreement>"
        f"<ram:SellerTradeParty><ram:Name>{inv.seller}</ram:Name>"
        f'<ram:SpecifiedTaxRegistration><ram:ID schemeID="VA">{inv.seller_vat}</ram:ID></ram:SpecifiedTaxRegistration>'
        f"</ram:SellerTradeParty><ram:BuyerTradeParty><ram:Name>{inv.buyer}</ram:Name></ram:BuyerTradeParty>"
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
