"""The fields the pipeline extracts from an invoice, with where each one came from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import date
from decimal import Decimal
from typing import Any, Literal

DocumentType = Literal["invoice", "credit_note"]

FIELD_NAMES: tuple[str, ...] = (
    "invoice_number",
    "document_type",
    "issue_date",
    "due_date",
    "currency",
    "net_total",
    "tax_total",
    "payable_total",
    "seller_name",
    "seller_vat_id",
    "buyer_name",
    "po_number",
)


@dataclass(frozen=True)
class FieldSource:
    """Where one field's value came from: an XPath, a JSON pointer or a text heuristic.

    `reason` is set when the value is None, so a missing field explains itself instead of
    looking like a guess.
    """

    source: str
    confidence: float = 1.0
    reason: str | None = None


@dataclass(frozen=True)
class InvoiceFields:
    invoice_number: str | None = None
    document_type: DocumentType = "invoice"
    issue_date: date | None = None
    due_date: date | None = None
    currency: str | None = None
    net_total: Decimal | None = None
    tax_total: Decimal | None = None
    payable_total: Decimal | None = None
    seller_name: str | None = None
    seller_vat_id: str | None = None
    buyer_name: str | None = None
    po_number: str | None = None
    sources: Mapping[str, FieldSource] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "sources":
                out["sources"] = {
                    name: {"source": s.source, "confidence": s.confidence, "reason": s.reason}
                    for name, s in value.items()
                }
            elif isinstance(value, date):
                out[f.name] = value.isoformat()
            elif isinstance(value, Decimal):
                out[f.name] = str(value)
            else:
                out[f.name] = value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> InvoiceFields:
        def as_date(v: Any) -> date | None:
            return date.fromisoformat(v) if v else None

        def as_decimal(v: Any) -> Decimal | None:
            return Decimal(v) if v is not None else None

        return cls(
            invoice_number=data.get("invoice_number"),
            document_type=data.get("document_type") or "invoice",
            issue_date=as_date(data.get("issue_date")),
            due_date=as_date(data.get("due_date")),
            currency=data.get("currency"),
            net_total=as_decimal(data.get("net_total")),
            tax_total=as_decimal(data.get("tax_total")),
            payable_total=as_decimal(data.get("payable_total")),
            seller_name=data.get("seller_name"),
            seller_vat_id=data.get("seller_vat_id"),
            buyer_name=data.get("buyer_name"),
            po_number=data.get("po_number"),
            sources={
                name: FieldSource(s["source"], float(s.get("confidence", 1.0)), s.get("reason"))
                for name, s in (data.get("sources") or {}).items()
            },
        )
