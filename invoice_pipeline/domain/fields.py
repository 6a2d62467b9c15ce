"""The fields the pipeline extracts from an invoice, with where each one came from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import date
from decimal import Decimal
from typing import Any, Literal

from .einvoice import EinvoiceCheck

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
    # Who the invoice is addressed to (an org's own identity, seeded into its profile from
    # e-invoices) and the account the seller asks to be paid into (checked against the vendor
    # registry on every format: a changed IBAN is the classic invoice fraud).
    "buyer_vat_id",
    "payee_iban",
)

# Fields the structured formats state beside those above, not corrected by a person (a person
# decides on them through the hold reasons they cause): the UNTDID 1001 code (BT-3), the invoice
# a correction refers to (BT-25, BT-26), the payment means (BT-81) and direct-debit mandate
# (BT-89) with the debited account (BT-91), and the grand total, prepaid and rounding amounts
# the amount due is formed from (BT-112, BT-113, BT-114). None on a page-read document.
EXTRA_FIELD_NAMES: tuple[str, ...] = (
    "type_code",
    "preceding_invoice",
    "preceding_issue_date",
    "payment_means_code",
    "mandate_reference",
    "debited_account",
    "grand_total",
    "prepaid_total",
    "rounding_total",
)


# Prefixes of `FieldSource.source` for values read from the visible page (a PDF text layer, OCR,
# or a learnt vendor layout) rather than from structured data (XML, JSON). A page-read payable
# total is paid only when `InvoiceFields.amount_check` confirms it.
PAGE_SOURCES: tuple[str, ...] = ("pdf-text", "ocr", "layout:")
# The source of a currency the page does not print, inferred from the seller's VAT id's country
# (`documents.text_fields`), followed by the country code.
CURRENCY_FROM_VAT_COUNTRY = "from seller VAT id country"
# A scan's euro sign the recogniser could not spell, put back from its shape (`ocr_glyphs`); a
# currency read from it is held unless the seller's VAT country's currency is the euro too.
EURO_BY_SHAPE = "euro sign told by its shape"
EURO_CONFIRMED = "confirmed by the seller's VAT country"

# A box on a page in PDF points, origin top-left: (x0, top, x1, bottom).
Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class FieldSource:
    """Where one field's value came from: an XPath, a JSON pointer or a text heuristic.

    `reason` is set when the value is None, so a missing field explains itself instead of
    looking like a guess. A value read from the page also says where: `page` (1-based) and
    `box`, the union of the label's and the value's words.
    """

    source: str
    confidence: float = 1.0
    reason: str | None = None
    page: int | None = None
    box: Box | None = None

    @property
    def from_page(self) -> bool:
        return self.source.startswith(PAGE_SOURCES)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "confidence": self.confidence, "reason": self.reason}
        if self.page is not None:
            out["page"] = self.page
        if self.box is not None:
            out["box"] = list(self.box)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FieldSource:
        box = data.get("box")
        return cls(
            str(data["source"]),
            float(data.get("confidence", 1.0)),
            data.get("reason"),
            data.get("page"),
            (float(box[0]), float(box[1]), float(box[2]), float(box[3])) if box else None,
        )


# What an amount printed on a page is, as its label says: the amount still due, the gross
# total, the net total, the tax, an amount already paid, or a number with no telling label.
AmountRole = Literal["due", "gross", "net", "tax", "prepaid", "other"]


@dataclass(frozen=True)
class AmountCandidate:
    """One amount the page reader found, with its evidence (shown to a person in review)."""

    role: AmountRole
    amount: Decimal
    source: FieldSource

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "amount": str(self.amount), "source": self.source.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AmountCandidate:
        return cls(data["role"], Decimal(data["amount"]), FieldSource.from_json(data["source"]))


@dataclass(frozen=True)
class AmountCheck:
    """Whether the page's own arithmetic confirms the payable total that was read.

    `confirmed` only when the amounts found agree (net + tax = gross, gross - prepaid = due,
    line totals sum to the net, within rounding) and the payable total is the one labelled as
    the amount due (or the gross total when nothing is prepaid). `rule` says which equation
    held, or why none did; `candidates` are every amount considered, for the review item.
    Money fails closed: an unconfirmed page-read total is held for a person, never posted.
    """

    confirmed: bool
    rule: str
    candidates: tuple[AmountCandidate, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "confirmed": self.confirmed,
            "rule": self.rule,
            "candidates": [c.to_json() for c in self.candidates],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AmountCheck:
        return cls(
            bool(data["confirmed"]),
            str(data["rule"]),
            tuple(AmountCandidate.from_json(c) for c in data.get("candidates") or ()),
        )


@dataclass(frozen=True)
class PageDisagreement:
    """A key field a hybrid PDF's visible page prints differently from its XML (issue 55): both
    values, and where the page's was read. The XML stays the source; the page is a witness."""

    field: str
    xml_value: str
    page_value: str
    source: FieldSource

    @property
    def page(self) -> int | None:
        return self.source.page

    @property
    def box(self) -> Box | None:
        return self.source.box

    @property
    def where(self) -> str:
        if self.page is None:
            return self.source.source
        box = f", box ({', '.join(f'{v:g}' for v in self.box)})" if self.box else ""
        return f"page {self.page}{box}"

    def to_json(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "xml_value": self.xml_value,
            "page_value": self.page_value,
            "source": self.source.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PageDisagreement:
        return cls(
            str(data["field"]),
            str(data["xml_value"]),
            str(data["page_value"]),
            FieldSource.from_json(data["source"]),
        )


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
    buyer_vat_id: str | None = None
    payee_iban: str | None = None
    sources: Mapping[str, FieldSource] = field(default_factory=dict)
    # Set by the page reader (None for XML and JSON, whose totals are data, not guesses).
    amount_check: AmountCheck | None = None
    # EXTRA_FIELD_NAMES (stored JSON from before they existed reads them as None).
    type_code: str | None = None
    preceding_invoice: str | None = None
    preceding_issue_date: date | None = None
    payment_means_code: str | None = None
    mandate_reference: str | None = None
    debited_account: str | None = None
    grand_total: Decimal | None = None
    prepaid_total: Decimal | None = None
    rounding_total: Decimal | None = None
    # Amounts whose currencyID attribute names another currency than the document's (BT-5), as
    # "path CUR"; tax amounts in the tax currency (BT-6) are not listed. Held: `currency_mismatch`.
    foreign_amounts: tuple[str, ...] = ()
    # A structured invoice's own rules (EN 16931 Schematron) and, for a Factur-X/ZUGFeRD PDF, its
    # visible page compared with its XML (domain/einvoice.py, issue 55). None / (): not checked.
    einvoice_check: EinvoiceCheck | None = None
    page_disagreements: tuple[PageDisagreement, ...] = ()

    @property
    def read_from_page(self) -> bool:
        """Any value came from the visible page: a person can read it there and correct it."""
        return any(source.from_page for source in self.sources.values())

    @property
    def currency_inferred_on_a_scan(self) -> bool:
        """The currency is only suggested, on a scan: OCR cannot spell "€" or "£" (its alphabet
        has neither), so the currency is either the seller's country's (a scan that seems to print
        none may well print one) or a euro sign told by its shape that the seller's country does
        not confirm."""
        source = self.sources.get("currency")
        if source is None or not source.source.startswith("ocr:"):
            return False
        text = source.source
        return CURRENCY_FROM_VAT_COUNTRY in text or (EURO_BY_SHAPE in text and EURO_CONFIRMED not in text)

    @property
    def payable_from_page(self) -> bool:
        """The payable total was read from the visible page, so it needs `amount_check`."""
        source = self.sources.get("payable_total")
        return source is not None and source.from_page

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "sources":
                out["sources"] = {name: s.to_json() for name, s in value.items()}
            elif f.name == "amount_check":
                if value is not None:
                    out["amount_check"] = value.to_json()
            elif f.name == "foreign_amounts":
                if value:
                    out["foreign_amounts"] = list(value)
            elif f.name == "einvoice_check":
                # Absent when not checked: stored JSON and its hashes stay as they were.
                if value is not None:
                    out["einvoice_check"] = value.to_json()
            elif f.name == "page_disagreements":
                if value:
                    out["page_disagreements"] = [d.to_json() for d in value]
            elif f.name in EXTRA_FIELD_NAMES and value is None:
                # Absent as before they existed: stored JSON and its hashes stay as they were.
                continue
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
            buyer_vat_id=data.get("buyer_vat_id"),
            payee_iban=data.get("payee_iban"),
            sources={name: FieldSource.from_json(s) for name, s in (data.get("sources") or {}).items()},
            amount_check=AmountCheck.from_json(data["amount_check"]) if data.get("amount_check") else None,
            type_code=data.get("type_code"),
            preceding_invoice=data.get("preceding_invoice"),
            preceding_issue_date=as_date(data.get("preceding_issue_date")),
            payment_means_code=data.get("payment_means_code"),
            mandate_reference=data.get("mandate_reference"),
            debited_account=data.get("debited_account"),
            grand_total=as_decimal(data.get("grand_total")),
            prepaid_total=as_decimal(data.get("prepaid_total")),
            rounding_total=as_decimal(data.get("rounding_total")),
            foreign_amounts=tuple(str(a) for a in data.get("foreign_amounts") or ()),
            einvoice_check=EinvoiceCheck.from_json(data["einvoice_check"])
            if data.get("einvoice_check")
            else None,
            page_disagreements=tuple(
                PageDisagreement.from_json(d) for d in data.get("page_disagreements") or ()
            ),
        )
