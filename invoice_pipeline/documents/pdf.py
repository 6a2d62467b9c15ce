"""Reading PDFs: the embedded e-invoice XML when there is one, else a layout-preserving text layer,
else (a scan) OCR (`documents.ocr`)."""

from __future__ import annotations

import io
import logging
import math
import re
from dataclasses import dataclass
from typing import Any

import pdfplumber
import pypdf
from lxml import etree
from pypdf.errors import LimitReachedError
from pypdf.generic import ArrayObject, DictionaryObject, IndirectObject, NameObject

from .detect import classify_xml
from .errors import BadDocument, resource_error, too_complex
from .limits import DEFAULT_MAX_BYTES, MAX_PDF_PAGES, MAX_TEXT_CHARS, storable_text, text_too_long
from .ocr import METHOD, ocr_pdf
from .reading.words import TextBoxes, union
from .xmlsafe import parse_xml

log = logging.getLogger(__name__)

# Attachment names of the hybrid standards, most specific first (Factur-X, ZUGFeRD 2 / 1, XRechnung).
_PREFERRED_XML = ("factur-x.xml", "zugferd-invoice.xml", "xrechnung.xml")

# Column separator in the rendered text layer; text heuristics split segments on it.
SEGMENT_GAP = "   "
# Small enough that 7-pt prose fits, so table columns further right keep their alignment.
POINTS_PER_COLUMN = 3.5
# The largest page PDF allows (200 inches at UserUnit 1). Text placed beyond the page (x0 in the
# millions) is drawn at its edge: padding to the real x0 turned a 1 kB file into 100 MB of spaces.
MAX_PAGE_POINTS = 14_400.0
# Containers visited when looking for active content; an invoice has a few thousand.
MAX_PDF_OBJECTS = 200_000

# Keys and action types that make a PDF run something when a person opens the original.
_ACTIVE_KEYS = {"/JS": "JavaScript", "/JavaScript": "JavaScript", "/Launch": "a Launch action"}
_ACTIVE_ACTIONS = {"/JavaScript": "JavaScript", "/Launch": "a Launch action"}
ACTIVE_CONTENT_ADVICE = (
    "invoices never need it and it runs when a person opens the file in a PDF viewer; "
    "ask the vendor for a plain PDF or an e-invoice XML, and do not open this original"
)


@dataclass(frozen=True)
class EmbeddedXml:
    name: str
    root: etree._Element


@dataclass(frozen=True)
class PdfText:
    text: str
    page_count: int
    method: str
    # For OCR: the per-line page and confidence (ocr.OcrLayout JSON); for a text layer, the
    # boxes of its segments (`TextBoxes` JSON), so a field can say where on the page it is.
    structured: str | None = None


def open_pdf(content: bytes, *, max_pages: int = MAX_PDF_PAGES) -> pypdf.PdfReader:
    # A missing %%EOF marker means the upload or mail transfer was cut off; pypdf would otherwise
    # silently "repair" the file and we would read half an invoice.
    if b"%%EOF" not in content[-2048:]:
        raise BadDocument(
            "corrupt_pdf", "PDF is truncated (no end-of-file marker); ask the sender to re-send it"
        )
    try:
        reader = pypdf.PdfReader(io.BytesIO(content), strict=False)
        if reader.is_encrypted:
            # Owner-password-only PDFs (print/copy restrictions) open with an empty user password.
            try:
                ok = bool(reader.decrypt(""))
            except Exception:  # any crypto failure means we cannot read it
                ok = False
            if not ok:
                raise BadDocument(
                    "encrypted_pdf", "PDF is password-protected; ask the vendor for an unprotected copy"
                )
        pages = len(reader.pages)
        if pages > max_pages:
            raise too_complex(
                f"PDF has {pages:,} pages, above the per-document limit of {max_pages:,} "
                "(DocumentReader.max_pdf_pages)",
                "send the invoice without appended documents, or as an e-invoice XML",
            )
        active = active_content(reader)
    except BadDocument:
        raise
    except Exception as exc:  # pypdf raises many unrelated types on damaged input
        raise _pdf_error(exc, "PDF structure is damaged") from None
    if active is not None:
        raise BadDocument("active_content", f"PDF contains {active}; {ACTIVE_CONTENT_ADVICE}")
    return reader


def _pdf_error(exc: Exception, what: str) -> BadDocument:
    """The BadDocument for an exception a PDF library raised on this input."""
    limit = resource_error(exc)
    if isinstance(limit, MemoryError):
        raise limit  # the sandbox reports which bound was hit; this is not damage
    if isinstance(limit, RecursionError):
        return too_complex(
            "PDF objects are nested too deeply to read", "ask the sender to re-export the invoice"
        )
    if isinstance(exc, LimitReachedError):
        return too_complex(
            f"PDF exceeds a safety limit of the PDF reader ({exc})",
            "it is probably a decompression bomb; ask the sender to re-export the invoice",
        )
    return BadDocument("corrupt_pdf", f"{what} ({type(exc).__name__}); ask the sender to re-export it")


