"""The page's own amounts checked against the amounts a layout placed: a totals row it never saw,
a label of the page that says otherwise. Either holds the invoice for a person."""

from __future__ import annotations

from collections.abc import Sequence

from ..amounts import (
    Found,
    Kind,
    ends_in_amount,
)
from ..parties import LEGAL_MARKERS
from .model import COLUMN_SLACK, Page

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
