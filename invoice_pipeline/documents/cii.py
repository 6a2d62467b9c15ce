"""Fields of a UN/CEFACT Cross Industry Invoice (D16B, as used by Factur-X / ZUGFeRD 2 / XRechnung).

ZUGFeRD 1.0 documents use older element names for the same business terms; each field lists
the D16B path first and the ZUGFeRD 1 path as a fallback.
"""

from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from ..domain.doctypes import is_credit_note_code
from ..domain.fields import FieldSource, InvoiceFields
from .collect import FieldCollector, foreign_amounts, stated
from .values import cii_date, collapse, strict_decimal, unparseable
from .xpath import find, find_all, local_name, text_of

_DOC = ("rsm:ExchangedDocument", "rsm:HeaderExchangedDocument")
_AGREEMENT = (
    "rsm:SupplyChainTradeTransaction/ram:ApplicableHeaderTradeAgreement",
    "rsm:SpecifiedSupplyChainTradeTransaction/ram:ApplicableSupplyChainTradeAgreement",
)
_SETTLEMENT = (
    "rsm:SupplyChainTradeTransaction/ram:ApplicableHeaderTradeSettlement",
    "rsm:SpecifiedSupplyChainTradeTransaction/ram:ApplicableSupplyChainTradeSettlement",
)
_SUMMATION = (
    "ram:SpecifiedTradeSettlementHeaderMonetarySummation",
    "ram:SpecifiedTradeSettlementMonetarySummation",
)


def _first(
    root: etree._Element, bases: tuple[str, ...], rels: tuple[str, ...]
) -> tuple[etree._Element | None, str]:
    for base in bases:
        for rel in rels:
            path = f"{base}/{rel}"
            node = find(root, path)
            if node is not None and text_of(node) is not None:
                return node, path
    return None, f"{bases[0]}/{rels[0]}"


def fields_from_cii(root: etree._Element) -> InvoiceFields:
    cii = _CiiInvoice(root, FieldCollector())
    currency = _header(cii)
    _totals(cii, currency)
    _parties(cii)
    _payment(cii)
    return cii.collector.build()


@dataclass(frozen=True)
class _CiiInvoice:
    """A CII invoice being read: its root and the fields collected so far."""

    root: etree._Element
    collector: FieldCollector

    @property
    def top(self) -> str:
        """The root element's path, as every field's source starts."""
        root = self.root
        return f"/{root.prefix + ':' if root.prefix else ''}{local_name(root)}"

    def path(self, rel: str) -> str:
        return f"{self.top}/{rel}"


def _header(cii: _CiiInvoice) -> str | None:
    """Number, document type, issue and due dates, and the currency (returned)."""
    root, c, p = cii.root, cii.collector, cii.path
    node, path = _first(root, _DOC, ("ram:ID",))
    c.set("invoice_number", collapse(text_of(node)), p(path))

    node, path = _first(root, _DOC, ("ram:TypeCode",))
    type_code = collapse(text_of(node))
    c.set("type_code", type_code, p(path))
    doc_type = "credit_note" if is_credit_note_code(type_code) else "invoice"
    c.set("document_type", doc_type, p(path) if type_code else cii.top)

    for name, bases, rels in (
        ("issue_date", _DOC, ("ram:IssueDateTime/udt:DateTimeString",)),
        ("due_date", _SETTLEMENT, ("ram:SpecifiedTradePaymentTerms/ram:DueDateDateTime/udt:DateTimeString",)),
    ):
        node, path = _first(root, bases, rels)
        if node is not None:
            raw = text_of(node) or ""
            parsed = cii_date(raw, node.get("format"))
            if parsed is None:
                c.miss(name, unparseable(p(path), raw, "date"))
            c.set(name, parsed, p(path))

    node, path = _first(root, _SETTLEMENT, ("ram:InvoiceCurrencyCode",))
    currency = collapse(text_of(node))
    c.set("currency", currency, p(path))
    return currency


