"""Vendor layouts learnt from a person's decision, and reading a page with one. Pure: no database.

A `VendorLayout` says, for one organisation and one vendor, how that vendor's page is read:

* the vendor: its key (`vat:<id>` or `iban:<iban>`), one of the identifiers the vendor registry
  records for the vendor. A layout applies only to a page whose vendor the registry confirms (an
  identifier printed on the page that belongs to exactly one of the org's vendors and is not the
  org's own: `domain.payment.confirmed_vendor`) and only when that vendor records the key
  (`layout_of_vendor`): a different vendor's page never is, however alike the templates, and a
  page whose vendor is not confirmed is read template-free. (`name:` keys of earlier versions
  are kept but never apply: a name proves nothing.) A layout never says who the seller is: its
  `seller_name` / `seller_vat_id` are informational;
* a fingerprint: the stable words of the page (segments without digits) and their columns; a
  page matches when enough of them are there again, wherever the lines moved;
* per field, a `FieldRule`: the anchor text near the value (a label) and where the value stands
  relative to it: inside the anchor's segment after it (`same`), right of it on its line
  (`right`), or `dy` lines below it near its column (`below`). Positions are relative to the
  anchor, never to the page, so an invoice that grows by a line still reads.

`learn_layout` makes one from a page and the values a person confirmed; `read_with_layout` reads
a page with one (or says why it does not match); `fields_with_layouts` puts that together with
the template-free reading (`documents.text_fields`): a layout is tried first, a field it cannot
read keeps the template-free value and says so in its source, and a layout that no longer
matches its vendor's page falls back whole and says so. Amounts read with a layout are never
taken on the layout's word: the layout only says which printed amount is the net, the tax, the
gross, the prepaid and the due, and `reading.amounts.resolve` must still find the page's own
arithmetic among them (money fails closed).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from decimal import Decimal
from functools import lru_cache
from typing import Any, Literal

from ...domain.fields import FieldSource, InvoiceFields
from ...domain.identity import Identified
from ...domain.payment import seller_identifiers
from ...domain.review import SHADOW_SOURCE
from ...domain.validation import KNOWN_CURRENCIES
from ..extracted import ExtractedText
from .amounts import (
    EXEMPT,
    Found,
    Kind,
    Resolution,
    amount_label,
    ends_in_amount,
    find_amounts,
    numbers_in,
    resolve,
)
from .labels import fields_labelled
from .number_guard import PageNumbers, why_not_a_number
from .ocr_layout import MIN_FIELD_CONFIDENCE, OcrLayout
from .page_values import find_dates, first_identifier, labelled_date
from .parties import LEGAL_MARKERS
from .words import PageGeometry, Segment, TextBoxes, segments, union

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
_KIND_OF_FIELD: dict[str, ValueKind] = {
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


def _shape(value: str) -> str:
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


def fingerprint_of(page: Page, variable: Sequence[str] = ()) -> tuple[StableWord, ...]:
    """The page's stable-looking words: segments with letters and no digits, not a variable value."""
    skip = {norm_text(v) for v in variable if v}
    seen: set[str] = set()
    out: list[StableWord] = []
    for seg in page.segs():
        text = norm_text(seg.text)
        if re.search(r"\d", text) or len(re.findall(r"[a-z]", text)) < 3 or text in skip or text in seen:
            continue
        seen.add(text)
        out.append(StableWord(text, seg.col))
        if len(out) >= FINGERPRINT_WORDS:
            break
    return tuple(out)


def fingerprint_score(page: Page, words: Sequence[StableWord]) -> float:
    """The share of the fingerprint's words found on the page near their column (any line)."""
    if not words:
        return 0.0
    where: dict[str, list[int]] = {}
    for seg in page.segs():
        where.setdefault(norm_text(seg.text), []).append(seg.col)
    hits = sum(1 for w in words if any(abs(col - w.col) <= COLUMN_SLACK for col in where.get(w.text, ())))
    return hits / len(words)


def layout_of_vendor(vendor_key: str, vendor: Identified | None) -> bool:
    """The layout belongs to the page's vendor: the vendor the registry confirms for the page
    (`domain.payment.confirmed_vendor`) records the layout's key among its identifiers. A page
    whose vendor the registry does not confirm is read without layouts, and a layout never applies
    to another vendor's page, however alike the two vendors' templates; a `name:` key never binds."""
    kind, _, value = vendor_key.partition(":")
    if vendor is None or not value:
        return False
    if kind == "vat":
        return vendor.has("vat", value)
    return kind == "iban" and vendor.has("iban", value)