def active_content(reader: pypdf.PdfReader) -> str | None:
    """What in the PDF would run when opened (JavaScript, a Launch action), if anything.

    We never execute it, but the original is kept and shown to people, who open it in a viewer.
    Walks every container reachable from the catalog, resolving each object once.
    """
    stack: list[object] = [reader.trailer.raw_get("/Root")]
    seen: set[tuple[int, int]] = set()
    visited = 0
    while stack:
        obj = stack.pop()
        if isinstance(obj, IndirectObject):
            ref = (obj.idnum, obj.generation)
            if ref in seen:
                continue
            seen.add(ref)
            try:
                obj = obj.get_object()
            except Exception as exc:  # a dangling reference is not active content
                if resource_error(exc) is not None:
                    raise
                continue
        if not isinstance(obj, (DictionaryObject, ArrayObject)):
            continue
        visited += 1
        if visited > MAX_PDF_OBJECTS:
            raise too_complex(
                f"PDF has more than {MAX_PDF_OBJECTS:,} objects",
                "an invoice has a few thousand; re-export it",
            )
        if isinstance(obj, ArrayObject):
            stack.extend(obj)
            continue
        for key, value in obj.items():
            if key in _ACTIVE_KEYS:
                return _ACTIVE_KEYS[key]
            if key == "/S" and isinstance(value, NameObject) and value in _ACTIVE_ACTIONS:
                return _ACTIVE_ACTIONS[str(value)]
            stack.append(value)
    return None


