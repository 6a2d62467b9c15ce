"""Rendering one invented invoice as UBL, CII, JSON, PDF or Factur-X bytes."""

from __future__ import annotations

import datetime as dt
import io
import json
from dataclasses import dataclass
from decimal import Decimal
from xml.sax.saxutils import escape

from fpdf import FPDF

from ..domain.fields import DocumentType, FieldSource, InvoiceFields

FIXED_PDF_DATE = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class Party:
    name: str
    vat_id: str | None
    street: str
    postcode: str
    city: str
    country: str
    # A seller without a VAT id (outside the EU) is identified by these instead, as EN 16931
    # requires (BR-CO-26: a legal registration id, BT-30; BR-S-02: a tax registration, BT-32).
    registration: str | None = None
    tax_number: str | None = None


@dataclass(frozen=True)
class Line:
    description: str
    quantity: Decimal
    unit_price: Decimal
    vat_rate: Decimal

    @property
    def net(self) -> Decimal:
        return (self.quantity * self.unit_price).quantize(Decimal("0.01"))

    # An e-invoice states a negative line as a negative quantity of a positive price (EN 16931
    # BR-27: an item's net price is never negative); the line's net amount is the same.
    @property
    def xml_quantity(self) -> Decimal:
        return -self.quantity if self.unit_price < 0 else self.quantity

    @property
    def xml_price(self) -> Decimal:
        return abs(self.unit_price)


@dataclass(frozen=True)
class SampleInvoice:
    """The truth a sample file is rendered from."""

    invoice_number: str
    document_type: DocumentType
    issue_date: dt.date
    due_date: dt.date | None
    currency: str
    seller: Party
    buyer: Party
    lines: tuple[Line, ...]
    po_number: str | None
    # Overrides for deliberately broken samples (rendered verbatim, not computed).
    payable_override: str | None = None
    issue_date_text: str | None = None
    omit_payable: bool = False
    # The account the seller asks to be paid into; rendered in UBL and JSON only (None: not printed).
    payee_iban: str | None = None

    @property
    def net_total(self) -> Decimal:
        return sum((line.net for line in self.lines), Decimal("0.00"))

    @property
    def tax_total(self) -> Decimal:
        # Rounded per rate, as the VAT breakdown states it (BR-CO-14: the total is their sum).
        return sum((tax for _, _, tax in _vat_by_rate(self)), Decimal("0"))

    @property
    def payable_total(self) -> Decimal:
        if self.payable_override is not None:
            return Decimal(self.payable_override)
        return self.net_total + self.tax_total

    def to_fields(self) -> InvoiceFields:
        return InvoiceFields(
            invoice_number=self.invoice_number,
            document_type=self.document_type,
            issue_date=None if self.issue_date_text else self.issue_date,
            due_date=self.due_date,
            currency=self.currency,
            net_total=self.net_total,
            tax_total=self.tax_total,
            payable_total=None if self.omit_payable else self.payable_total,
            seller_name=self.seller.name,
            seller_vat_id=self.seller.vat_id,
            buyer_name=self.buyer.name,
            po_number=self.po_number,
            payee_iban=self.payee_iban,
            sources={"*": FieldSource("sample-generator")},
        )


def _a(value: Decimal) -> str:
    return f"{value:.2f}"


def _issue_text(inv: SampleInvoice) -> str:
    return inv.issue_date_text or inv.issue_date.isoformat()


# ------------------------------------------------------------------ UBL