def vendor_key_for(confirmed: InvoiceFields, vendor: Identified | None = None) -> str | None:
    """The key a layout learnt from an approved invoice is bound by: a seller identifier the person
    approved (the VAT id, else the IBAN to pay), the one the registry records for the vendor when it
    knows the vendor already (`vendor`), so that its later pages, confirmed by the registry, find
    it. None when the invoice gives neither: the registry could never confirm its vendor."""
    idents = seller_identifiers(confirmed)
    known = [i for i in idents if vendor is not None and vendor.has(i.kind, i.value)]
    chosen = (known or idents)[:1]
    return f"{chosen[0].kind}:{norm_id(chosen[0].value)}" if chosen else None


# ---------------------------------------------------------------- values in a segment


def _identifiers(text: str) -> list[tuple[int, str]]:
    value = first_identifier(text)
    return [(text.find(value), value)] if value and value in text else []


def _dates(text: str) -> list[tuple[int, date]]:
    found = find_dates(text)
    if not found and (compact := labelled_date(text)) is not None:
        return [(0, compact)]
    return found


def _amounts(text: str) -> list[tuple[int, Decimal]]:
    return [(n.start, n.value) for n in numbers_in(text)]


def _values(kind: ValueKind, text: str) -> list[tuple[int, Any]]:
    if kind == "identifier":
        return _identifiers(text)
    if kind == "date":
        return _dates(text)
    return _amounts(text)


def _same_value(kind: ValueKind, got: Any, want: Any) -> bool:
    if kind == "amount":
        return isinstance(got, Decimal) and abs(got) == abs(Decimal(str(want)))
    return bool(got == want)


# ---------------------------------------------------------------- learning


def _usable_anchor(text: str) -> bool:
    """An anchor is a label: letters, no date, no long number (those change between invoices)."""
    return (
        len(re.findall(r"[a-z]", text)) >= 2
        and not re.search(r"\d{4,}", text)
        and not find_dates(text)
        and not numbers_in(re.sub(r"\d+\s?%", "", text))
    )


def _unique(page: Page, anchor: str, relation: Relation) -> bool:
    texts = [norm_text(s.text) for s in page.segs()]
    if relation == "same":
        return sum(1 for t in texts if t.startswith(anchor)) == 1
    return texts.count(anchor) == 1


# At most this many words right before a value make its inline anchor ("Nr.", "vom", "due on").
INLINE_WORDS = 3


def _inline_anchor(text: str, start: int) -> tuple[str, int] | None:
    """The words printed right before a value inside its segment, back to the first word with a
    digit ("Teilrechnung 3 zu Auftrag 118 Nr. 210111 vom 30.05.2025": "nr" before the number, "vom"
    before the date), and where they start; None when there are none a label could be."""
    words = list(re.finditer(r"\S+", text[:start]))
    taken: list[re.Match[str]] = []
    for word in reversed(words):
        if len(taken) == INLINE_WORDS or re.search(r"\d", word.group()) or not norm_text(word.group()):
            break
        taken.insert(0, word)
    if not taken:
        return None
    anchor = norm_text(text[taken[0].start() : start])
    return (anchor, taken[0].start()) if _usable_anchor(anchor) else None


def _inline_hits(page: Page, anchor: str, col: int | None = None) -> list[tuple[Segment, int, int]]:
    """Where `anchor` is printed as whole words inside a segment (near column `col` when given):
    (segment, the anchor's column, where the text after it starts)."""
    size = len(anchor.split())
    out: list[tuple[Segment, int, int]] = []
    for seg in page.segs():
        if anchor not in norm_text(seg.text):
            continue
        words = list(re.finditer(r"\S+", seg.text))
        for i in range(len(words) - size + 1):
            run = words[i : i + size]
            at = seg.col + run[0].start()
            if norm_text(seg.text[run[0].start() : run[-1].end()]) == anchor and (
                col is None or abs(at - col) <= COLUMN_SLACK
            ):
                out.append((seg, at, run[-1].end()))
    return out