def embedded_invoice_xml(
    reader: pypdf.PdfReader, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> EmbeddedXml | None:
    """The hybrid-invoice XML, parsed with the hardened parser.

    factur-x's get_xml_from_pdf parses attachments with lxml's default parser before we could
    screen them, so the attachments are read here with pypdf and only ever parsed safely. Only
    XML attachments are decompressed at all (an attached archive could be a bomb), each bounded
    by the document size limit.
    """
    try:
        listed = [a for a in reader.attachment_list if a.name.lower().endswith(".xml")]
    except Exception as exc:  # a broken attachment tree must not hide the text layer
        if resource_error(exc) is not None:
            raise
        log.info("cannot list PDF attachments: %s", exc)
        return None
    attachments: list[tuple[str, bytes]] = []
    for a in listed:
        try:
            data = a.content
        except LimitReachedError:
            data = None
        except Exception as exc:  # one damaged attachment must not hide the others
            if resource_error(exc) is not None:
                raise
            log.info("cannot read PDF attachment %s: %s", a.name, exc)
            continue
        if data is None or len(data) > max_bytes:
            raise too_complex(
                f"the attached {a.name!r} decompresses to more than {max_bytes:,} bytes, the document size limit",
                "it is probably a decompression bomb; ask the sender to re-export the invoice",
            )
        attachments.append((a.name, data))
    ranked = sorted(
        (a for a in attachments if a[1]),
        key=lambda a: (
            _PREFERRED_XML.index(a[0].lower()) if a[0].lower() in _PREFERRED_XML else len(_PREFERRED_XML)
        ),
    )
    for name, data in ranked:
        try:
            root = parse_xml(data)
            classify_xml(root)
        except BadDocument as exc:
            if exc.code == "xml_entities_forbidden":
                raise
            log.info("attachment %s is not a usable invoice XML: %s", name, exc.reason)
            continue
        return EmbeddedXml(name, root)
    return None


def _column(x0: float, width: float) -> int:
    """Where a word starts in the layout text, clamped to the page (and to the largest page)."""
    x = x0 if math.isfinite(x0) else width
    return int(min(max(x, 0.0), width) / POINTS_PER_COLUMN)


def _segments(words: list[dict[str, Any]], width: float) -> list[list[dict[str, Any]]]:
    """The words of one line grouped into segments, left to right: a gap wider than 1.5 times
    the font size starts a new one. The text and the boxes are both made from these groups, so a
    box always belongs to the segment it is stored beside."""
    words = sorted(words, key=lambda w: w["x0"] if math.isfinite(w["x0"]) else width)
    segments: list[list[dict[str, Any]]] = []
    prev_x1: float | None = None
    for w in words:
        size = float(w.get("size") or 10.0)
        if prev_x1 is None or w["x0"] - prev_x1 > max(1.5 * size, 8.0):
            segments.append([w])
        else:
            segments[-1].append(w)
        prev_x1 = w["x1"]
    return segments


def _line_text(words: list[dict[str, Any]], width: float = MAX_PAGE_POINTS) -> str:
    out = ""
    for segment in _segments(words, width):
        col = _column(segment[0]["x0"], width)
        if out:
            out += SEGMENT_GAP
        out = out.ljust(col)
        out += " ".join(w["text"] for w in segment)
    return out.rstrip()


# Boxes are kept for at most this many segments (a few thousand per invoice page): the stored
# geometry stays a fraction of the bounded text, and a pathological file simply has no boxes.
MAX_BOXED_SEGMENTS = 20_000


def layout_text(pdf: pdfplumber.PDF, *, max_chars: int = MAX_TEXT_CHARS) -> str:
    """The layout text alone (see `layout_text_and_boxes`)."""
    return layout_text_and_boxes(pdf, max_chars=max_chars)[0]


# A font whose name says it is heavier than regular ("Helvetica-Bold", "Lato-Black", "Inter-SemiBold").
_BOLD_FONT = re.compile(r"bold|black|heavy", re.IGNORECASE)


def _segment_boxes(
    words: list[dict[str, Any]], width: float
) -> list[tuple[tuple[float, float, float, float], float]]:
    """The box and the bold share (of its characters, by font name) of each segment `_line_text`
    makes of these words, in the same order."""
    out = []
    for segment in _segments(words, width):
        box = union([_word_box(w) for w in segment])
        assert box is not None
        chars = [c for w in segment for c in w.get("chars", ())]
        bold = (
            sum(1 for c in chars if _BOLD_FONT.search(str(c.get("fontname", "")))) / len(chars)
            if chars
            else 0.0
        )
        out.append(((round(box[0], 1), round(box[1], 1), round(box[2], 1), round(box[3], 1)), round(bold, 2)))
    return out


def _word_box(w: dict[str, Any]) -> tuple[float, float, float, float]:
    box = (float(w["x0"]), float(w["top"]), float(w["x1"]), float(w["bottom"]))
    return box if all(math.isfinite(v) for v in box) else (0.0, 0.0, 0.0, 0.0)


def layout_text_and_boxes(
    pdf: pdfplumber.PDF, *, max_chars: int = MAX_TEXT_CHARS
) -> tuple[str, TextBoxes | None]:
    """Text with one line per visual line and columns kept apart by >= 3 spaces.

    Plain text extraction glues the sender block and the address window into one line; the
    field heuristics need to know which words belong together. Columns are clamped to the page
    and the whole text to `max_chars` (BadDocument too_complex beyond it), checked line by line
    so an oversized text is never built. The boxes carry each segment's bold share.
    """
    pages: list[str] = []
    boxes: list[list[tuple[tuple[float, float, float, float], float]]] | None = []
    total = 0
    segments = 0
    for page_index, page in enumerate(pdf.pages):
        if page_index and boxes is not None:
            boxes.append([])  # the "\f" line between pages
        width = float(page.width) if math.isfinite(page.width) and page.width > 0 else MAX_PAGE_POINTS
        width = min(width, MAX_PAGE_POINTS)
        words = page.extract_words(
            extra_attrs=["size"], keep_blank_chars=False, use_text_flow=False, return_chars=True
        )
        words.sort(
            key=lambda w: (
                w["top"] if math.isfinite(w["top"]) else 0.0,
                w["x0"] if math.isfinite(w["x0"]) else width,
            )
        )
        lines: list[list[dict[str, Any]]] = []
        line_top: float | None = None
        for w in words:
            if line_top is None or not w["top"] - line_top <= 3.0:
                lines.append([w])
                line_top = w["top"]
            else:
                lines[-1].append(w)
        rendered: list[str] = []
        for line in lines:
            text = _line_text(line, width)
            total += len(text) + 1
            if total > max_chars:
                raise text_too_long(total, max_chars)
            rendered.append(text)
            if boxes is not None:
                line_boxes = _segment_boxes(line, width)
                segments += len(line_boxes)
                boxes = None if segments > MAX_BOXED_SEGMENTS else boxes
                if boxes is not None:
                    boxes.append(line_boxes)
        if not lines and boxes is not None:
            boxes.append([])  # an empty page is still one (empty) line of the text
        pages.append("\n".join(rendered))
        # pdfplumber caches every page's objects on the PDF; without this a long file holds all
        # of them at once (~15 MB per dense page).
        page.close()
    if not boxes:
        return "\n\f\n".join(pages), None
    return "\n\f\n".join(pages), TextBoxes(
        tuple(tuple(b for b, _ in line) for line in boxes), tuple(tuple(w for _, w in line) for line in boxes)
    )


def text_layer(content: bytes, *, max_chars: int = MAX_TEXT_CHARS, ocr: bool = True) -> PdfText:
    """The text layer; for a scan (no text), OCR unless `ocr` is False (then the text is empty)."""
    try:
        with pdfplumber.open(io.BytesIO(content), password="") as pdf:
            text, boxes = layout_text_and_boxes(pdf, max_chars=max_chars)
            count = len(pdf.pages)
    except BadDocument:
        raise
    except Exception as exc:  # pdfminer raises many unrelated types on damaged input
        raise _pdf_error(exc, "PDF text could not be read") from None
    if text.replace("\f", "").strip():
        structured = boxes.to_structured() if boxes is not None else None
        return PdfText(storable_text(text), count, "pdf-text-layer", structured)
    if not ocr:
        return PdfText("", count, "pdf-text-layer")
    # No text layer: a scan. OCR is the expensive step (seconds per page), which is why its
    # result is saved as the extract_text checkpoint like any other text.
    result = ocr_pdf(content, max_chars=max_chars)
    if not result.text.replace("\f", "").strip():
        raise BadDocument(
            "no_text_layer", "PDF has no text layer and OCR found no text on it; is it a blank scan?"
        )
    return PdfText(storable_text(result.text), result.page_count, METHOD, result.layout.to_structured())
