"""Accumulates field values with their provenance and builds an InvoiceFields."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any

from lxml import etree

from ..domain.fields import EXTRA_FIELD_NAMES, FIELD_NAMES, DocumentType, FieldSource, InvoiceFields
from .values import strict_decimal, unparseable
from .xpath import local_name, text_of

# A credit note's amounts are stored as what the seller credits, positive (EN 16931's own
# convention: the type code carries the sign). Many ERPs write them negative; both mean the same,
# so a UBL CreditNote of 100.00 and a CII 381 of -100.00 are one credit of 100.00 to the duplicate
# check, and the posting makes it negative (engine/stages.py `payable`).
_SIGNED_AMOUNTS = (
    "net_total",
    "tax_total",
    "payable_total",
    "grand_total",
    "prepaid_total",
    "rounding_total",
)


@dataclass(frozen=True)
class Stated:
    """One amount as the document states it: its text and where (`amount` None: not a number)."""

    raw: str
    path: str
    amount: Decimal | None


@dataclass
class FieldCollector:
    default_reason: str = "not present in the document"
    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, FieldSource] = field(default_factory=dict)
    foreign_amounts: list[str] = field(default_factory=list)

    def has(self, name: str) -> bool:
        return self.values.get(name) is not None

    def set(self, name: str, value: Any, source: str, confidence: float = 1.0) -> None:
        self.put(name, value, FieldSource(source, confidence))

    def put(self, name: str, value: Any, source: FieldSource) -> None:
        """A value with its full FieldSource (a value read from the page carries its page and box)."""
        if name not in FIELD_NAMES and name not in EXTRA_FIELD_NAMES:
            raise KeyError(name)
        if value is None:
            return
        self.values[name] = value
        self.sources[name] = source

    def miss(self, name: str, source: FieldSource) -> None:
        """Record why a field is empty, unless a value was already found."""
        if not self.has(name):
            self.sources[name] = source

    def build(self) -> InvoiceFields:
        sources = dict(self.sources)
        for name in FIELD_NAMES:
            if name not in sources:
                sources[name] = FieldSource("", 0.0, self.default_reason)
        doc_type: DocumentType = (
            "credit_note" if self.values.get("document_type") == "credit_note" else "invoice"
        )
        v = dict(self.values)
        payable = v.get("payable_total")
        if doc_type == "credit_note" and isinstance(payable, Decimal) and payable < 0:
            for name in _SIGNED_AMOUNTS:
                if isinstance(v.get(name), Decimal):
                    v[name] = -v[name]
        return InvoiceFields(
            invoice_number=_str(v.get("invoice_number")),
            document_type=doc_type,
            issue_date=_date(v.get("issue_date")),
            due_date=_date(v.get("due_date")),
            currency=_str(v.get("currency")),
            net_total=_dec(v.get("net_total")),
            tax_total=_dec(v.get("tax_total")),
            payable_total=_dec(v.get("payable_total")),
            seller_name=_str(v.get("seller_name")),
            seller_vat_id=_str(v.get("seller_vat_id")),
            buyer_name=_str(v.get("buyer_name")),
            po_number=_str(v.get("po_number")),
            buyer_vat_id=_str(v.get("buyer_vat_id")),
            payee_iban=_str(v.get("payee_iban")),
            sources=sources,
            type_code=_str(v.get("type_code")),
            preceding_invoice=_str(v.get("preceding_invoice")),
            preceding_issue_date=_date(v.get("preceding_issue_date")),
            payment_means_code=_str(v.get("payment_means_code")),
            mandate_reference=_str(v.get("mandate_reference")),
            debited_account=_str(v.get("debited_account")),
            grand_total=_dec(v.get("grand_total")),
            prepaid_total=_dec(v.get("prepaid_total")),
            rounding_total=_dec(v.get("rounding_total")),
            foreign_amounts=tuple(self.foreign_amounts),
        )

    def stated_amount(self, name: str, stated: Stated | None) -> None:
        """A total the document states, as a field; one it states unreadably is a miss, with why."""
        if stated is None:
            return
        if stated.amount is None:
            self.miss(name, unparseable(stated.path, stated.raw, "amount"))
        self.set(name, stated.amount, stated.path)

    def amount_due(
        self, due: Stated | None, grand: Stated | None, prepaid: Stated | None, rounding: Stated | None
    ) -> None:
        """The amount due (BT-115) as the document states it, else formed by its own arithmetic:
        grand total (BT-112) - prepaid (BT-113) + rounding (BT-114), EN 16931's BR-CO-16. The
        grand total alone is no amount due when a prepayment is stated: that pays the prepaid
        part twice. Nothing formed when a part is missing or not a number: the reason says why."""
        for name, stated in (
            ("grand_total", grand),
            ("prepaid_total", prepaid),
            ("rounding_total", rounding),
        ):
            if stated is not None:
                self.set(name, stated.amount, stated.path)
        if due is not None:
            if due.amount is None:
                self.miss("payable_total", unparseable(due.path, due.raw, "amount"))
            self.set("payable_total", due.amount, due.path)
            return
        parts = [s for s in (grand, prepaid, rounding) if s is not None]
        bad = next((s for s in parts if s.amount is None), None)
        if bad is not None:
            self.miss("payable_total", unparseable(bad.path, bad.raw, "amount"))
            return
        if grand is None or grand.amount is None:
            prepaid_note = f"; a prepaid amount {prepaid.raw} is stated" if prepaid is not None else ""
            self.miss(
                "payable_total",
                FieldSource(
                    "",
                    0.0,
                    "no amount due (BT-115) and no grand total (BT-112) to form it from" + prepaid_note,
                ),
            )
            return
        amount = grand.amount
        formed = [grand.path]
        if prepaid is not None and prepaid.amount is not None:
            amount -= prepaid.amount
            formed.append(f"- {prepaid.path}")
        if rounding is not None and rounding.amount is not None:
            amount += rounding.amount
            formed.append(f"+ {rounding.path}")
        self.set("payable_total", amount, " ".join(formed) + " (BR-CO-16: no amount due stated)")


def stated(node: etree._Element | None, path: str) -> Stated | None:
    """The amount an element states, or None when the document has no such element."""
    raw = text_of(node)
    if node is None or raw is None:
        return None
    return Stated(raw, path, strict_decimal(raw))


# Amount elements that may stand in the tax currency (BT-6): the VAT total in accounting currency
# (BT-111), UBL's TaxAmount and CII's TaxTotalAmount.
_TAX_AMOUNTS = frozenset({"TaxAmount", "TaxTotalAmount"})


def foreign_amounts(root: etree._Element, currency: str | None, tax_currency: str | None) -> list[str]:
    """Every amount whose currencyID names another currency than the document's (BT-5), as
    "Parent/Amount CUR"; a tax amount in the stated tax currency (BT-6) is kept apart, not listed."""
    if not currency:
        return []
    out = []
    for node in root.iter():
        if not isinstance(node.tag, str):
            continue
        code = (node.get("currencyID") or "").strip()
        if not code or code == currency:
            continue
        if tax_currency and code == tax_currency and local_name(node) in _TAX_AMOUNTS:
            continue
        parent = node.getparent()
        where = f"{local_name(parent)}/{local_name(node)}" if parent is not None else local_name(node)
        out.append(f"{where} {code}")
    return out


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def _date(v: Any) -> date | None:
    return v if isinstance(v, date) else None


def _dec(v: Any) -> Decimal | None:
    return v if isinstance(v, Decimal) else None