def _ubl_party(p: Party) -> str:
    vat = (
        f"<cac:PartyTaxScheme><cbc:CompanyID>{escape(p.vat_id)}</cbc:CompanyID>"
        "<cac:TaxScheme><cbc:ID>VAT</cbc:ID></cac:TaxScheme></cac:PartyTaxScheme>"
        if p.vat_id
        else ""
    )
    if p.tax_number:
        vat += (
            f"<cac:PartyTaxScheme><cbc:CompanyID>{escape(p.tax_number)}</cbc:CompanyID>"
            "<cac:TaxScheme><cbc:ID>TAX</cbc:ID></cac:TaxScheme></cac:PartyTaxScheme>"
        )
    registration = f"<cbc:CompanyID>{escape(p.registration)}</cbc:CompanyID>" if p.registration else ""
    return (
        f"<cac:Party><cac:PartyName><cbc:Name>{escape(p.name)}</cbc:Name></cac:PartyName>"
        f"<cac:PostalAddress><cbc:StreetName>{escape(p.street)}</cbc:StreetName><cbc:CityName>{escape(p.city)}</cbc:CityName>"
        f"<cbc:PostalZone>{p.postcode}</cbc:PostalZone><cac:Country><cbc:IdentificationCode>{p.country}"
        "</cbc:IdentificationCode></cac:Country></cac:PostalAddress>"
        f"{vat}<cac:PartyLegalEntity><cbc:RegistrationName>{escape(p.name)}</cbc:RegistrationName>{registration}"
        "</cac:PartyLegalEntity></cac:Party>"
    )


def _ubl_payee_account(inv: SampleInvoice) -> str:
    if not inv.payee_iban:
        return ""
    return f"<cac:PayeeFinancialAccount><cbc:ID>{escape(inv.payee_iban)}</cbc:ID></cac:PayeeFinancialAccount>"


def vat_category(rate: Decimal) -> str:
    """UNTDID 5305: zero rated at 0 %, standard rated otherwise (BR-S-05: S needs a rate above 0)."""
    return "Z" if rate == 0 else "S"


_UBL_VAT = "<cac:TaxScheme><cbc:ID>VAT</cbc:ID></cac:TaxScheme>"


def _vat_by_rate(inv: SampleInvoice) -> list[tuple[Decimal, Decimal, Decimal]]:
    """(rate, taxable amount, tax) per VAT rate of the lines: the VAT breakdown (BG-23)."""
    out = []
    for rate in sorted({line.vat_rate for line in inv.lines}):
        basis = sum((ln.net for ln in inv.lines if ln.vat_rate == rate), Decimal(0))
        tax = sum((ln.net * rate / 100 for ln in inv.lines if ln.vat_rate == rate), Decimal(0))
        out.append((rate, basis, tax.quantize(Decimal("0.01"))))
    return out


def _ubl_vat_breakdown(inv: SampleInvoice) -> str:
    """EN 16931 requires one (BR-CO-18): the e-invoice validator holds an invoice without it."""
    cur = inv.currency
    return "".join(
        f'<cac:TaxSubtotal><cbc:TaxableAmount currencyID="{cur}">{_a(basis)}</cbc:TaxableAmount>'
        f'<cbc:TaxAmount currencyID="{cur}">{_a(tax)}</cbc:TaxAmount><cac:TaxCategory>'
        f"<cbc:ID>{vat_category(rate)}</cbc:ID>"
        f"<cbc:Percent>{rate}</cbc:Percent>{_UBL_VAT}</cac:TaxCategory></cac:TaxSubtotal>"
        for rate, basis, tax in _vat_by_rate(inv)
    )


