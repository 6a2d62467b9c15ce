"""Reading a page with one layout (`read_with_layout`): each rule's value found again after its
anchor, or why not; and what a reading contradicts in a person's confirmed values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ....domain.fields import InvoiceFields
from ....domain.identity import Identified
from ..number_guard import PageNumbers, why_not_a_number
from ..words import Segment
from .match import fingerprint_score, inline_hits, layout_of_vendor, values_in
from .model import (
    AMOUNT_ROLES,
    ANCHORED_FIELDS,
    COLUMN_SLACK,
    KIND_OF_FIELD,
    MATCH_THRESHOLD,
    FieldRule,
    Page,
    ValueKind,
    VendorLayout,
    amount_roles,
    norm_text,
    shape_of,
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
    found = values_in(kind, text[cut:])
    return found[-1][1] if kind == "amount" and found else (found[0][1] if found else None)


def _read_rule(page: Page, rule: FieldRule, kind: ValueKind) -> ReadValue | Refused | str:
    if rule.relation == "after":
        hits = inline_hits(page, rule.anchor, rule.anchor_col)
        anchor = hits[0][0] if len(hits) == 1 else None
    else:
        anchor = _find_anchor(page, rule)
    if anchor is None:
        return f"its anchor {rule.anchor!r} is not on the page once near column {rule.anchor_col}"
    if rule.relation == "after":
        found = values_in(kind, anchor.text[hits[0][2] :])
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
        found = values_in(kind, seg.text)
        value = (found[-1][1] if kind == "amount" else found[0][1]) if found else None
    if value is None:
        return f"no {kind} where it stood relative to {rule.anchor!r}"
    if kind == "identifier" and rule.shape is not None and shape_of(str(value)) != rule.shape:
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
            "amount" if rule.field.startswith("amount:") else KIND_OF_FIELD.get(rule.field, "identifier")
        )
        got = _read_rule(page, rule, kind)
        if isinstance(got, str):
            missed[rule.field] = got
        elif isinstance(got, Refused):
            refused[rule.field] = got.reason
        else:
            values[rule.field] = got
    return LayoutRead(layout, True, "matched", score, True, values, missed, refused)


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