def _anchors_for(page: Page, seg: Segment, start: int) -> list[FieldRule]:
    """Anchors for a value at `start` in `seg`, best first (field name and shape left blank)."""
    out: list[FieldRule] = []
    before = norm_text(seg.text[:start])
    if before and _usable_anchor(before) and _unique(page, before, "same"):
        out.append(FieldRule("", before, seg.col, "same", 0))
    elif (inline := _inline_anchor(seg.text, start)) is not None:
        # A value inside a line of other text (a title line): the words right before it, found
        # again near their column, once.
        words, offset = inline
        if len(_inline_hits(page, words, seg.col + offset)) == 1:
            out.append(FieldRule("", words, seg.col + offset, "after", 0))
    row = page.lines[seg.line]
    left = [s for s in row if s.col < seg.col]
    if left:
        anchor = left[-1]
        text = norm_text(anchor.text)
        if _usable_anchor(text) and _unique(page, text, "right"):
            out.append(
                FieldRule("", text, anchor.col, "right", seg.col - anchor.col, dx_end=seg.end - anchor.col)
            )
    for dy in range(1, BELOW_DEPTH + 1):
        if seg.line - dy < 0:
            break
        above = [s for s in page.lines[seg.line - dy] if s.overlaps(seg.col, seg.end, 6)]
        if not above:
            continue
        anchor = min(above, key=lambda s: abs(s.col - seg.col))
        text = norm_text(anchor.text)
        if _usable_anchor(text) and _unique(page, text, "below"):
            out.append(
                FieldRule(
                    "", text, anchor.col, "below", seg.col - anchor.col, dy, dx_end=seg.end - anchor.col
                )
            )
            break
    return out


def _occurrences(page: Page, kind: ValueKind, want: Any) -> list[tuple[Segment, int]]:
    """Where the page prints `want`: a value read in a segment, or, for an identifier a person
    typed, the same characters as a word of any line (a number inside a title line, "Teilrechnung
    Nr. 210111 vom 30.05.2025", which no reading of the segment's start finds)."""
    found = [
        (seg, start)
        for seg in page.segs()
        for start, got in _values(kind, seg.text)
        if _same_value(kind, got, want)
    ]
    if kind == "identifier" and not found and str(want).strip():
        typed = re.compile(rf"(?<![\w/-]){re.escape(str(want).strip())}(?![\w/-])")
        found = [(seg, m.start()) for seg in page.segs() for m in typed.finditer(seg.text)]
    return found


_RELATION_RANK = {"same": 0, "after": 1, "right": 2, "below": 3}


def _learn_rule(
    page: Page,
    name: str,
    kind: ValueKind,
    want: Any,
    taken: set[tuple[int, int, int]],
    prefer: Kind | None = None,
) -> tuple[FieldRule, tuple[int, int, int]] | None:
    """The best rule for `want`, and where its value stands (line, segment, start): a value
    already taken for another field is not taken again (a title line holds the number and the
    date, each once)."""
    best: tuple[tuple[int, int, int], FieldRule, tuple[int, int, int]] | None = None
    for seg, start in _occurrences(page, kind, want):
        if (seg.line, seg.index, start) in taken:
            continue
        for rule in _anchors_for(page, seg, start):
            if kind == "amount":
                said = amount_label(rule.anchor)
                # An amount whose label names the role it is learnt for is the one, then the lowest.
                fits = 0 if prefer is None or (said is not None and said.kind == prefer) else 1
            else:
                # The same date under "Invoice date" and "Delivery date": the invoice date's own
                # label, then a label the dictionaries do not know, never another field's.
                named = fields_labelled(rule.anchor)
                fits = 0 if name in named else 2 if named else 1
            rank = (fits, _RELATION_RANK[rule.relation], -seg.line if kind == "amount" else seg.line)
            if best is None or rank < best[0]:
                shape = _shape(str(want)) if kind == "identifier" else None
                best = (rank, replace(rule, field=name, shape=shape), (seg.line, seg.index, start))
            break
    return None if best is None else (best[1], best[2])


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


def learn_layout(
    text: str,
    boxes: TextBoxes | None,
    confirmed: InvoiceFields,
    *,
    org_id: str,
    vendor_key: str | None = None,
    learnt_from: str | None = None,
    taught_by: str | None = None,
) -> VendorLayout | None:
    """A layout from one page and the values a person confirmed, bound to `vendor_key` (by default
    `vendor_key_for` the confirmed values); None when the confirmed values give no VAT id or IBAN
    of the seller, by which the registry could recognise the vendor's later pages."""
    page = Page.of(text, boxes)
    key = vendor_key or vendor_key_for(confirmed)
    if key is None:
        return None
    rules: list[FieldRule] = []
    taken: set[tuple[int, int, int]] = set()
    not_learnt: list[str] = []

    def learn(name: str, kind: ValueKind, want: Any, prefer: Kind | None = None) -> None:
        found = _learn_rule(page, name, kind, want, taken, prefer)
        if found is not None:
            rules.append(found[0])
            taken.add(found[1])
        elif not _occurrences(page, kind, want):
            # A value the person typed that the page does not print teaches nothing: the next
            # page could not show it either.
            not_learnt.append(f"{name} {want}: not printed on the page, nothing learnt for it")
        else:
            not_learnt.append(f"{name} {want}: printed, but by no label it could be found again by")

    for name in ANCHORED_FIELDS:
        if (want := getattr(confirmed, name)) is not None:
            learn(name, _KIND_OF_FIELD[name], want)
    for role, amount in amount_roles(confirmed):
        if role == "prepaid" and amount == 0:
            continue
        learn(f"amount:{role}", "amount", amount, role)
    variable = [str(v) for v in (confirmed.invoice_number, confirmed.po_number) if v is not None]
    return VendorLayout(
        org_id=org_id,
        vendor_key=key,
        seller_name=confirmed.seller_name,
        seller_vat_id=confirmed.seller_vat_id,
        currency=confirmed.currency,
        fingerprint=fingerprint_of(page, variable),
        rules=tuple(rules),
        learnt_from=learnt_from,
        taught_by=taught_by,
        not_learnt=tuple(not_learnt),
    )


