"""A page as the candidate finders see it (issue 40): each segment's label roles, font size,
weight, position and the labels near it, computed once per page (`candidates` turns them into
the ranker's features).

A label's role is language-independent (the dictionaries of `labels` cover EN/DE/FR/NL/IT/ES):
"Rechnungsdatum" and "Invoice date" are both `issue`. Sizes are the heights of the segments'
boxes in the text layer (pdfplumber's glyph size); a text layer without boxes gets positions from
its columns and lines.
"""

from __future__ import annotations

import re
import statistics

from .amounts import amount_label
from .labels import (
    BUYER_CONTEXT,
    BUYER_ROLE,
    COLUMN_SLACK,
    CURRENCY_LABELS,
    DUE_DATE_LABELS,
    ISSUE_DATE_LABELS,
    ISSUE_EXCLUDE,
    NUMBER_HEADING,
    NUMBER_LABELS,
    PO_LABELS,
    SELLER_ROLE,
    STAMP_CONTEXT,
    VAT_LABELS,
    TextDoc,
)
from .parties import LEGAL_MARKERS, footer_lines
from .seller_buyer import CUSTOMER_REFERENCE
from .words import PageGeometry, Segment, TextBoxes

_I = re.IGNORECASE
# Page size assumed for positions when a text layer has no boxes (A4 in points).
_PAGE_W, _PAGE_H = 595.0, 842.0
# How far up a column a label may head its value.
_ABOVE_REACH = 3
_NO_SIZE = 0.0
# The top band of a page (letterheads) and its bottom band (legal footers), as shares of its height.
_TOP_BAND = 0.22
_BOTTOM_BAND = 0.85
# Font sizes relative to the page's median are capped here (a 60-pt logo letter is just "large").
_MAX_SIZE_RATIO = 3.0
_SAME_SIZE = 0.5  # points

# ---------------------------------------------------------------- label roles of a segment

_ROLE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("number", re.compile("|".join(NUMBER_LABELS), _I)),
    ("issue", re.compile(ISSUE_DATE_LABELS[0], _I)),
    ("date", re.compile(ISSUE_DATE_LABELS[1], _I)),
    ("due", re.compile("|".join(DUE_DATE_LABELS), _I)),
    ("other_date", ISSUE_EXCLUDE),
    ("stamp", STAMP_CONTEXT),
    ("vat", re.compile(VAT_LABELS[0], _I)),
    ("tax_word", re.compile(r"(?<!\w)(?:" + VAT_LABELS[1] + r")(?!\w)", _I)),
    ("seller", SELLER_ROLE),
    ("buyer", BUYER_ROLE),
    ("buyer_ref", BUYER_CONTEXT),
    ("customer", CUSTOMER_REFERENCE),
    ("po", re.compile("|".join(PO_LABELS), _I)),
    ("currency", re.compile(CURRENCY_LABELS, _I)),
    ("heading", re.compile(NUMBER_HEADING, _I)),
    ("legal", LEGAL_MARKERS),
)
ROLES = tuple(name for name, _ in _ROLE_PATTERNS) + ("payable", "amount")


def roles_of(text: str) -> frozenset[str]:
    """The label roles a piece of text carries ("Invoice date" -> issue)."""
    out = {name for name, rx in _ROLE_PATTERNS if rx.search(text)}
    if (label := amount_label(text)) is not None:
        out.add("payable" if label.kind in ("due", "gross") else "amount")
    return frozenset(out)