def ubl_xml(inv: SampleInvoice) -> bytes:
    credit = inv.document_type == "credit_note"
    root = "CreditNote" if credit else "Invoice"
    ns = f"urn:oasis:names:specification:ubl:schema:xsd:{root}-2"
    cur = inv.currency
    line_tag = "CreditNoteLine" if credit else "InvoiceLine"
    qty_tag = "CreditedQuantity" if credit else "InvoicedQuantity"
    lines = "".join(
        f'<cac:{line_tag}><cbc:ID>{i}</cbc:ID><cbc:{qty_tag} unitCode="C62">{line.xml_quantity}</cbc:{qty_tag}>'
        f'<cbc:LineExtensionAmount currencyID="{cur}">{_a(line.net)}</cbc:LineExtensionAmount>'
        f"<cac:Item><cbc:Name>{escape(line.description)}</cbc:Name><cac:ClassifiedTaxCategory>"
        f"<cbc:ID>{vat_category(line.vat_rate)}</cbc:ID>"
        f"<cbc:Percent>{line.vat_rate}</cbc:Percent>{_UBL_VAT}</cac:ClassifiedTaxCategory></cac:Item>"
        f'<cac:Price><cbc:PriceAmount currencyID="{cur}">{line.xml_price}</cbc:PriceAmount></cac:Price></cac:{line_tag}>'
        for i, line in enumerate(inv.lines, 1)
    )
    due = ""
    if inv.due_date and not credit:
        due = f"<cbc:DueDate>{inv.due_date.isoformat()}</cbc:DueDate>"
    pay_means = (
        # A credit transfer names the account (BR-61); without one the means is not defined (1).
        f"<cac:PaymentMeans><cbc:PaymentMeansCode>{'30' if inv.payee_iban else '1'}</cbc:PaymentMeansCode>"
        f"<cbc:PaymentDueDate>{inv.due_date.isoformat()}</cbc:PaymentDueDate>{_ubl_payee_account(inv)}"
        "</cac:PaymentMeans>"
        if inv.due_date and credit
        else ""
    )
    if inv.payee_iban and not pay_means:
        pay_means = (
            f"<cac:PaymentMeans><cbc:PaymentMeansCode>58</cbc:PaymentMeansCode>{_ubl_payee_account(inv)}"
            "</cac:PaymentMeans>"
        )
    type_code = (
        "<cbc:CreditNoteTypeCode>381</cbc:CreditNoteTypeCode>"
        if credit
        else "<cbc:InvoiceTypeCode>380</cbc:InvoiceTypeCode>"
    )
    order = (
        f"<cac:OrderReference><cbc:ID>{escape(inv.po_number)}</cbc:ID></cac:OrderReference>"
        if inv.po_number
        else ""
    )
    # Without an amount due the reader forms it from the grand total (BR-CO-16): a document with
    # no payable total omits both.
    payable = (
        ""
        if inv.omit_payable
        else f'<cbc:TaxInclusiveAmount currencyID="{cur}">{_a(inv.net_total + inv.tax_total)}</cbc:TaxInclusiveAmount>'
        f'<cbc:PayableAmount currencyID="{cur}">{_a(inv.payable_total)}</cbc:PayableAmount>'
    )
    doc = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<{root} xmlns="{ns}" '
        'xmlns:cac="urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2" '
        'xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2">'
        "<cbc:CustomizationID>urn:cen.eu:en16931:2017</cbc:CustomizationID>"
        f"<cbc:ID>{escape(inv.invoice_number)}</cbc:ID><cbc:IssueDate>{_issue_text(inv)}</cbc:IssueDate>{due}"
        f"{type_code}<cbc:DocumentCurrencyCode>{cur}</cbc:DocumentCurrencyCode>{order}"
        f"<cac:AccountingSupplierParty>{_ubl_party(inv.seller)}</cac:AccountingSupplierParty>"
        f"<cac:AccountingCustomerParty>{_ubl_party(inv.buyer)}</cac:AccountingCustomerParty>{pay_means}"
        f'<cac:TaxTotal><cbc:TaxAmount currencyID="{cur}">{_a(inv.tax_total)}</cbc:TaxAmount>{_ubl_vat_breakdown(inv)}'
        "</cac:TaxTotal>"
        f'<cac:LegalMonetaryTotal><cbc:LineExtensionAmount currencyID="{cur}">{_a(inv.net_total)}</cbc:LineExtensionAmount>'
        f'<cbc:TaxExclusiveAmount currencyID="{cur}">{_a(inv.net_total)}</cbc:TaxExclusiveAmount>'
        f"{payable}</cac:LegalMonetaryTotal>{lines}</{root}>\n"
    )
    return doc.encode("utf-8")


# ------------------------------------------------------------------ CII


