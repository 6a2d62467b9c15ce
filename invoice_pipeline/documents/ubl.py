"""Fields of a UBL 2.1 Invoice or CreditNote (the EN 16931 / Peppol BIS mapping)."""

from __future__ import annotations

from collections.abc import Callable

from lxml import etree

from ..domain.doctypes import is_credit_note_code
from ..domain.fields import FieldSource, InvoiceFields
from .collect import FieldCollector, foreign_amounts, stated
from .values import collapse, iso_date, strict_decimal, unparseable
from .xpath import find, find_all, local_name, text_of

_SUPPLIER = "cac:AccountingSupplierParty/cac:Party"
_CUSTOMER = "cac:AccountingCustomerParty/cac:Party"


def _party_name(root: etree._Element, party: str) -> tuple[str | None, str]:
    for rel in ("cac:PartyLegalEntity/cbc:RegistrationName", "cac:PartyName/cbc:Name"):
        value = collapse(text_of(find(root, f"{party}/{rel}")))
        if value:
            return value, f"{party}/{rel}"
    return None, f"{party}/cac:PartyLegalEntity/cbc:RegistrationName"


def _vat_id(root: etree._Element, party: str) -> tuple[str | None, str]:
    path = f"{party}/cac:PartyTaxScheme"
    for scheme in find_all(root, path):
        scheme_id = (text_of(find(scheme, "cac:TaxScheme/cbc:ID")) or "").upper()
        company_id = collapse(text_of(find(scheme, "cbc:CompanyID")))
        if scheme_id == "VAT" and company_id:
            return company_id, f"{path}[cac:TaxScheme/cbc:ID='VAT']/cbc:CompanyID"
    return None, f"{path}[cac:TaxScheme/cbc:ID='VAT']/cbc:CompanyID"


def fields_from_ubl(root: etree._Element) -> InvoiceFields:
    c = FieldCollector()
    top = f"/{local_name(root)}"
    is_credit_note = local_name(root) == "CreditNote"

    def p(rel: str) -> str:
        return f"{top}/{rel}"

    c.set("invoice_number", collapse(text_of(find(root, "cbc:ID"))), p("cbc:ID"))

    type_path = "cbc:CreditNoteTypeCode" if is_credit_note else "cbc:InvoiceTypeCode"
    type_code = collapse(text_of(find(root, type_path)))
    c.set("type_code", type_code, p(type_path))
    if is_credit_note:
        c.set("document_type", "credit_note", p(local_name(root)))
    elif is_credit_note_code(type_code):
        c.set("document_type", "credit_note", p(type_path))
    else:
        c.set("document_type", "invoice", p(type_path) if type_code else top)

    for name, rels in (
        ("issue_date", ("cbc:IssueDate",)),
        ("due_date", ("cbc:DueDate", "cac:PaymentMeans/cbc:PaymentDueDate")),
    ):
        for rel in rels:
            raw = text_of(find(root, rel))
            if raw is None:
                continue
            parsed = iso_date(raw)
            if parsed is None:
                c.miss(name, unparseable(p(rel), raw, "date"))
            else:
                c.set(name, parsed, p(rel))
                break

    currency = collapse(text_of(find(root, "cbc:DocumentCurrencyCode")))
    c.set("currency", currency, p("cbc:DocumentCurrencyCode"))

    _totals(root, c, p, currency)

    seller, seller_path = _party_name(root, _SUPPLIER)
    c.set("seller_name", seller, p(seller_path))
    vat, vat_path = _vat_id(root, _SUPPLIER)
    if vat is None:
        c.miss("seller_vat_id", FieldSource(p(vat_path), 0.0, "seller has no PartyTaxScheme with scheme VAT"))
    c.set("seller_vat_id", vat, p(vat_path))
    buyer, buyer_path = _party_name(root, _CUSTOMER)
    c.set("buyer_name", buyer, p(buyer_path))
    buyer_vat, buyer_vat_path = _vat_id(root, _CUSTOMER)
    c.set("buyer_vat_id", buyer_vat, p(buyer_vat_path))
    iban_rel = "cac:PaymentMeans/cac:PayeeFinancialAccount/cbc:ID"
    c.set("payee_iban", collapse(text_of(find(root, iban_rel))), p(iban_rel))
    _payment_and_references(root, c, p)
    c.set(
        "po_number",
        collapse(text_of(find(root, "cac:OrderReference/cbc:ID"))),
        p("cac:OrderReference/cbc:ID"),
    )
    return c.build()


def _totals(root: etree._Element, c: FieldCollector, p: Callable[[str], str], currency: str | None) -> None:
    """The amount due (formed by BR-CO-16 where not stated), the net and VAT totals, and any
    amount in another currency than the document's."""

    def total(leaf: str) -> tuple[etree._Element | None, str]:
        rel = f"cac:LegalMonetaryTotal/cbc:{leaf}"
        return find(root, rel), p(rel)

    c.amount_due(
        stated(*total("PayableAmount")),
        stated(*total("TaxInclusiveAmount")),
        stated(*total("PrepaidAmount")),
        stated(*total("PayableRoundingAmount")),
    )
    c.stated_amount("net_total", stated(*total("TaxExclusiveAmount")))
    tax_currency = collapse(text_of(find(root, "cbc:TaxCurrencyCode")))
    c.foreign_amounts.extend(foreign_amounts(root, currency, tax_currency))

    # An invoice may carry a second TaxTotal in the VAT accounting currency (BT-111); the
    # document-currency one is BT-110.
    tax_rel = "cac:TaxTotal/cbc:TaxAmount"
    tax_nodes = find_all(root, tax_rel)
    chosen = next((n for n in tax_nodes if currency and n.get("currencyID") == currency), None)
    if chosen is None and tax_nodes:
        chosen = tax_nodes[0]
    if chosen is not None:
        raw = text_of(chosen) or ""
        amount = strict_decimal(raw)
        if amount is None:
            c.miss("tax_total", unparseable(p(tax_rel), raw, "amount"))
        c.set("tax_total", amount, p(tax_rel))


def _payment_and_references(root: etree._Element, c: FieldCollector, p: Callable[[str], str]) -> None:
    """Payment means (BT-81), direct-debit mandate (BT-89) and debited account (BT-91), and the
    invoice a correction refers to (BT-25, BT-26)."""
    for name, rel in (
        ("payment_means_code", "cac:PaymentMeans/cbc:PaymentMeansCode"),
        ("mandate_reference", "cac:PaymentMeans/cac:PaymentMandate/cbc:ID"),
        ("debited_account", "cac:PaymentMeans/cac:PaymentMandate/cac:PayerFinancialAccount/cbc:ID"),
        ("preceding_invoice", "cac:BillingReference/cac:InvoiceDocumentReference/cbc:ID"),
    ):
        c.set(name, collapse(text_of(find(root, rel))), p(rel))
    preceding_rel = "cac:BillingReference/cac:InvoiceDocumentReference/cbc:IssueDate"
    preceding_raw = text_of(find(root, preceding_rel))
    if preceding_raw is not None:
        c.set("preceding_issue_date", iso_date(preceding_raw), p(preceding_rel))
