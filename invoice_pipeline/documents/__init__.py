"""Pure document handling: bytes -> text -> fields. No database, no Dagster.

    extracted = extract_text(content, filename)   # raises BadDocument
    fields = extract_fields(extracted)             # raises BadDocument only when nothing is usable

The two steps are separate so the (cheap to store) ExtractedText can be re-read by improved
field extraction without fetching the original file again.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from ..domain.fields import FIELD_NAMES, InvoiceFields
from .cii import fields_from_cii
from .detect import classify_xml, sniff
from .errors import TOO_COMPLEX, BadDocument
from .extracted import ExtractedText
from .json_format import JSON_SCHEMA_PATH, decode_json_text, fields_from_json, load_invoice_json
from .limits import DEFAULT_MAX_BYTES, MAX_PDF_PAGES, MAX_TEXT_CHARS, first_unstorable, storable_text
from .ocr import KEY_FIELDS, METHOD, illegible, nothing_read, ocr_image
from .reading.ocr_layout import OcrLayout
from .reading.words import TextBoxes
from .text_fields import fields_from_text, looks_like_invoice
from .ubl import fields_from_ubl
from .xmlsafe import decoded_text, parse_xml, reparse, serialize

__all__ = [
    "DEFAULT_MAX_BYTES",
    "JSON_SCHEMA_PATH",
    "MAX_PDF_PAGES",
    "MAX_TEXT_CHARS",
    "TOO_COMPLEX",
    "BadDocument",
    "ExtractedText",
    "extract_fields",
    "extract_text",
]

# PostgreSQL's numeric does not hold an exponent in the billions ("1e999999999") or megabytes
# of digits, and nothing that large or that precise is a price: beyond these bounds the fields
# would fail to save, attempt after attempt, instead of the document being quarantined once.
MAX_AMOUNT_DIGITS = 30

NOT_AN_INVOICE_REASON = (
    "PDF has text but no invoice number and no payable total could be found; "
    "check that this is an invoice (not a delivery note, quote or letter)"
)


def extract_text(
    content: bytes,
    filename: str | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_text_chars: int = MAX_TEXT_CHARS,
    max_pdf_pages: int = MAX_PDF_PAGES,
) -> ExtractedText:
    """Detect the format by content and recover the document text (and invoice XML/JSON, if any).

    `filename` is only used in messages: extensions are not trusted. The limits bound what a
    small file can make us produce; CPU, memory and time are bounded by `documents.sandbox`.
    """
    if not content:
        raise BadDocument(
            "empty_file", "file is empty (0 bytes); the upload or mail attachment was lost, re-send it"
        )
    if len(content) > max_bytes:
        raise BadDocument(
            "too_large",
            f"file is {len(content)} bytes, above the {max_bytes}-byte limit; send the invoice without attachments",
        )
    if not content.strip():
        raise BadDocument("empty_file", "file contains only whitespace; re-send the actual invoice")
    kind = sniff(content)
    if kind == "xml":
        root = parse_xml(content)
        fmt = classify_xml(root)
        return ExtractedText(fmt, decoded_text(content, root), serialize(root), "xml")
    if kind == "json":
        text = decode_json_text(content)
        load_invoice_json(text)
        return ExtractedText("json", text, text, "json")
    if kind == "image":
        scan = ocr_image(content, max_chars=max_text_chars)
        if not scan.text.replace("\f", "").strip():
            raise BadDocument("no_text_layer", "OCR found no text in the image; is it a blank scan?")
        # Whether it is an invoice is decided from the fields (illegible_scan names what is
        # missing), after this expensive step has been saved.
        return ExtractedText(
            "image", storable_text(scan.text), scan.layout.to_structured(), METHOD, scan.page_count
        )
    # Imported on the first PDF: pdfplumber and pypdf cost 0.3 s to import, which every command
    # and every document sandbox paid, though a batch of XML invoices never opens a PDF.
    from .pdf import embedded_invoice_xml, open_pdf, text_layer

    reader = open_pdf(content, max_pages=max_pdf_pages)
    embedded = embedded_invoice_xml(reader, max_bytes=max_bytes)
    page_count = len(reader.pages)
    if embedded is not None:
        boxes: str | None = None
        try:
            # The XML is read; OCRing a scanned visual layer would buy nothing.
            layer = text_layer(content, max_chars=max_text_chars, ocr=False)
            text, boxes = layer.text, layer.structured
        except BadDocument as exc:
            # The XML is the legal invoice; an unreadable visual layer does not make it unusable.
            # An oversized one is still a bomb, though, and says so.
            if exc.code == TOO_COMPLEX:
                raise
            text = ""
        return ExtractedText(
            "facturx-pdf",
            text,
            serialize(embedded.root),
            f"pdf-embedded-xml:{embedded.name}",
            page_count,
            page_boxes=boxes,
        )
    layer = text_layer(content, max_chars=max_text_chars)
    if not layer.method.startswith("ocr") and not looks_like_invoice(layer.text):
        raise BadDocument("not_an_invoice", NOT_AN_INVOICE_REASON)
    return ExtractedText("pdf", layer.text, layer.structured, layer.method, layer.page_count)


def extract_fields(extracted: ExtractedText, *, compare_page: bool = True) -> InvoiceFields:
    """Fields with provenance; missing ones are None with FieldSource.reason set.

    A hybrid PDF's fields are its XML's; with `compare_page`, the key fields its visible page
    prints differently are kept beside them (`page_witness`, issue 55).
    """
    fields = _fields(extracted)
    _check_storable(fields)
    if compare_page and extracted.format == "facturx-pdf":
        from .page_witness import compare_page as page_disagreements

        fields = replace(fields, page_disagreements=page_disagreements(fields, extracted))
    return fields


def _check_storable(fields: InvoiceFields) -> None:
    """Refuse values no invoice has and the database could not store (a retry would not help)."""
    for name in FIELD_NAMES:
        value = getattr(fields, name)
        if isinstance(value, str) and (ch := first_unstorable(value)) is not None:
            what = "NUL" if ch == "\x00" else "an unpaired surrogate"
            raise BadDocument(
                "unstorable_character",
                f"{name} contains U+{ord(ch):04X} ({what}; {fields.sources[name].source}), which no "
                "invoice field can hold and the database cannot store; the file is damaged or crafted: "
                "ask the sender to re-export it",
            )
    for name in ("net_total", "tax_total", "payable_total"):
        amount: Decimal | None = getattr(fields, name)
        if amount is None or not amount.is_finite() or amount.is_zero():
            continue
        digits = len(amount.as_tuple().digits)
        if abs(amount.adjusted()) >= MAX_AMOUNT_DIGITS or digits > 2 * MAX_AMOUNT_DIGITS:
            raise BadDocument(
                "amount_out_of_range",
                f"{name} is out of range (magnitude 10^{amount.adjusted():,}, {digits:,} digits; "
                f"{fields.sources[name].source}); no invoice amount looks like that, check the file",
            )


def _fields(extracted: ExtractedText) -> InvoiceFields:
    fmt = extracted.format
    if fmt in ("ubl", "cii", "facturx-pdf"):
        if not extracted.structured:
            raise BadDocument(
                "unsupported_format", f"{fmt} document has no structured XML to read fields from"
            )
        root = reparse(extracted.structured)
        kind = classify_xml(root)
        return fields_from_ubl(root) if kind == "ubl" else fields_from_cii(root)
    if fmt == "json":
        return fields_from_json(extracted.structured or extracted.text)
    if fmt in ("pdf", "image"):
        layout = (
            OcrLayout.from_structured(extracted.structured) if extracted.method.startswith("ocr") else None
        )
        # A text PDF stores its segment boxes, a scan's OCR layout has them per line; an older
        # stored text has none and reads without.
        boxes = layout.text_boxes() if layout is not None else TextBoxes.from_structured(extracted.structured)
        fields = fields_from_text(
            extracted.text, ocr=extracted.method.startswith("ocr"), ocr_layout=layout, boxes=boxes
        )
        if layout is not None:
            # A scan of which no key field could be read (or none above the confidence threshold)
            # is unusable: quarantined as illegible. One missing some of them is a legible page:
            # validation holds it for a person, who reads them off the page (issue 37).
            if nothing_read(fields):
                raise illegible(list(KEY_FIELDS), layout)
            return fields
        if fields.invoice_number is None and fields.payable_total is None:
            raise BadDocument("not_an_invoice", NOT_AN_INVOICE_REASON)
        return fields
    raise BadDocument("unsupported_format", f"unknown extracted format {fmt!r}")
