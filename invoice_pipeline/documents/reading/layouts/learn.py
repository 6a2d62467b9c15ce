"""Learning a layout from one page and the values a person confirmed (`learn_layout`)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ....domain.fields import InvoiceFields
from ..amounts import (
    Kind,
    amount_label,
    numbers_in,
)
from ..labels import fields_labelled
from ..page_values import find_dates
from ..words import Segment, TextBoxes
from .match import fingerprint_of, inline_hits, same_value, values_in, vendor_key_for
from .model import (
    ANCHORED_FIELDS,
    BELOW_DEPTH,
    KIND_OF_FIELD,
    FieldRule,
    Page,
    Relation,
    ValueKind,
    VendorLayout,
    amount_roles,
    norm_text,
    shape_of,
)

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
        if len(inline_hits(page, words, seg.col + offset)) == 1:
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
        for start, got in values_in(kind, seg.text)
        if same_value(kind, got, want)
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
                shape = shape_of(str(want)) if kind == "identifier" else None
                best = (rank, replace(rule, field=name, shape=shape), (seg.line, seg.index, start))
            break
    return None if best is None else (best[1], best[2])


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
            learn(name, KIND_OF_FIELD[name], want)
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