class PageView:
    """A page's segments with their label roles, sizes and positions, computed once."""

    def __init__(self, text: str, boxes: TextBoxes | None) -> None:
        self.text = text
        self.doc = TextDoc(text)
        self.lines = self.doc.lines
        self.geometry = PageGeometry(text, boxes)
        self.n_lines = max(1, len(self.lines))
        self.roles = [[roles_of(s.text) for s in line] for line in self.lines]
        self.footer = footer_lines(self.lines)
        sizes: dict[int, list[float]] = {}
        for seg in self.doc.segs():
            sizes.setdefault(self.geometry.page(seg.line), []).append(self.size(seg))
        self.max_size = {page: max(found) for page, found in sizes.items()}
        self.median_size = {page: statistics.median(found) for page, found in sizes.items()}
        self.letterhead_rank = self._letterhead_ranks()
        self.flat = " \n".join(s.text for s in self.doc.segs())

    def _letterhead_ranks(self) -> dict[int, int]:
        """Each line in the top band of the first page, ranked by its largest text (then its
        boldest, then from the top): 0 is the letterhead's most prominent line."""
        prominence: dict[int, tuple[float, float]] = {}
        for seg in self.doc.segs():
            if self.geometry.page(seg.line) != 1 or self.position(seg)[1] >= _TOP_BAND:
                continue
            here = (self.size(seg), self.geometry.bold(seg.line, seg.index) or 0.0)
            prominence[seg.line] = max(prominence.get(seg.line, here), here)
        # Sizes within half a point are one size (the same type measured by its glyphs' boxes).
        by_size = sorted(prominence, key=lambda line: -prominence[line][0])
        size_class: dict[int, int] = {}
        klass, class_top = 0, prominence[by_size[0]][0] if by_size else _NO_SIZE
        for line in by_size:
            if class_top - prominence[line][0] > _SAME_SIZE:
                klass, class_top = klass + 1, prominence[line][0]
            size_class[line] = klass
        ranked = sorted(prominence, key=lambda line: (size_class[line], -prominence[line][1], line))
        return {line: rank for rank, line in enumerate(ranked)}

    def size(self, seg: Segment) -> float:
        box = self.geometry.box(seg.line, seg.index)
        return box[3] - box[1] if box is not None else _NO_SIZE

    def position(self, seg: Segment) -> tuple[float, float]:
        """(x, y) of the segment's start as shares of the page, from its box or its column/line."""
        box = self.geometry.box(seg.line, seg.index)
        if box is not None:
            return min(box[0] / _PAGE_W, 1.5), min(box[1] / _PAGE_H, 1.5)
        return min(seg.col / 120, 1.5), seg.line / self.n_lines

    def typography(self, seg: Segment) -> dict[str, float]:
        page = self.geometry.page(seg.line)
        top = self.max_size.get(page, _NO_SIZE)
        median = self.median_size.get(page, _NO_SIZE)
        size = self.size(seg)
        x, y = self.position(seg)
        rank = self.letterhead_rank.get(seg.line)
        return {
            "font_rel": size / top if top else 0.0,
            "font_is_max": 1.0 if top and size >= top - 0.5 else 0.0,
            "font_median_rel": min(size / median, _MAX_SIZE_RATIO) / _MAX_SIZE_RATIO if median else 0.0,
            "bold": self.geometry.bold(seg.line, seg.index) or 0.0,
            "letterhead": 1.0 / (1 + rank) if rank is not None else 0.0,
            "top_band": 1.0 if page == 1 and y < _TOP_BAND else 0.0,
            "bottom_band": 1.0 if y >= _BOTTOM_BAND else 0.0,
            "x": x,
            "y": y,
            "first_page": 1.0 if page == 1 else 0.0,
            "in_footer": 1.0 if seg.line in self.footer else 0.0,
        }

    def near(self, seg: Segment, before: frozenset[str], role: str) -> dict[str, float]:
        """Where a label of `role` stands for a value in `seg` (`before`: the roles of the text
        before it in its own segment): there, left of it on its line, or above it in its column
        (nearer is more)."""
        same = 1.0 if role in before else 0.0
        left = 0.0
        for k in range(seg.index - 1, -1, -1):
            if role in self.roles[seg.line][k]:
                left = 1.0 / (seg.index - k)
                break
        above = 0.0
        for i in range(seg.line - 1, max(-1, seg.line - 1 - _ABOVE_REACH), -1):
            if any(
                role in self.roles[i][s.index] and s.overlaps(seg.col, seg.end, COLUMN_SLACK)
                for s in self.lines[i]
            ):
                above = 1.0 / (seg.line - i)
                break
        return {f"{role}_same": same, f"{role}_left": left, f"{role}_above": above}

    def labels(self, seg: Segment, before: str, roles: tuple[str, ...]) -> dict[str, float]:
        """Per role, how near its nearest label stands (`{role}_near`, in any direction), and for
        the field's own role (the first) also in which direction: a few features that mean the
        same on every layout, rather than many that each layout uses differently."""
        out: dict[str, float] = {}
        before_roles = roles_of(before) if before.strip() else frozenset()
        for k, role in enumerate(roles):
            where = self.near(seg, before_roles, role)
            out[f"{role}_near"] = max(where.values())
            if k == 0:
                out.update(where)
        return out