def _cii_party(tag: str, p: Party) -> str:
    vat = (
        f'<ram:SpecifiedTaxRegistration><ram:ID schemeID="VA">{escape(p.vat_id)}</ram:ID></ram:SpecifiedTaxRegistration>'
        if p.vat_id
        else ""
    )
    if p.tax_number:
        vat += (
            f'<ram:SpecifiedTaxRegistration><ram:ID schemeID="FC">{escape(p.tax_number)}</ram:ID>'
            "</ram:SpecifiedTaxRegistration>"
        )
    registration = (
        f"<ram:SpecifiedLegalOrganization><ram:ID>{escape(p.registration)}</ram:ID></ram:SpecifiedLegalOrganization>"
        if p.registration
        else ""
    )
    return (
        f"<ram:{tag}><ram:Name>{escape(p.name)}</ram:Name>{registration}<ram:PostalTradeAddress><ram:PostcodeCode>{p.postcode}"
        f"</ram:PostcodeCode><ram:LineOne>{escape(p.street)}</ram:LineOne><ram:CityName>{escape(p.city)}</ram:CityName>"
        f"<ram:CountryID>{p.country}</ram:CountryID></ram:PostalTradeAddress>{vat}</ram:{tag}>"
    )


def _cii_date(d: dt.date | str) -> str:
    text = d if isinstance(d, str) else d.isoformat()
    return f'<udt:DateTimeString format="102">{text.replace("-", "")}</udt:DateTimeString>'


