"""The vendor layout as data (a `VendorLayout` of `FieldRule`s and a fingerprint), the page it reads
(`Page`), and the normalising both sides share. Pure: no database."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from typing import Any, Literal

from ....domain.fields import InvoiceFields
from ..amounts import (
    Kind,
)
from ..words import PageGeometry, Segment, TextBoxes, segments

FORMAT_VERSION = 1
# The fields a layout reads by an anchor; the seller's name and VAT id come with the vendor, and
# the currency is the vendor's when the page prints it.
ANCHORED_FIELDS = ("invoice_number", "issue_date", "due_date")
# The amounts a layout places, by what they are (`reading.amounts.Kind`).
AMOUNT_ROLES: tuple[Kind, ...] = ("due", "gross", "net", "tax", "prepaid")
# A page matches a layout when at least this share of its fingerprint words are there again.
MATCH_THRESHOLD = 0.6
# How many stable words a fingerprint keeps (the first ones down the page).
FINGERPRINT_WORDS = 80
# Columns a word may stand off where it stood when learnt and still be the same word.
COLUMN_SLACK = 12
# How far up an anchor may be above its value.
BELOW_DEPTH = 4
# A learnt amount found by a layout outranks every label of the dictionaries (at most 1.0).
LAYOUT_STRENGTH = 1.2

Relation = Literal["same", "after", "right", "below"]
ValueKind = Literal["identifier", "date", "amount"]
KIND_OF_FIELD: dict[str, ValueKind] = {
    "invoice_number": "identifier",
    "issue_date": "date",
    "due_date": "date",
}


# ---------------------------------------------------------------- normalising


@lru_cache(maxsize=16384)
def norm_text(text: str) -> str:
    """Case, accents, spacing and trailing punctuation do not make words different."""
    folded = unicodedata.normalize("NFKD", text.casefold())
    folded = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return re.sub(r"\s+", " ", folded).strip(" :.-–#|")


def norm_id(text: str) -> str:
    """A VAT id or IBAN as letters and digits only."""
    return re.sub(r"[^0-9A-Z]", "", text.upper())


def norm_name(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", " ", norm_text(text)).strip()


def shape_of(value: str) -> str:
    """'INV-2025-00042' -> 'A-9-9': what kind of identifier a vendor prints, not its digits."""
    out = re.sub(r"[A-Za-z]+", "A", value)
    return re.sub(r"\d+", "9", out)


# ---------------------------------------------------------------- the model


@dataclass(frozen=True)
class StableWord:
    """A word of the fingerprint: its normalised text and the column it starts at."""

    text: str
    col: int


@dataclass(frozen=True)
class FieldRule:
    """Where one value stands, relative to the anchor text printed near it.

    `field` is a field name (`invoice_number`, ...) or an amount role (`amount:due`, ...).
    `dx` is the value's column minus the anchor's, `dy` the lines between them (0 unless
    `below`). `shape` is the identifier's shape when learnt ('A-9-9'), so a different kind of
    number in the same place is not taken for it.
    """

    field: str
    anchor: str
    anchor_col: int
    relation: Relation
    dx: int
    dy: int = 0
    shape: str | None = None
    # The value's right edge minus the anchor's column: right-aligned amounts keep their end.
    dx_end: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "anchor": self.anchor,
            "anchor_col": self.anchor_col,
            "relation": self.relation,
            "dx": self.dx,
            "dy": self.dy,
            "shape": self.shape,
            "dx_end": self.dx_end,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FieldRule:
        relation = str(data["relation"])
        if relation not in ("same", "after", "right", "below"):
            raise ValueError(f"unknown relation {relation!r}")
        return cls(
            str(data["field"]),
            str(data["anchor"]),
            int(data["anchor_col"]),
            relation,  # type: ignore[arg-type]
            int(data["dx"]),
            int(data.get("dy") or 0),
            data.get("shape"),
            None if data.get("dx_end") is None else int(data["dx_end"]),
        )


@dataclass(frozen=True)
class VendorLayout:
    """How one vendor's page is read, for one organisation (see the module's docstring)."""

    org_id: str
    vendor_key: str
    seller_name: str | None
    seller_vat_id: str | None
    currency: str | None
    fingerprint: tuple[StableWord, ...]
    rules: tuple[FieldRule, ...]
    # Set once stored: the row's id (what `layout:<id>` names), its version for the vendor.
    id: int | None = None
    version: int = 1
    learnt_from: str | None = None
    taught_by: str | None = None
    taught_at: str | None = None
    enabled: bool = True
    # In shadow until a person approved an invoice read with it: read beside template-free
    # reading, never used; a disagreement holds the invoice (`fields_with_layouts`). Not
    # exported: an imported layout always starts in shadow.
    shadow: bool = False
    # What the approved values taught nothing about, and why (a typed value the page does not
    # print): said when it is learnt, never stored or exported.
    not_learnt: tuple[str, ...] = field(default=(), compare=False)

    @property
    def label(self) -> str:
        return f"layout:{self.id if self.id is not None else 'new'}"

    def rule(self, name: str) -> FieldRule | None:
        return next((r for r in self.rules if r.field == name), None)

    def to_json(self) -> dict[str, Any]:
        """The layout as data (docs/layouts.md): what it reads, never a page's variable values."""
        return {
            "vendor_key": self.vendor_key,
            "version": self.version,
            "seller_name": self.seller_name,
            "seller_vat_id": self.seller_vat_id,
            "currency": self.currency,
            "fingerprint": [[w.text, w.col] for w in self.fingerprint],
            "rules": [r.to_json() for r in self.rules],
            "learnt_from": self.learnt_from,
            "taught_by": self.taught_by,
            "taught_at": self.taught_at,
            "enabled": self.enabled,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, org_id: str, id: int | None = None) -> VendorLayout:
        key = str(data["vendor_key"])
        if not re.fullmatch(r"(vat|iban|name):.+", key):
            raise ValueError(f"vendor_key must be vat:, iban: or name:, got {key!r}")
        return cls(
            org_id=org_id,
            vendor_key=key,
            seller_name=data.get("seller_name"),
            seller_vat_id=data.get("seller_vat_id"),
            currency=data.get("currency"),
            fingerprint=tuple(StableWord(str(t), int(c)) for t, c in data.get("fingerprint") or ()),
            rules=tuple(FieldRule.from_json(r) for r in data.get("rules") or ()),
            id=id,
            version=int(data.get("version") or 1),
            learnt_from=data.get("learnt_from"),
            taught_by=data.get("taught_by"),
            taught_at=data.get("taught_at"),
            enabled=bool(data.get("enabled", True)),
        )