# ---------------------------------------------------------------- reading


@dataclass(frozen=True)
class ReadValue:
    value: Any
    line: int
    anchor: str
    segs: tuple[tuple[int, int], ...]
    seg: Segment
    anchor_seg: Segment


@dataclass(frozen=True)
class LayoutRead:
    """What a layout read from a page, or why it does not apply (`matched` False, `why`)."""

    layout: VendorLayout
    matched: bool
    why: str
    score: float = 0.0
    vendor_found: bool = False
    values: Mapping[str, ReadValue] = field(default_factory=dict)
    missed: Mapping[str, str] = field(default_factory=dict)
    # Fields whose learnt place holds something that is not the field (an invoice number's place
    # holding a date): left unread for a person, not read template-free instead.
    refused: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Refused:
    """A value the layout found where it learnt the field, which cannot be that field, and why."""

    reason: str


def _find_anchor(page: Page, rule: FieldRule) -> Segment | None:
    if rule.relation == "same":
        found = [s for s in page.segs() if norm_text(s.text).startswith(rule.anchor)]
    else:
        found = [s for s in page.segs() if norm_text(s.text) == rule.anchor]
    found = [s for s in found if abs(s.col - rule.anchor_col) <= COLUMN_SLACK]
    if len(found) != 1:
        return None
    return found[0]


def _value_after_anchor(kind: ValueKind, seg: Segment, anchor: str) -> Any:
    """The value in the anchor's own segment, after the anchor's words."""
    text = seg.text
    # Walk the raw text until its normalised prefix covers the anchor.
    cut = len(text)
    for i in range(1, len(text) + 1):
        if norm_text(text[:i]) == anchor:
            cut = i
            break
    found = _values(kind, text[cut:])
    return found[-1][1] if kind == "amount" and found else (found[0][1] if found else None)


def _read_rule(page: Page, rule: FieldRule, kind: ValueKind) -> ReadValue | Refused | str:
    if rule.relation == "after":
        hits = _inline_hits(page, rule.anchor, rule.anchor_col)
        anchor = hits[0][0] if len(hits) == 1 else None
    else:
        anchor = _find_anchor(page, rule)
    if anchor is None:
        return f"its anchor {rule.anchor!r} is not on the page once near column {rule.anchor_col}"
    if rule.relation == "after":
        found = _values(kind, anchor.text[hits[0][2] :])
        value = found[0][1] if found else None
        seg = anchor
    elif rule.relation == "same":
        value = _value_after_anchor(kind, anchor, rule.anchor)
        seg = anchor
    else:
        line = anchor.line + rule.dy
        if line >= len(page.lines):
            return f"nothing {rule.dy} line(s) below {rule.anchor!r}"
        row = page.lines[line]
        if rule.relation == "right":
            row = tuple(s for s in row if s.col > anchor.col)
        target = anchor.col + rule.dx
        target_end = anchor.col + (rule.dx_end if rule.dx_end is not None else rule.dx)

        def off(s: Segment) -> int:
            return min(abs(s.col - target), abs(s.end - target_end))

        near = [s for s in row if off(s) <= COLUMN_SLACK]
        if not near:
            return f"no value where it stood relative to {rule.anchor!r}"
        seg = min(near, key=off)
        found = _values(kind, seg.text)
        value = (found[-1][1] if kind == "amount" else found[0][1]) if found else None
    if value is None:
        return f"no {kind} where it stood relative to {rule.anchor!r}"
    if kind == "identifier" and rule.shape is not None and _shape(str(value)) != rule.shape:
        return f"{value!r} is not shaped like the learnt number ({rule.shape})"
    if rule.field == "invoice_number" and (why := why_not_a_number(str(value), PageNumbers.of(page.text))):
        # The learnt place holds another value (the number printed as a picture): the same rule
        # as on every other path, whatever the layout learnt.
        return Refused(f"no invoice number where it stood relative to {rule.anchor!r}: {why}")
    segs = ((anchor.line, anchor.index), (seg.line, seg.index))
    return ReadValue(value, seg.line, rule.anchor, segs, seg, anchor)


