"""Accumulates field values with their provenance and builds an InvoiceFields."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any

from ..domain.fields import FIELD_NAMES, DocumentType, FieldSource, InvoiceFields


@dataclass
class FieldCollector:
    default_reason: str = "not present in the document"
    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, FieldSource] = field(default_factory=dict)

    def has(self, name: str) -> bool:
        return self.values.get(name) is not None

    def set(self, name: str, value: Any, source: str, confidence: float = 1.0) -> None:
        self.put(name, value, FieldSource(source, confidence))

    def put(self, name: str, value: Any, source: FieldSource) -> None:
        """A value with its full FieldSource (a value read from the page carries its page and box)."""
        if name not in FIELD_NAMES:
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
        v = self.values
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
        )


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def _date(v: Any) -> date | None:
    return v if isinstance(v, date) else None


def _dec(v: Any) -> Decimal | None:
    return v if isinstance(v, Decimal) else None
