"""Invoice fields from a PDF text layer (or OCR output) by label heuristics.

The reading itself lives in `reading/`: values as printed (`reading.page_values`), labels and
the value after them (`reading.labels`), who the page names (`reading.seller_buyer`), the
amounts by the page's arithmetic (`reading.amounts`). This module puts their findings together,
field by field, each value with a confidence below 1.0 because layout heuristics can be fooled;
a missing field says why.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import date
from decimal import Decimal
from typing import Any

from ..domain.fields import (
    CURRENCY_FROM_VAT_COUNTRY,
    EURO_BY_SHAPE,
    EURO_CONFIRMED,
    FieldSource,
    InvoiceFields,
)
from ..domain.validation import KNOWN_CURRENCIES
from .collect import FieldCollector
from .ocr import nothing_read
from .reading.amounts import EXEMPT, Found, Resolution, find_amounts, resolve
from .reading.labels import (
    COLUMN_SLACK,
    CREDIT_NOTE_HEADING,
    CURRENCY_LABELS,
    DUE_DATE_LABELS,
    ISSUE_DATE_LABELS,
    ISSUE_EXCLUDE,
    NOT_THIS_DOC,
    NUMBER_HEADING,
    NUMBER_LABELS,
    PAYABLE_LABELS,
    PO_LABELS,
    STAMP_CONTEXT,
    Hit,
    TextDoc,
    currency_hits,
    date_under_heading,
    first_money_near,
    labelled,
    number_under_heading,
)
from .reading.number_guard import PageNumbers, why_not_a_number
from .reading.ocr_layout import MIN_FIELD_CONFIDENCE, OcrLayout
from .reading.page_values import (
    currency_of_vat_id,
    first_date,
    first_identifier,
    first_money,
    labelled_date,
    shared_currency_signs,
)
from .reading.parties import legal_form_apart
from .reading.ranker import ranked_fields, shipped_ranker
from .reading.seller_buyer import fullest_spelling, parties, seller_vat
from .reading.words import PageGeometry, TextBoxes, union

_I = re.IGNORECASE


def fields_from_text(
    text: str,
    *,
    ocr: bool = False,
    ocr_layout: OcrLayout | None = None,
    boxes: TextBoxes | None = None,
) -> InvoiceFields:
    """The hand reader's fields, then the ranker's choice for the fields it reads better
    leave-one-layout-out (issue 40; `reading.ranker`, docs/formats.md), on text PDFs and scans
    alike (`benchmarks/real_scans.py` measures it on OCR)."""
    fields = hand_fields_from_text(text, ocr=ocr, ocr_layout=ocr_layout, boxes=boxes)
    if ocr_layout is not None and nothing_read(fields):
        # Nothing on the scan reads as an invoice: it is quarantined as illegible. The ranker
        # picks among an invoice's candidates; it does not make a letter into one.
        return fields
    fields = ranked_fields(fields, text, boxes, shipped_ranker(), ocr_layout)
    if ocr_layout is not None and fields.seller_name:
        fields = replace(fields, seller_name=legal_form_apart(fields.seller_name))
    return fields


def hand_fields_from_text(
    text: str,
    *,
    ocr: bool = False,
    ocr_layout: OcrLayout | None = None,
    boxes: TextBoxes | None = None,
) -> InvoiceFields:
    """Fields by label rules, amounts by the page's arithmetic (`reading.amounts`).

    With `ocr_layout` (an OCRed scan), each field's source is its page and its confidence the OCR
    score of the line(s) it was read from; below the threshold it is null. With `boxes` (a text
    PDF's segment boxes) each field also says where on its page it was read.
    """
    page = _PageReading.of(text, ocr=ocr, ocr_layout=ocr_layout, boxes=boxes)
    doc = page.doc
    number_read = _invoice_number(doc, PageNumbers.of(text))
    number = number_read if isinstance(number_read, Hit) else None
    page.put(
        "invoice_number",
        number,
        number_read
        if isinstance(number_read, str)
        else "no 'Invoice No' / 'Rechnungsnummer' / 'Facture n°' label with a value",
    )
    _document_type(page)
    issue = _issue_date(doc, number)
    page.put("issue_date", issue, "no invoice date found")
    due = labelled(doc, DUE_DATE_LABELS, labelled_date, below=True)
    page.put("due_date", due, "no due date / payment term date found")
    resolution = _amounts(page)
    currency = _currency(doc, resolution)
    printed = None if currency is not None else _printed_currency_code(doc)
    vat = _parties(page)
    if currency is not None and _euro_by_shape(page, currency):
        currency = _euro_confirmed(currency, vat, issue)
    page_lines = "\n".join("   ".join(seg.text for seg in line) for line in doc.lines)
    shared = shared_currency_signs(page_lines) if currency is None and printed is None else {}
    page.put(
        "currency",
        currency,
        (
            "no currency code or symbol next to the amounts"
            if not shared
            else f"the amounts are printed only with {' and '.join(repr(s) for s in sorted(shared))}, "
            f"which several currencies use ({', '.join(sorted(set().union(*shared.values())))}): the "
            "vendor's usual currency once a person approved one of its invoices in it, else a person says"
        )
        if printed is None
        else f"the page's currency is {printed.value!r}, which is not a currency this pipeline takes (withdrawn or unknown)",
    )
    po = labelled(doc, PO_LABELS, first_identifier)
    page.put("po_number", po, "no purchase order reference found")
    if currency is None and printed is None and not shared and vat is not None:
        # The seller's country may stand in for a currency the page leaves out, never for one
        # it prints (issue 40: a page in a withdrawn currency was read as its country's euro;
        # issue 54: nor for a sign such as "$" or "kr" that several currencies print).
        _currency_of_sellers_country(page, vat, issue)
    return replace(page.collector.build(), amount_check=resolution.check)


@dataclass(frozen=True)
class _PageReading:
    """One page being read: its lines, where they stand, and the fields collected so far."""

    text: str
    doc: TextDoc
    geometry: PageGeometry
    collector: FieldCollector
    ocr: bool
    ocr_layout: OcrLayout | None
    # OCR text is less sure than a text layer: its confidences are scaled down.
    scale: float
    kind: str  # "ocr" or "pdf-text", the start of every source
    # The seller's, the buyer's and a credit-note heading are looked for above this line.
    top_limit: int

    @classmethod
    def of(
        cls, text: str, *, ocr: bool, ocr_layout: OcrLayout | None, boxes: TextBoxes | None
    ) -> _PageReading:
        doc = TextDoc(text, run_together=ocr)
        return cls(
            text=text,
            doc=doc,
            geometry=PageGeometry(text, boxes),
            collector=FieldCollector(default_reason="no labelled value found in the PDF text"),
            ocr=ocr,
            ocr_layout=ocr_layout,
            scale=0.8 if ocr else 1.0,
            kind="ocr" if ocr_layout else "pdf-text",
            top_limit=max(25, len(doc.lines) // 2),
        )

    def located(
        self, label: str, lines: list[int], segs: tuple[tuple[int, int], ...], confidence: float
    ) -> FieldSource:
        """The source of a value read from these lines (the box of its label's and value's segments)."""
        page = self.geometry.page(lines[0])
        box = union([self.geometry.box(line, index) for line, index in segs])
        return FieldSource(
            f"{self.kind}:page {page}:line {lines[-1] + 1}:{label!r}", confidence, None, page, box
        )

    def put(self, name: str, hit: Hit[Any] | None, reason: str) -> None:
        """The field read from `hit`, or missing for `reason`; from a scan, missing too when OCR
        was not sure of the lines it stands on."""
        if hit is None:
            self.collector.miss(name, FieldSource(self.kind, 0.0, reason))
            return
        lines = hit.lines
        if self.ocr_layout is None:
            where = self.located(hit.label, lines, hit.segs, round(hit.confidence * self.scale, 2))
            self.collector.put(name, hit.value, where)
            return
        page, confidence = self.ocr_layout.locate(lines)
        where = replace(self.located(hit.label, lines, hit.segs, round(confidence, 3)), page=page)
        if confidence < MIN_FIELD_CONFIDENCE:
            # A misread digit scores low; a value we are not sure of is not offered as one.
            self.collector.miss(
                name,
                replace(
                    where,
                    reason=f"OCR confidence {confidence:.2f} is below {MIN_FIELD_CONFIDENCE:.2f}; "
                    "not guessed: read it from the scan",
                ),
            )
        else:
            self.collector.put(name, hit.value, where)


def _invoice_number(doc: TextDoc, printed: PageNumbers) -> Hit[str] | str | None:
    """After a number label; else after the heading ("Invoice 2024-17"); else under a heading alone.

    The first value found decides: when it is no invoice number (a date, an amount, an identifier
    or a postcode printed on the page: `number_guard`), the number is left unread and the reason
    returned. Searching on would take whatever else stands near a label whose number is printed
    as a picture, and a re-sent copy would get a number of its own (issue 52)."""
    # (how to find it, whether it is a label's value: one read below a label must stand right
    # under it; a heading's block has its number a few lines down by design)
    finders: tuple[tuple[Callable[[], Hit[str] | None], bool], ...] = (
        (
            lambda: labelled(doc, NUMBER_LABELS, first_identifier, below=True, exclude_before=NOT_THIS_DOC),
            True,
        ),
        (lambda: labelled(doc, (NUMBER_HEADING,), first_identifier, confidences=(0.5,)), True),
        (lambda: number_under_heading(doc), False),
    )
    for find, under_label in finders:
        if (number := find()) is None:
            continue
        why = why_not_a_number(number.value, printed)
        if why is None and under_label:
            why = _under_another_row(doc, number)
        if why is not None:
            return (
                f"no invoice number after {number.label!r} (line {number.lines[-1] + 1}): {why}; "
                "not guessed from another value (the number may be printed as a picture)"
            )
        return number
    return None


def _under_another_row(doc: TextDoc, number: Hit[str]) -> str | None:
    """Why a value read below its label is not that label's: another row (a date's label, a
    table's header) stands between them in the label's column. With the number not printed as
    text, the search below the label reaches the item table and took a quantity for it."""
    if number.value_line is None or not number.segs:
        return None
    label_line, label_index = number.segs[0]
    label = doc.lines[label_line][label_index]
    for line in range(label_line + 1, number.value_line):
        between = [s for s in doc.lines[line] if s.overlaps(label.col, label.end, COLUMN_SLACK)]
        if between:
            return f"{number.value!r} stands below {between[0].text.strip()!r}, not below the label"
    return None


def _document_type(page: _PageReading) -> None:
    """A credit note when a credit-note heading stands near the top; an invoice otherwise."""
    doc, c = page.doc, page.collector
    credit = next(
        (s for s in doc.segs() if s.line < page.top_limit and CREDIT_NOTE_HEADING.match(s.text)), None
    )
    if credit is not None:
        c.set(
            "document_type",
            "credit_note",
            f"pdf-text:line {credit.line + 1}:{credit.text[:30]!r}",
            0.7 * page.scale,
        )
    else:
        c.set("document_type", "invoice", "pdf-text:no credit-note heading", 0.6 * page.scale)


def _issue_date(doc: TextDoc, number: Hit[str] | None) -> Hit[date] | None:
    """After a date label; else on the invoice number's line; else under the heading; else the
    page's first date that is no due, delivery or print date."""
    issue = labelled(doc, ISSUE_DATE_LABELS, labelled_date, below=True, exclude_before=ISSUE_EXCLUDE)
    if issue is None and number is not None:
        line_text = " ".join(s.text for s in doc.lines[number.line])
        if d := first_date(line_text):
            issue = Hit(d, number.line, "date on the invoice-number line", 0.6)
    issue = issue or date_under_heading(doc)
    if issue is None:
        for seg in doc.segs():
            if (
                ISSUE_EXCLUDE.search(seg.text.split(":")[0] + " ")
                or re.search(r"f[äa]llig|due|bis\b|until", seg.text, _I)
                or STAMP_CONTEXT.search(seg.text)
            ):
                continue
            if d := first_date(seg.text):
                issue = Hit(d, seg.line, "first date in the document", 0.4)
                break
    return issue


def _amount_hit(f: Found) -> Hit[Decimal]:
    lines = sorted({f.label_seg.line, f.value_seg.line})
    segs = ((f.label_seg.line, f.label_seg.index), (f.value_seg.line, f.value_seg.index))
    value_line = f.value_seg.line if f.value_seg.line != f.label_seg.line else None
    return Hit(f.amount, lines[0], f.label, round(0.9 * f.strength, 2), value_line, segs)


def _amounts(page: _PageReading) -> Resolution:
    """The payable, net and tax totals as the page's arithmetic resolves its labelled amounts."""

    def amount_source(f: Found) -> FieldSource:
        hit = _amount_hit(f)
        lines = hit.lines
        confidence = page.ocr_layout.locate(lines)[1] if page.ocr_layout is not None else hit.confidence
        return page.located(f.label, lines, hit.segs, round(confidence, 3))

    found = find_amounts(page.text, page.geometry)
    resolution = resolve(found, exempt=EXEMPT.search(page.text) is not None, source_of=amount_source)
    page.put(
        "payable_total",
        None if resolution.payable is None else _amount_hit(resolution.payable),
        "no amount labelled as due ('Amount due' / 'Zahlbetrag' / 'Net à payer') or as the gross total",
    )
    page.put(
        "net_total",
        None if resolution.net is None else _amount_hit(resolution.net),
        "no net total on the page",
    )
    if resolution.tax_found is not None:
        page.put("tax_total", _amount_hit(resolution.tax_found), "")
    elif resolution.tax is not None and resolution.check.confirmed:
        source = FieldSource(f"{page.kind}:{resolution.check.rule}", 0.8 * page.scale)
        page.collector.put("tax_total", resolution.tax, source)
    else:
        page.put("tax_total", None, "no VAT/tax total on the page")
    return resolution


def _currency(doc: TextDoc, resolution: Resolution) -> Hit[str] | None:
    """After a currency label; else printed with the payable amount; else the most frequent next
    to amounts."""
    payable = first_money_near(doc, resolution.payable)
    currency_hit: Hit[str] | None = labelled(
        doc,
        (CURRENCY_LABELS,),
        lambda t: next((m for m in re.findall(r"\b[A-Z]{3}\b", t) if m in KNOWN_CURRENCIES), None),
    )
    if currency_hit is None and payable is not None:
        currency_hit = payable
    if currency_hit is None:
        counts, first_line = currency_hits(doc)
        if counts:
            code, _ = counts.most_common(1)[0]
            currency_hit = Hit(code, first_line[code], "most frequent currency next to amounts", 0.6)
    return currency_hit


def _euro_by_shape(page: _PageReading, currency: Hit[str]) -> bool:
    """The euro the currency was read from is a sign OCR put back from its shape (`ocr_glyphs`)."""
    if page.ocr_layout is None or currency.value != "EUR":
        return False
    lines = page.ocr_layout.lines
    return any(
        0 <= i < len(lines) and (line := lines[i]) is not None and line.euro_by_shape for i in currency.lines
    )


def _euro_confirmed(currency: Hit[str], vat: Hit[str] | None, issue: Hit[date] | None) -> Hit[str]:
    """A euro told by its shape, said so in its source; confirmed when the seller's VAT country's
    currency is the euro too (else `InvoiceFields.currency_inferred_on_a_scan` holds it)."""
    why = EURO_BY_SHAPE
    if vat is not None and currency_of_vat_id(vat.value, issue.value if issue else None) == "EUR":
        why = f"{EURO_BY_SHAPE}, {EURO_CONFIRMED} {vat.value[:2].upper()}"
    return replace(currency, label=f"{currency.label} ({why})")


def _printed_currency_code(doc: TextDoc) -> Hit[str] | None:
    """A three-letter code after a currency label, whether or not it is a currency we take."""
    return labelled(doc, (CURRENCY_LABELS,), lambda t: next(iter(re.findall(r"\b[A-Z]{3}\b", t)), None))


def _parties(page: _PageReading) -> Hit[str] | None:
    """The seller's and the buyer's names and the seller's VAT id; returns the VAT id's hit."""
    doc = page.doc
    seller, buyer, footer = parties(doc, page.top_limit, len(doc.lines))
    if page.ocr and seller is not None:
        seller = fullest_spelling(doc, seller, page.ocr_layout)
    page.put("seller_name", seller, "no sender line, seller block or company name with a legal form found")
    page.put("buyer_name", buyer, "no address window or 'Bill to' / 'Käufer' / 'Client' block found")
    vat = seller_vat(doc, seller, buyer, footer)
    page.put("seller_vat_id", vat, "no VAT id (e.g. 'VAT-ID: DE123456789') found")
    return vat


def _currency_of_sellers_country(page: _PageReading, vat: Hit[str], issue: Hit[date] | None) -> None:
    """Last resort: the seller's VAT id says which country issued the invoice."""
    vat_currency = currency_of_vat_id(vat.value, issue.value if issue else None)
    if vat_currency is not None:
        source = FieldSource(
            f"{page.kind}:{CURRENCY_FROM_VAT_COUNTRY} {vat.value[:2].upper()}", 0.5 * page.scale
        )
        page.collector.put("currency", vat_currency, source)


def looks_like_invoice(text: str) -> bool:
    doc = TextDoc(text)
    return (
        labelled(doc, NUMBER_LABELS, first_identifier, below=True, exclude_before=NOT_THIS_DOC) is not None
        or labelled(doc, PAYABLE_LABELS, first_money, below=True) is not None
        or any(f.kind in ("due", "gross") for f in find_amounts(text))
    )