def read_with_layout(page: Page, layout: VendorLayout, vendor: Identified | None) -> LayoutRead:
    """The values `layout` reads from the page of `vendor` (the vendor the registry confirms for
    the page, None when it confirms none), or why it does not apply or match."""
    if not layout.enabled:
        return LayoutRead(layout, False, "disabled")
    if not layout_of_vendor(layout.vendor_key, vendor):
        return LayoutRead(
            layout, False, f"its vendor ({layout.vendor_key}) is not the page's confirmed vendor"
        )
    score = fingerprint_score(page, layout.fingerprint)
    if score < MATCH_THRESHOLD:
        return LayoutRead(
            layout,
            False,
            f"no longer matches the page (fingerprint {score:.2f} < {MATCH_THRESHOLD:.2f})",
            score,
            True,
        )
    values: dict[str, ReadValue] = {}
    missed: dict[str, str] = {}
    refused: dict[str, str] = {}
    for rule in layout.rules:
        kind: ValueKind = (
            "amount" if rule.field.startswith("amount:") else _KIND_OF_FIELD.get(rule.field, "identifier")
        )
        got = _read_rule(page, rule, kind)
        if isinstance(got, str):
            missed[rule.field] = got
        elif isinstance(got, Refused):
            refused[rule.field] = got.reason
        else:
            values[rule.field] = got
    return LayoutRead(layout, True, "matched", score, True, values, missed, refused)


def _currency_on_page(page: Page, currency: str | None) -> bool:
    if currency is None:
        return False
    codes = {c for c in re.findall(r"\b[A-Z]{3}\b", page.flat) if c in KNOWN_CURRENCIES}
    if codes - {currency}:
        return False  # the page names another currency too: not the layout's to decide
    # Only a sign no other currency prints: "$" (or "kr") alone says a currency of several, which
    # the currency a person approved the vendor's invoices in decides (domain/registered_vendor.py).
    symbols = {"EUR": "€", "GBP": "£", "JPY": "¥", "INR": "₹"}
    return currency in codes or (symbols.get(currency, "\0") in page.flat)


def _annotated(source: FieldSource, note: str) -> FieldSource:
    return (
        replace(source, source=f"{source.source} ({note})")
        if source.source
        else replace(source, reason=f"{source.reason or ''} ({note})".strip())
    )


def layout_for_org(layout: VendorLayout, org_id: str) -> bool:
    """Only an organisation's own enabled layouts read its pages (whatever a caller passes in)."""
    return layout.enabled and layout.org_id == org_id


def fields_with_layouts(
    text: str,
    boxes: TextBoxes | None,
    template_free: InvoiceFields,
    layouts: Sequence[VendorLayout],
    *,
    org_id: str,
    vendor: Identified | None,
    confidence_of: Callable[[Sequence[int]], tuple[int, float]] | None = None,
    min_confidence: float = 0.0,
) -> InvoiceFields:
    """The page read with the org's best matching layout first, template-free where it cannot.

    Only the org's own enabled layouts are tried, and only those of `vendor`, the vendor the
    registry confirms for the page (`layout_of_vendor`); a page whose vendor it does not confirm
    is read template-free. `confidence_of` gives (page, confidence) of text lines for an OCRed
    scan: a layout's value read below `min_confidence` is not taken.
    """
    if vendor is None:
        return template_free
    page = Page.of(text, boxes)
    reads = [read_with_layout(page, lay, vendor) for lay in layouts if layout_for_org(lay, org_id)]
    matched = [r for r in reads if r.matched]
    if not matched:
        stale = [r for r in reads if r.vendor_found]
        if not stale:
            return template_free
        note = "; ".join(f"{r.layout.label} v{r.layout.version} {r.why}" for r in stale)
        sources = {
            name: _annotated(src, f"{note}: read template-free")
            for name, src in template_free.sources.items()
        }
        return replace(template_free, sources=sources)
    # An active layout is read with; one in shadow only when no active one matches.
    best = max(matched, key=lambda r: (not r.layout.shadow, r.score, len(r.values), r.layout.version))
    merged = _merge(page, best, template_free, confidence_of, min_confidence)
    return shadow_reading(best.layout, merged, template_free) if best.layout.shadow else merged


# What a layout in shadow is compared on with the template-free reading.
SHADOW_COMPARED = (
    "invoice_number",
    "issue_date",
    "due_date",
    "currency",
    "payable_total",
    "net_total",
    "tax_total",
)


