"""Whether a layout is for a page: its vendor (`layout_of_vendor`), its organisation, its fingerprint;
and the values a segment of the page holds, which learning and reading both look for."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date
from decimal import Decimal
from typing import Any

from ....domain.fields import InvoiceFields
from ....domain.identity import Identified
from ....domain.payment import seller_identifiers
from ..amounts import (
    numbers_in,
)
from ..page_values import find_dates, first_identifier, labelled_date
from ..words import Segment
from .model import (
    COLUMN_SLACK,
    FINGERPRINT_WORDS,
    Page,
    StableWord,
    ValueKind,
    VendorLayout,
    norm_id,
    norm_text,
)


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


def values_in(kind: ValueKind, text: str) -> list[tuple[int, Any]]:
    if kind == "identifier":
        return _identifiers(text)
    if kind == "date":
        return _dates(text)
    return _amounts(text)


def same_value(kind: ValueKind, got: Any, want: Any) -> bool:
    if kind == "amount":
        return isinstance(got, Decimal) and abs(got) == abs(Decimal(str(want)))
    return bool(got == want)


def inline_hits(page: Page, anchor: str, col: int | None = None) -> list[tuple[Segment, int, int]]:
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


def layout_for_org(layout: VendorLayout, org_id: str) -> bool:
    """Only an organisation's own enabled layouts read its pages (whatever a caller passes in)."""
    return layout.enabled and layout.org_id == org_id
