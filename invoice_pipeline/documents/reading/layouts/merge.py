"""A layout's reading merged into the template-free one (`fields_with_layouts`), a layout in shadow
compared only (`shadow_reading`), and the entry from a stored text (`apply_layouts`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from ....domain.fields import FieldSource, InvoiceFields
from ....domain.identity import Identified
from ....domain.review import SHADOW_SOURCE
from ....domain.validation import KNOWN_CURRENCIES
from ...extracted import ExtractedText
from ..amounts import (
    EXEMPT,
    Found,
    Resolution,
    find_amounts,
    resolve,
)
from ..ocr_layout import MIN_FIELD_CONFIDENCE, OcrLayout
from ..words import TextBoxes, union
from .match import layout_for_org
from .model import AMOUNT_ROLES, ANCHORED_FIELDS, LAYOUT_STRENGTH, Page, VendorLayout
from .read import LayoutRead, ReadValue, read_with_layout
from .totals import labels_disagreeing, unexplained_amounts


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