def shadow_reading(
    layout: VendorLayout, with_layout: InvoiceFields, template_free: InvoiceFields
) -> InvoiceFields:
    """A layout in shadow (imported or newly learnt, not yet seen right by a person): its values
    are never used, the template-free reading stands. Where the two disagree, the invoice is held
    (`domain.review`, `layout_disagrees`) with both readings; where they agree, each field's
    source says so. Approving an invoice the layout reads as approved makes it active
    (`engine.layouts.learn_from_decision`)."""
    note = f"{layout.label} v{layout.version} in shadow"
    names = [n for n in SHADOW_COMPARED if getattr(with_layout, n) != getattr(template_free, n)]
    differ = [
        f"{n} {getattr(with_layout, n)} (layout) / {getattr(template_free, n)} (page reader)" for n in names
    ]
    checked = with_layout.amount_check
    if checked is not None and not checked.confirmed and with_layout.payable_total is not None:
        # The layout's own reading would be held (a page label disagrees, a row it never saw).
        differ.append(f"the layout's amounts are not confirmed ({checked.rule})")
    sources = {
        name: _annotated(src, f"{note}: {'reads it differently' if name in names else 'reads the same'}")
        for name, src in template_free.sources.items()
    }
    if differ:
        sources[SHADOW_SOURCE] = FieldSource(
            f"{note}", 0.0, f"{note} reads this page differently from the page reader: {'; '.join(differ)}"
        )
    return replace(template_free, sources=sources)


def _merge(
    page: Page,
    read: LayoutRead,
    template_free: InvoiceFields,
    confidence_of: Callable[[Sequence[int]], tuple[int, float]] | None,
    min_confidence: float,
) -> InvoiceFields:
    """The template-free reading with what the layout reads instead: its anchored fields, the
    vendor's currency, and the amounts it places (the page's arithmetic decides)."""
    merging = _Merging(page, read, confidence_of, min_confidence, dict(template_free.sources))
    _anchored_fields(merging)
    # Who the seller is never comes from a layout: its seller_name / seller_vat_id are what a person
    # (or an import) said, and an import may say anything. The page reader's values stand (the
    # vendor registry confirms them); a layout that could rename the seller could also hide a
    # re-sent copy from the duplicate check.
    _vendor_currency(merging)
    _amounts_with_layout(merging)
    return replace(template_free, **merging.updates, sources=merging.sources)


@dataclass
class _Merging:
    """A layout's reading being merged into the template-free one."""

    page: Page
    read: LayoutRead
    confidence_of: Callable[[Sequence[int]], tuple[int, float]] | None  # a scan's (page, confidence)
    min_confidence: float
    sources: dict[str, FieldSource]  # the template-free sources, replaced field by field
    # The values the layout reads, as `dataclasses.replace` takes them.
    updates: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.read.layout.label

    def take(self, name: str, value: Any, source: FieldSource) -> None:
        self.updates[name] = value
        self.sources[name] = source

    def fallback(self, name: str, why: str) -> None:
        """The field stays template-free; its source says why the layout did not read it."""
        if name in self.sources:
            self.sources[name] = _annotated(self.sources[name], f"{self.label} {why}; read template-free")

    def source_for(self, value: ReadValue) -> FieldSource | None:
        """Where the layout read `value`; None when OCR was not sure of its lines."""
        page = self.page
        lines = sorted({value.anchor_seg.line, value.seg.line})
        pg, confidence = page.geometry.page(lines[0]), 0.95
        if self.confidence_of is not None:
            pg, confidence = self.confidence_of(lines)
            if confidence < self.min_confidence:
                return None
        box = union([page.geometry.box(ln, ix) for ln, ix in value.segs])
        return FieldSource(
            f"{self.label}:page {pg}:line {value.line + 1}:{value.anchor!r}",
            round(confidence, 3),
            None,
            pg,
            box,
        )

    def amount_source(self, f: Found, placed: Sequence[Found]) -> FieldSource:
        """Where an amount was read: by the layout when it placed it, else template-free."""
        page, label = self.page, self.label
        lines = sorted({f.label_seg.line, f.value_seg.line})
        pg, confidence = page.geometry.page(lines[0]), 0.9 * min(f.strength, 1.0)
        if self.confidence_of is not None:
            pg, confidence = self.confidence_of(lines)
        box = union(
            [
                page.geometry.box(f.label_seg.line, f.label_seg.index),
                page.geometry.box(f.value_seg.line, f.value_seg.index),
            ]
        )
        # An amount the layout did not place was read template-free: from the text layer, or
        # from OCR on a scan (which is what confidence_of says the page is).
        template_free = "ocr:" if self.confidence_of is not None else "pdf-text:"
        prefix = f"{label}:" if f in placed else template_free
        label_text = f.label[len(label) + 1 :] if f in placed else f.label
        where = f"page {pg}:line {lines[-1] + 1}:{label_text!r}"
        return FieldSource(f"{prefix}{where}", round(confidence, 3), None, pg, box)