# ---------------------------------------------------------------- the page


@dataclass(frozen=True)
class Page:
    """A page's words (the layout text's segments) with their boxes when known."""

    text: str
    lines: tuple[tuple[Segment, ...], ...]
    geometry: PageGeometry
    flat: str  # every segment's text, for presence checks

    @classmethod
    def of(cls, text: str, boxes: TextBoxes | None = None) -> Page:
        lines = tuple(tuple(row) for row in segments(text))
        return cls(text, lines, PageGeometry(text, boxes), "\n".join(s.text for row in lines for s in row))

    def segs(self) -> list[Segment]:
        return [s for row in self.lines for s in row]


def amount_roles(fields: InvoiceFields) -> list[tuple[Kind, Decimal]]:
    """What the confirmed amounts say is printed: net + tax = gross, gross - prepaid = due."""
    payable, net, tax = fields.payable_total, fields.net_total, fields.tax_total
    out: list[tuple[Kind, Decimal]] = []
    if payable is None:
        return out
    if net is not None and tax is not None and net + tax == payable:
        out.append(("gross", payable))
    else:
        out.append(("due", payable))
        if net is not None and tax is not None:
            out += [("gross", net + tax), ("prepaid", net + tax - payable)]
    if net is not None:
        out.append(("net", net))
    if tax is not None and tax != 0:
        out.append(("tax", tax))
    return out
