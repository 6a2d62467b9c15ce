"""Reading PDFs: the embedded e-invoice XML when there is one, else a layout-preserving text layer."""

from __future__ import annotations

import io
import logging
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pdfplumber
import pypdf
from lxml import etree

from .detect import classify_xml
from .errors import BadDocument
from .xmlsafe import parse_xml, serialize

log = logging.getLogger(__name__)

# Attachment names of the hybrid standards, most specific first (Factur-X, ZUGFeRD 2 / 1, XRechnung).
_PREFERRED_XML = ("factur-x.xml", "zugferd-invoice.xml", "xrechnung.xml")

# Column separator in the rendered text layer; text heuristics split segments on it.
SEGMENT_GAP = "   "
# Small enough that 7-pt prose fits, so table columns further right keep their alignment.
POINTS_PER_COLUMN = 3.5
OCR_TIMEOUT_S = 120


@dataclass(frozen=True)
class EmbeddedXml:
    name: str
    root: etree._Element


@dataclass(frozen=True)
class PdfText:
    text: str
    page_count: int
    method: str


def open_pdf(content: bytes) -> pypdf.PdfReader:
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
        _ = len(reader.pages)
    except BadDocument:
        raise
    except Exception as exc:  # pypdf raises many unrelated types on damaged input
        raise BadDocument(
            "corrupt_pdf", f"PDF structure is damaged ({type(exc).__name__}); ask the sender to re-export it"
        ) from None
    return reader


def embedded_invoice_xml(reader: pypdf.PdfReader) -> EmbeddedXml | None:
    """The hybrid-invoice XML, parsed with the hardened parser.

    factur-x's get_xml_from_pdf parses attachments with lxml's default parser before we could
    screen them, so the attachments are read here with pypdf and only ever parsed safely.
    """
    try:
        attachments = [(a.name, a.content) for a in reader.attachment_list]
    except Exception as exc:  # a broken attachment tree must not hide the text layer
        log.info("cannot list PDF attachments: %s", exc)
        return None
    ranked = sorted(
        (a for a in attachments if a[0].lower().endswith(".xml") and a[1]),
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


def _line_text(words: list[dict[str, Any]]) -> str:
    words = sorted(words, key=lambda w: w["x0"])
    segments: list[tuple[float, list[str]]] = []
    prev_x1: float | None = None
    for w in words:
        size = float(w.get("size") or 10.0)
        if prev_x1 is None or w["x0"] - prev_x1 > max(1.5 * size, 8.0):
            segments.append((w["x0"], [w["text"]]))
        else:
            segments[-1][1].append(w["text"])
        prev_x1 = w["x1"]
    out = ""
    for x0, parts in segments:
        col = int(x0 / POINTS_PER_COLUMN)
        if out:
            out += SEGMENT_GAP
        out = out.ljust(col)
        out += " ".join(parts)
    return out.rstrip()


def layout_text(pdf: pdfplumber.PDF) -> str:
    """Text with one line per visual line and columns kept apart by >= 3 spaces.

    Plain text extraction glues the sender block and the address window into one line; the
    field heuristics need to know which words belong together.
    """
    pages: list[str] = []
    for page in pdf.pages:
        words = page.extract_words(extra_attrs=["size"], keep_blank_chars=False, use_text_flow=False)
        words.sort(key=lambda w: (w["top"], w["x0"]))
        lines: list[list[dict[str, Any]]] = []
        line_top: float | None = None
        for w in words:
            if line_top is None or w["top"] - line_top > 3.0:
                lines.append([w])
                line_top = w["top"]
            else:
                lines[-1].append(w)
        pages.append("\n".join(_line_text(line) for line in lines))
    return "\n\f\n".join(pages)


def text_layer(content: bytes) -> PdfText:
    try:
        with pdfplumber.open(io.BytesIO(content), password="") as pdf:
            text = layout_text(pdf)
            count = len(pdf.pages)
    except BadDocument:
        raise
    except Exception as exc:  # pdfminer raises many unrelated types on damaged input
        raise BadDocument(
            "corrupt_pdf",
            f"PDF text could not be read ({type(exc).__name__}); ask the sender to re-export it",
        ) from None
    if text.replace("\f", "").strip():
        return PdfText(text, count, "pdf-text-layer")
    ocr = ocr_text(content)
    if ocr is not None and ocr.strip():
        return PdfText(ocr, count, "ocr-tesseract")
    if ocr is not None:
        raise BadDocument("no_text_layer", "PDF has no text layer and OCR found no text; is it a blank scan?")
    raise BadDocument(
        "needs_ocr",
        "PDF is a scan without a text layer and OCR (tesseract + pdftoppm) is not installed; "
        "install them or ask the vendor for a text PDF or an e-invoice XML",
    )


def ocr_text(content: bytes) -> str | None:
    """OCR via pdftoppm + tesseract when both are on PATH; None when OCR is unavailable."""
    pdftoppm, tesseract = shutil.which("pdftoppm"), shutil.which("tesseract")
    if not pdftoppm or not tesseract:
        return None
    with tempfile.TemporaryDirectory(prefix="invoice-ocr-") as tmp:
        src = Path(tmp) / "in.pdf"
        src.write_bytes(content)
        try:
            subprocess.run(
                [pdftoppm, "-r", "300", "-png", str(src), str(Path(tmp) / "page")],
                check=True,
                capture_output=True,
                timeout=OCR_TIMEOUT_S,
            )
            texts = []
            for image in sorted(Path(tmp).glob("page*.png")):
                done = subprocess.run(
                    [tesseract, str(image), "stdout", "--psm", "4"],
                    check=True,
                    capture_output=True,
                    timeout=OCR_TIMEOUT_S,
                )
                texts.append(done.stdout.decode("utf-8", errors="replace"))
        except (subprocess.SubprocessError, OSError) as exc:
            raise BadDocument(
                "needs_ocr", f"OCR failed ({type(exc).__name__}); process this scan manually"
            ) from None
    # tesseract separates layout columns with runs of spaces only sometimes; keep lines as-is.
    return "\n\f\n".join(texts)


def embedded_structured(embedded: EmbeddedXml) -> str:
    return serialize(embedded.root)