def _anchored_fields(merging: _Merging) -> None:
    """Each field the layout has a rule for, read after its anchor (or template-free, and why)."""
    layout, read = merging.read.layout, merging.read
    for name in ANCHORED_FIELDS:
        if layout.rule(name) is None:
            continue
        if (why := read.refused.get(name)) is not None:
            merging.take(
                name,
                None,
                FieldSource(
                    merging.label, 0.0, f"{merging.label} {why}; not read template-free either: not guessed"
                ),
            )
            continue
        got = read.values.get(name)
        src = merging.source_for(got) if got is not None else None
        if got is None or src is None:
            merging.fallback(name, read.missed.get(name, "read it below the OCR confidence threshold"))
            continue
        merging.take(name, got.value, src)


def _vendor_currency(merging: _Merging) -> None:
    """The vendor's currency, when the page prints it (alone)."""
    layout = merging.read.layout
    if _currency_on_page(merging.page, layout.currency):
        source = FieldSource(f"{merging.label}:the vendor's currency, printed on the page", 0.9)
        merging.take("currency", layout.currency, source)
    elif layout.currency is not None:
        merging.fallback("currency", f"did not find its currency {layout.currency} (alone) on the page")


def _amounts_with_layout(merging: _Merging) -> None:
    """Amounts: the layout says which printed amount is which; the page's arithmetic decides."""
    read, label = merging.read, merging.label
    placed: list[Found] = []
    for role in AMOUNT_ROLES:
        got = read.values.get(f"amount:{role}")
        if got is None or not isinstance(got.value, Decimal):
            continue
        placed.append(
            Found(role, got.value, f"{label}:{got.anchor}", LAYOUT_STRENGTH, got.anchor_seg, got.seg)
        )
    if not placed:
        for role in AMOUNT_ROLES:
            if (why := read.missed.get(f"amount:{role}")) is not None:
                merging.fallback("payable_total", f"found no {role} amount: {why}")
                break
        return
    resolution = _resolved_with_layout(merging, placed)
    for name, chosen in (("payable_total", resolution.payable), ("net_total", resolution.net)):
        if chosen is not None:
            merging.take(name, chosen.amount, merging.amount_source(chosen, placed))
    if resolution.tax_found is not None:
        merging.take(
            "tax_total", resolution.tax_found.amount, merging.amount_source(resolution.tax_found, placed)
        )
    elif resolution.tax is not None and resolution.check.confirmed:
        merging.take("tax_total", resolution.tax, FieldSource(f"{label}:{resolution.check.rule}", 0.8))
    merging.updates["amount_check"] = resolution.check


def _resolved_with_layout(merging: _Merging, placed: list[Found]) -> Resolution:
    """The amounts the layout placed, with the page's others, resolved; not confirmed when the
    totals print a row the layout does not know or the page's own labels disagree with it."""
    page, label = merging.page, merging.label
    taken = {(f.value_seg.line, f.value_seg.index) for f in placed}
    found = placed + [
        f
        for f in find_amounts(page.text, page.geometry)
        if (f.value_seg.line, f.value_seg.index) not in taken
    ]
    resolution = resolve(
        found,
        exempt=EXEMPT.search(page.text) is not None,
        source_of=lambda f: merging.amount_source(f, placed),
    )
    unknown = unexplained_amounts(page, placed, found, resolution.payable)
    if resolution.check.confirmed and unknown:
        # A row the layout never saw (a prepayment, a fee) may change what is due: the
        # arithmetic of the rows it knows proves nothing then. Held for a person.
        resolution = replace(
            resolution,
            check=replace(
                resolution.check,
                confirmed=False,
                rule=f"the totals print amounts {label} does not know ({'; '.join(unknown)}): "
                f"not confirmed although {resolution.check.rule}",
            ),
        )
    disagree = labels_disagreeing(placed, found, label)
    if disagree:
        # The page's own label outranks what anyone taught: a layout (learnt wrong, or imported
        # with its roles moved) may point at an item row that the arithmetic happens to
        # confirm. Both readings are shown; a person decides.
        resolution = replace(
            resolution,
            check=replace(
                resolution.check,
                confirmed=False,
                rule=f"the page's own labels disagree with {label}: {'; '.join(disagree)}: not confirmed"
                + (f" although {resolution.check.rule}" if resolution.check.confirmed else ""),
            ),
        )
    return resolution


# Lines below the payable (and the last amount a layout placed) looked at for other amounts.
TOTALS_REACH = 6