def cii_xml(inv: SampleInvoice) -> bytes:
    cur = inv.currency
    type_code = "381" if inv.document_type == "credit_note" else "380"
    lines = "".join(
        f"<ram:IncludedSupplyChainTradeLineItem><ram:AssociatedDocumentLineDocument><ram:LineID>{i}</ram:LineID>"
        f"</ram:AssociatedDocumentLineDocument><ram:SpecifiedTradeProduct><ram:Name>{escape(line.description)}</ram:Name>"
        "</ram:SpecifiedTradeProduct><ram:SpecifiedLineTradeAgreement><ram:NetPriceProductTradePrice>"
        f"<ram:ChargeAmount>{line.xml_price}</ram:ChargeAmount></ram:NetPriceProductTradePrice></ram:SpecifiedLineTradeAgreement>"
        f'<ram:SpecifiedLineTradeDelivery><ram:BilledQuantity unitCode="C62">{line.xml_quantity}</ram:BilledQuantity>'
        "</ram:SpecifiedLineTradeDelivery><ram:SpecifiedLineTradeSettlement><ram:ApplicableTradeTax><ram:TypeCode>VAT"
        f"</ram:TypeCode><ram:CategoryCode>{vat_category(line.vat_rate)}</ram:CategoryCode>"
        f"<ram:RateApplicablePercent>{line.vat_rate}"
        "</ram:RateApplicablePercent></ram:ApplicableTradeTax><ram:SpecifiedTradeSettlementLineMonetarySummation>"
        f"<ram:LineTotalAmount>{_a(line.net)}</ram:LineTotalAmount></ram:SpecifiedTradeSettlementLineMonetarySummation>"
        "</ram:SpecifiedLineTradeSettlement></ram:IncludedSupplyChainTradeLineItem>"
        for i, line in enumerate(inv.lines, 1)
    )
    order = (
        f"<ram:BuyerOrderReferencedDocument><ram:IssuerAssignedID>{escape(inv.po_number)}</ram:IssuerAssignedID>"
        "</ram:BuyerOrderReferencedDocument>"
        if inv.po_number
        else ""
    )
    terms = (
        f"<ram:SpecifiedTradePaymentTerms><ram:DueDateDateTime>{_cii_date(inv.due_date)}</ram:DueDateDateTime>"
        "</ram:SpecifiedTradePaymentTerms>"
        if inv.due_date
        else ""
    )
    taxes = "".join(
        f"<ram:ApplicableTradeTax><ram:CalculatedAmount>{_a(tax)}</ram:CalculatedAmount><ram:TypeCode>VAT"
        f"</ram:TypeCode><ram:BasisAmount>{_a(basis)}</ram:BasisAmount><ram:CategoryCode>{vat_category(r)}</ram:CategoryCode>"
        f"<ram:RateApplicablePercent>{r}</ram:RateApplicablePercent></ram:ApplicableTradeTax>"
        for r, basis, tax in _vat_by_rate(inv)
    )
    payable = (
        "" if inv.omit_payable else f"<ram:DuePayableAmount>{_a(inv.payable_total)}</ram:DuePayableAmount>"
    )
    doc = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<rsm:CrossIndustryInvoice xmlns:rsm="urn:un:unece:uncefact:data:standard:CrossIndustryInvoice:100" '
        'xmlns:ram="urn:un:unece:uncefact:data:standard:ReusableAggregateBusinessInformationEntity:100" '
        'xmlns:qdt="urn:un:unece:uncefact:data:standard:QualifiedDataType:100" '
        'xmlns:udt="urn:un:unece:uncefact:data:standard:UnqualifiedDataType:100">'
        "<rsm:ExchangedDocumentContext><ram:GuidelineSpecifiedDocumentContextParameter><ram:ID>urn:cen.eu:en16931:2017"
        "</ram:ID></ram:GuidelineSpecifiedDocumentContextParameter></rsm:ExchangedDocumentContext>"
        f"<rsm:ExchangedDocument><ram:ID>{escape(inv.invoice_number)}</ram:ID><ram:TypeCode>{type_code}</ram:TypeCode>"
        f"<ram:IssueDateTime>{_cii_date(_issue_text(inv))}</ram:IssueDateTime></rsm:ExchangedDocument>"
        f"<rsm:SupplyChainTradeTransaction>{lines}<ram:ApplicableHeaderTradeAgreement>"
        f"{_cii_party('SellerTradeParty', inv.seller)}{_cii_party('BuyerTradeParty', inv.buyer)}{order}"
        "</ram:ApplicableHeaderTradeAgreement><ram:ApplicableHeaderTradeDelivery/>"
        f"<ram:ApplicableHeaderTradeSettlement><ram:InvoiceCurrencyCode>{cur}</ram:InvoiceCurrencyCode>{taxes}{terms}"
        f"<ram:SpecifiedTradeSettlementHeaderMonetarySummation><ram:LineTotalAmount>{_a(inv.net_total)}</ram:LineTotalAmount>"
        f"<ram:TaxBasisTotalAmount>{_a(inv.net_total)}</ram:TaxBasisTotalAmount>"
        f'<ram:TaxTotalAmount currencyID="{cur}">{_a(inv.tax_total)}</ram:TaxTotalAmount>'
        f"<ram:GrandTotalAmount>{_a(inv.net_total + inv.tax_total)}</ram:GrandTotalAmount>{payable}"
        "</ram:SpecifiedTradeSettlementHeaderMonetarySummation></ram:ApplicableHeaderTradeSettlement>"
        "</rsm:SupplyChainTradeTransaction></rsm:CrossIndustryInvoice>\n"
    )
    return doc.encode("utf-8")


# ------------------------------------------------------------------ JSON


def invoice_json(inv: SampleInvoice) -> bytes:
    data: dict[str, object] = {
        "format_version": 1,
        "invoice_number": inv.invoice_number,
        "document_type": inv.document_type,
        "issue_date": _issue_text(inv),
        "due_date": inv.due_date.isoformat() if inv.due_date else None,
        "currency": inv.currency,
        "net_total": _a(inv.net_total),
        "tax_total": _a(inv.tax_total),
        "seller_name": inv.seller.name,
        "seller_vat_id": inv.seller.vat_id,
        "buyer_name": inv.buyer.name,
        "po_number": inv.po_number,
    }
    if not inv.omit_payable:
        data["payable_total"] = _a(inv.payable_total)
    if inv.payee_iban:
        data["payee_iban"] = inv.payee_iban
    return (json.dumps(data, indent=2, ensure_ascii=True) + "\n").encode("utf-8")


# ------------------------------------------------------------------ PDF