def _totals(cii: _CiiInvoice, currency: str | None) -> None:
    """Payable, net and tax totals from the settlement's summation."""
    root, c, p = cii.root, cii.collector, cii.path
    summations = tuple(f"{s}/{m}" for s in _SETTLEMENT for m in _SUMMATION)

    def total(leaf: str) -> tuple[etree._Element | None, str]:
        node, path = _first(root, summations, (f"ram:{leaf}",))
        return node, p(path)

    # Before BR-CO-16 was applied here, a missing DuePayableAmount fell back to the grand total
    # even with a prepayment stated: the prepaid part was paid twice.
    c.amount_due(
        stated(*total("DuePayableAmount")),
        stated(*total("GrandTotalAmount")),
        stated(*total("TotalPrepaidAmount")),
        stated(*total("RoundingAmount")),
    )
    c.stated_amount("net_total", stated(*total("TaxBasisTotalAmount")))
    tax_currency_node, _ = _first(root, _SETTLEMENT, ("ram:TaxCurrencyCode",))
    c.foreign_amounts.extend(foreign_amounts(root, currency, collapse(text_of(tax_currency_node))))

    # Like UBL, a second TaxTotalAmount may be given in the VAT accounting currency (BT-111).
    for settlement in _SETTLEMENT:
        for summation in _SUMMATION:
            path = f"{settlement}/{summation}/ram:TaxTotalAmount"
            nodes = find_all(root, path)
            if not nodes:
                continue
            chosen = next((n for n in nodes if currency and n.get("currencyID") == currency), nodes[0])
            raw = text_of(chosen) or ""
            amount = strict_decimal(raw)
            if amount is None:
                c.miss("tax_total", unparseable(p(path), raw, "amount"))
            c.set("tax_total", amount, p(path))
            break


def _parties(cii: _CiiInvoice) -> None:
    """Seller's and buyer's names and VAT ids (a registration with scheme VA)."""
    root, c, p = cii.root, cii.collector, cii.path
    for role, name_field in (("ram:SellerTradeParty", "seller_name"), ("ram:BuyerTradeParty", "buyer_name")):
        node, path = _first(root, _AGREEMENT, (f"{role}/ram:Name",))
        c.set(name_field, collapse(text_of(node)), p(path))

    vat_path = "ram:SellerTradeParty/ram:SpecifiedTaxRegistration/ram:ID"
    for base in _AGREEMENT:
        for reg in find_all(root, f"{base}/{vat_path}"):
            value = collapse(text_of(reg))
            if value and (reg.get("schemeID") or "").upper() == "VA":
                c.set("seller_vat_id", value, p(f"{base}/{vat_path}[@schemeID='VA']"))
                break
        if c.has("seller_vat_id"):
            break
    c.miss(
        "seller_vat_id",
        FieldSource(
            p(f"{_AGREEMENT[0]}/{vat_path}[@schemeID='VA']"), 0.0, "seller has no VAT registration (VA)"
        ),
    )

    buyer_vat_path = "ram:BuyerTradeParty/ram:SpecifiedTaxRegistration/ram:ID"
    for base in _AGREEMENT:
        for reg in find_all(root, f"{base}/{buyer_vat_path}"):
            value = collapse(text_of(reg))
            if value and (reg.get("schemeID") or "").upper() == "VA" and not c.has("buyer_vat_id"):
                c.set("buyer_vat_id", value, p(f"{base}/{buyer_vat_path}[@schemeID='VA']"))


def _payment(cii: _CiiInvoice) -> None:
    """The payee's account and the buyer's order reference."""
    root, c, p = cii.root, cii.collector, cii.path
    node, path = _first(
        root,
        _SETTLEMENT,
        (
            "ram:SpecifiedTradeSettlementPaymentMeans/ram:PayeePartyCreditorFinancialAccount/ram:IBANID",
            "ram:SpecifiedTradeSettlementPaymentMeans/ram:PayeePartyCreditorFinancialAccount/ram:ProprietaryID",
        ),
    )
    c.set("payee_iban", collapse(text_of(node)), p(path))
    for name, rels in (
        ("payment_means_code", ("ram:SpecifiedTradeSettlementPaymentMeans/ram:TypeCode",)),
        ("mandate_reference", ("ram:SpecifiedTradePaymentTerms/ram:DirectDebitMandateID",)),
        (
            "debited_account",
            ("ram:SpecifiedTradeSettlementPaymentMeans/ram:PayerPartyDebtorFinancialAccount/ram:IBANID",),
        ),
        ("preceding_invoice", ("ram:InvoiceReferencedDocument/ram:IssuerAssignedID",)),
    ):
        node, path = _first(root, _SETTLEMENT, rels)
        c.set(name, collapse(text_of(node)), p(path))
    node, path = _first(
        root, _SETTLEMENT, ("ram:InvoiceReferencedDocument/ram:FormattedIssueDateTime/qdt:DateTimeString",)
    )
    if node is not None:
        c.set("preceding_issue_date", cii_date(text_of(node) or "", node.get("format")), p(path))

    node, path = _first(root, _AGREEMENT, ("ram:BuyerOrderReferencedDocument/ram:IssuerAssignedID",))
    c.set("po_number", collapse(text_of(node)), p(path))