def unexplained_amounts(
    page: Page, placed: Sequence[Found], found: Sequence[Found], payable: Found | None
) -> list[str]:
    """Rows in the totals column just below the payable amount, with an amount that neither the
    layout nor a dictionary label accounts for (above it, net + tax = total already held)."""
    if not placed or payable is None:
        return []
    known = {(f.value_seg.line, f.value_seg.index) for f in found}
    ends = [f.value_seg.end for f in placed]
    first = payable.value_seg.line + 1
    last = max(payable.value_seg.line, *(f.value_seg.line for f in placed))
    out: list[str] = []
    for line in range(first, min(last + 1 + TOTALS_REACH, len(page.lines))):
        row = page.lines[line]
        if any(LEGAL_MARKERS.search(s.text) for s in row):
            # A registration line ("Registered in England No. 0441 ...") is no totals row. Only
            # that line: the footer's block may begin right under a prepayment row.
            continue
        for seg in row:
            if (seg.line, seg.index) in known or not ends_in_amount(seg.text):
                continue
            if any(abs(seg.end - end) <= COLUMN_SLACK for end in ends):
                label = " ".join(s.text for s in row if s.col < seg.col) or seg.text
                out.append(f"{label.strip()!r} on line {line + 1}")
    return out


# The amounts whose own label on a page is compared with what a layout placed: one of each is
# printed (a tax is often printed per rate, so it is left to the arithmetic).
CHECKED_AGAINST_LABELS: tuple[Kind, ...] = ("due", "gross", "net")


def labels_disagreeing(placed: Sequence[Found], found: Sequence[Found], label: str) -> list[str]:
    """Each amount a layout placed that a label of the page's own (a dictionary label, read
    template-free) contradicts: "Balance due 600.00" where the layout places the due at 500.00."""
    own = [f for f in found if f not in placed and not f.rate_row and f.kind in CHECKED_AGAINST_LABELS]
    return [
        f"the page says {f.label!r} {f.amount} (line {f.value_seg.line + 1}) where {label} places "
        f"{p.kind} {p.amount} (line {p.value_seg.line + 1})"
        for p in placed
        for f in own
        if f.kind == p.kind and abs(f.amount) != abs(p.amount)
    ]


def contradictions(read: LayoutRead, confirmed: InvoiceFields) -> list[str]:
    """The fields a layout read differently from what a person confirmed (a new version is due)."""
    out: list[str] = []
    for name in ANCHORED_FIELDS:
        got = read.values.get(name)
        want = getattr(confirmed, name)
        if got is not None and want is not None and got.value != want:
            out.append(name)
    roles = dict(amount_roles(confirmed))
    for role, want_amount in roles.items():
        got = read.values.get(f"amount:{role}")
        if got is not None and abs(got.value) != abs(want_amount):
            out.append(f"amount:{role}")
    for role in AMOUNT_ROLES:
        if role not in roles and f"amount:{role}" in read.values and role in ("due", "gross"):
            # The layout reads a payable where the person says there is none of that kind.
            if read.values[f"amount:{role}"].value != confirmed.payable_total:
                out.append(f"amount:{role}")
    # (The seller's name is not compared: a layout never says who the seller is.)
    if read.layout.currency and confirmed.currency and read.layout.currency != confirmed.currency:
        out.append("currency")
    return out


# ---------------------------------------------------------------- stored texts


PAGE_FORMATS = ("pdf", "image")


def page_of(extracted: ExtractedText) -> tuple[TextBoxes | None, OcrLayout | None]:
    """The boxes of a page-read text (a text PDF's segments, or a scan's OCR lines)."""
    ocr = OcrLayout.from_structured(extracted.structured) if extracted.method.startswith("ocr") else None
    boxes = ocr.text_boxes() if ocr is not None else TextBoxes.from_structured(extracted.structured)
    return boxes, ocr


def apply_layouts(
    extracted: ExtractedText,
    fields: InvoiceFields,
    layouts: Sequence[VendorLayout],
    org_id: str,
    vendor: Identified | None,
) -> InvoiceFields:
    """`fields` (read template-free) read again with the layouts of the page's confirmed `vendor`,
    for a page-read invoice; structured invoices (XML, JSON), an org without layouts and a page
    whose vendor the registry does not confirm are returned as they are."""
    if extracted.format not in PAGE_FORMATS or not layouts or vendor is None:
        return fields
    boxes, ocr = page_of(extracted)
    return fields_with_layouts(
        extracted.text,
        boxes,
        fields,
        layouts,
        org_id=org_id,
        vendor=vendor,
        confidence_of=ocr.locate if ocr is not None else None,
        min_confidence=MIN_FIELD_CONFIDENCE if ocr is not None else 0.0,
    )