@dataclass(frozen=True)
class Labels:
    heading: str
    credit_heading: str
    number: str
    credit_number: str
    issue: str
    due: str
    po: str
    bill_to: str
    net: str
    tax: str
    payable: str
    vat: str
    columns: tuple[str, str, str, str]


LABELS = {
    "en": Labels(
        "INVOICE",
        "CREDIT NOTE",
        "Invoice No:",
        "Credit note No:",
        "Invoice date:",
        "Due date:",
        "Purchase order:",
        "Bill to:",
        "Net total:",
        "VAT total:",
        "Amount due:",
        "VAT ID:",
        ("Qty", "Description", "Unit price", "Line total"),
    ),
    "de": Labels(
        "RECHNUNG",
        "GUTSCHRIFT",
        "Rechnungsnummer:",
        "Gutschriftsnummer:",
        "Rechnungsdatum:",
        "Fällig am:",
        "Bestellnummer:",
        "Rechnungsempfänger:",
        "Summe netto:",
        "Steuerbetrag:",
        "Zahlbetrag:",
        "USt-IdNr.:",
        ("Menge", "Bezeichnung", "Einzelpreis", "Betrag"),
    ),
    "fr": Labels(
        "FACTURE",
        "AVOIR",
        "Facture n°:",
        "Avoir n°:",
        "Date de facture:",
        "Date d'échéance:",
        "N° bon de commande:",
        "Client:",
        "Total HT:",
        "Total TVA:",
        "Net à payer:",
        "N° TVA:",
        ("Qté", "Désignation", "Prix unitaire", "Montant"),
    ),
}


def _money(value: Decimal, lang: str, currency: str) -> str:
    text = f"{value:,.2f}"
    if lang == "de":
        text = text.replace(",", "X").replace(".", ",").replace("X", ".")
    elif lang == "fr":
        text = text.replace(",", " ").replace(".", ",")
    return f"{text} {currency}"


_MONTHS_EN = "January February March April May June July August September October November December".split()


def _date(value: dt.date, lang: str, style: int) -> str:
    if lang == "de":
        return value.strftime("%d.%m.%Y")
    if lang == "fr":
        return value.strftime("%d/%m/%Y")
    return value.isoformat() if style % 2 == 0 else f"{value.day} {_MONTHS_EN[value.month - 1]} {value.year}"


def invoice_pdf(inv: SampleInvoice, lang: str = "en", style: int = 0) -> bytes:
    lab = LABELS[lang]
    pdf = FPDF(format="A4")
    pdf.set_creation_date(FIXED_PDF_DATE)
    pdf.set_title(f"{inv.invoice_number}")
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 16)
    pdf.set_xy(120, 15)
    pdf.cell(80, 8, inv.seller.name)
    pdf.set_font("Helvetica", "", 9)
    for i, text in enumerate(
        (inv.seller.street, f"{inv.seller.postcode} {inv.seller.city}", inv.seller.country)
    ):
        pdf.set_xy(120, 25 + 5 * i)
        pdf.cell(80, 5, text)
    # DIN 5008 style return-address line above the window envelope address.
    pdf.set_font("Helvetica", "", 7)
    pdf.set_xy(20, 50)
    pdf.cell(120, 4, f"{inv.seller.name} · {inv.seller.street} · {inv.seller.postcode} {inv.seller.city}")
    pdf.set_font("Helvetica", "", 11)
    for i, text in enumerate((inv.buyer.name, inv.buyer.street, f"{inv.buyer.postcode} {inv.buyer.city}")):
        pdf.set_xy(20, 56 + 6 * i)
        pdf.cell(100, 6, text)
    pdf.set_font("Helvetica", "B", 18)
    pdf.set_xy(20, 95)
    pdf.cell(100, 10, lab.credit_heading if inv.document_type == "credit_note" else lab.heading)
    pdf.set_font("Helvetica", "", 10)
    rows = [(lab.credit_number if inv.document_type == "credit_note" else lab.number, inv.invoice_number)]
    rows.append((lab.issue, inv.issue_date_text or _date(inv.issue_date, lang, style)))
    if inv.due_date:
        rows.append((lab.due, _date(inv.due_date, lang, style)))
    if inv.po_number:
        rows.append((lab.po, inv.po_number))
    y = 110.0
    for label, value in rows:
        pdf.set_xy(20, y)
        pdf.cell(45, 6, label)
        pdf.cell(80, 6, value)
        y += 6
    y += 6
    widths = (20, 80, 35, 35)
    pdf.set_font("Helvetica", "B", 10)
    pdf.set_xy(20, y)
    for w, title in zip(widths, lab.columns, strict=True):
        pdf.cell(w, 7, title)
    pdf.set_font("Helvetica", "", 10)
    for line in inv.lines:
        y += 7
        pdf.set_xy(20, y)
        cells = (
            f"{line.quantity}",
            line.description,
            _money(line.unit_price, lang, inv.currency),
            _money(line.net, lang, inv.currency),
        )
        for w, text in zip(widths, cells, strict=True):
            pdf.cell(w, 7, text)
    y += 14
    totals: list[tuple[str, Decimal]] = [(lab.net, inv.net_total), (lab.tax, inv.tax_total)]
    if not inv.omit_payable:
        totals.append((lab.payable, inv.payable_total))
    for total_label, amount in totals:
        pdf.set_xy(110, y)
        pdf.cell(45, 7, total_label)
        pdf.cell(35, 7, _money(amount, lang, inv.currency), align="R")
        y += 7
    pdf.set_font("Helvetica", "", 8)
    footer = f"{inv.seller.name} - {inv.seller.street}, {inv.seller.postcode} {inv.seller.city}"
    if inv.seller.vat_id:
        footer += f"    {lab.vat} {inv.seller.vat_id}"
    pdf.set_xy(20, 275)
    pdf.cell(170, 5, footer)
    if inv.payee_iban:
        # The bank line of a page footer, grouped in fours as printed invoices do.
        grouped = " ".join(inv.payee_iban[i : i + 4] for i in range(0, len(inv.payee_iban), 4))
        pdf.set_xy(20, 280)
        pdf.cell(170, 5, f"IBAN {grouped}")
    out = io.BytesIO()
    pdf.output(out)
    return out.getvalue()


def letter_pdf(text_lines: list[str], *, font: str = "Helvetica", size: int = 11) -> bytes:
    """A PDF with these lines of text (a cover letter; in "Courier", a page whose columns are
    its lines' spaces)."""
    pdf = FPDF(format="A4")
    pdf.set_creation_date(FIXED_PDF_DATE)
    pdf.add_page()
    pdf.set_font(font, "", size)
    for i, text in enumerate(text_lines):
        pdf.set_xy(20, 30 + 7 * i)
        pdf.cell(170, 6, text)
    out = io.BytesIO()
    pdf.output(out)
    return out.getvalue()


def facturx_pdf(inv: SampleInvoice, lang: str = "en") -> bytes:
    import facturx

    visual = invoice_pdf(inv, lang)
    return bytes(
        facturx.generate_from_binary(
            visual,
            cii_xml(inv),
            check_xsd=False,
            pdf_metadata={
                "author": inv.seller.name,
                "keywords": "Factur-X, Invoice",
                "title": f"{inv.seller.name}: Invoice {inv.invoice_number}",
                "subject": f"Invoice {inv.invoice_number}",
            },
        )
    )


def render_invoice(inv: SampleInvoice, fmt: str, lang: str = "en", *, pdf_style: int = 0) -> bytes:
    """One invoice in one of the formats the pipeline reads: ubl, cii, json, pdf, facturx-pdf."""
    if fmt == "ubl":
        return ubl_xml(inv)
    if fmt == "cii":
        return cii_xml(inv)
    if fmt == "json":
        return invoice_json(inv)
    if fmt == "pdf":
        return invoice_pdf(inv, lang, style=pdf_style)
    if fmt == "facturx-pdf":
        return facturx_pdf(inv, lang)
    raise ValueError(f"unknown format {fmt!r}")
