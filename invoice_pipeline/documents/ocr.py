"""OCR of scans (image-only PDFs, PNG, JPEG, TIFF) with RapidOCR: PP-OCRv4 on ONNX Runtime.

Why this engine: the `rapidocr-onnxruntime` 1.x wheel carries its detection, direction and
recognition models inside the package, so `pip install` (that is, `make`) is all a fresh machine
needs, with no root, no apt and no download at run time. See docs/ocr.md.

What happens to a page, and why:

1. It is rendered (PDF, 200 dpi, greyscale) or decoded (image, EXIF rotation applied), bounded in
   pixels and pages before any of it is decoded in full.
2. Normalised: greyscale, contrast stretched (a grey scan of grey paper), speckle removed by a
   median filter when the page is measurably noisy, resized into the working range.
3. Text is detected on a copy with a long side of `DET_LONG_SIDE` pixels: detecting at full
   resolution cost 3-6 s and ~1 GB of address space per page here; this copy costs ~0.7 s and
   finds the same lines. Recognition reads crops of the full-resolution page.
4. Orientation: when most detected boxes stand upright the page is turned by 90 degrees; then the
   direction classifier votes on the widest lines whether it is upside down (180). Skew of a few
   degrees is measured from the boxes' baselines and taken out of their coordinates, so lines are
   grouped correctly; each crop is perspective-corrected by the recogniser anyway.
5. Boxes become layout text in the shape `pdf.layout_text` produces (one visual line per line,
   columns apart by at least three spaces), so the same field rules read text PDFs and scans.
   Each text line keeps its page and its weakest recognition score (`OcrLayout`), which becomes
   the confidence of a field read from it.

Nothing here touches a database or the network. It runs inside the parsing sandbox like every
other parser; `engine()` lifts the sandbox worker's soft address-space limit to its hard limit
(the OCR allowance, see `sandbox.SandboxLimits.ocr_memory_mib`) and marks the worker for
retirement after this document, so the larger allowance never outlives the scan.
"""

from __future__ import annotations

import io
import math
import os
import re
import resource
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..domain.fields import Box, InvoiceFields
from ..domain.validation import KNOWN_CURRENCIES
from .errors import BadDocument, too_complex
from .limits import MAX_OCR_PAGES, MAX_SCAN_PIXELS, text_too_long
from .ocr_glyphs import restore_euro
from .reading.ocr_layout import OcrLayout, OcrLine, OcrPage

if TYPE_CHECKING:
    from PIL import Image

ENGINE = "rapidocr-onnxruntime 1.4.4 (PP-OCRv4 det/rec, mobile v2 direction classifier, bundled)"
METHOD = "ocr-rapidocr"
# PDFs are rendered at 200 dpi: the clean-scan accuracy goal is stated for it, and 7-point text
# (a return-address line) is still ~14 px tall.
RENDER_DPI = 200
# An image without a resolution in its metadata is taken to be a 200-dpi scan (for boxes only).
ASSUMED_SCAN_DPI = 200.0
DET_LONG_SIDE = 1280
# Working range of the long side: below, small text is too small for detection (a 150-dpi A4
# page is 1754 px); above (a 600-dpi photo), the crops cost memory and time and gain nothing.
WORK_MIN_LONG_SIDE = 1600
WORK_MAX_LONG_SIDE = 3508
# A page is "noisy" when this share of its pixels differs from their 3x3 median by more than 32
# grey levels: measured 0.3 % on clean and skewed 200-dpi scans, 0.9 % on speckled JPEGs.
NOISE_SHARE = 0.006
# Columns of the layout text across a page: the width of A4 in points over pdf.POINTS_PER_COLUMN.
PAGE_COLUMNS = 170
SEGMENT_GAP = "   "
# A scan of which none of these could be read is illegible (quarantined, naming them); one with
# some of them is held for a person to read the rest off the page.
KEY_FIELDS = ("invoice_number", "issue_date", "payable_total", "currency", "seller_name")
ILLEGIBLE = "illegible_scan"


@dataclass(frozen=True)
class OcrResult:
    text: str
    layout: OcrLayout
    page_count: int


# -- the engine -------------------------------------------------------------------------------------

_engine: Any = None
_engine_used = False


def engine_used() -> bool:
    """Whether this process has loaded the OCR engine (the sandbox then retires the worker)."""
    return _engine_used


def _allow_ocr_memory() -> None:
    """Lift the soft address-space limit to the hard one, where the sandbox set them apart.

    ONNX Runtime, OpenCV and NumPy map ~700 MB of address space before reading a page (resident
    is far less); the sandbox worker's general limit is set below that on purpose.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY and soft != hard:
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))


def engine() -> Any:
    """The RapidOCR engine, loaded once per process (0.3 s; the models are inside the wheel)."""
    global _engine, _engine_used
    if _engine is None:
        _allow_ocr_memory()
        _engine_used = True
        # One thread each: RLIMIT_CPU counts every thread, two cores are shared with the pipeline,
        # and thread pools reserve address space the sandbox counts.
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        import cv2
        from rapidocr_onnxruntime import RapidOCR

        cv2.setNumThreads(1)
        _engine = RapidOCR(intra_op_num_threads=1, inter_op_num_threads=1, print_verbose=False)
    return _engine


def available() -> str | None:
    """None when OCR can run here, else why not (tests say it loudly when they skip)."""
    try:
        import cv2  # noqa: F401
        import pypdfium2  # noqa: F401
        import rapidocr_onnxruntime  # noqa: F401
    except Exception as exc:  # an ImportError, or a shared library missing behind it
        return f"{type(exc).__name__}: {exc}"
    return None


# -- pages ------------------------------------------------------------------------------------------


def _too_many_pages(pages: int, max_pages: int) -> BadDocument:
    return too_complex(
        f"the scan has {pages:,} pages, above the OCR limit of {max_pages} pages per document "
        f"(documents.limits.MAX_OCR_PAGES; OCR costs up to ~6 s of CPU per page and the sandbox allows 30 s)",
        "ask the vendor for a text PDF or an e-invoice XML, or send the invoice pages alone",
    )


def _too_many_pixels(width: int, height: int) -> BadDocument:
    return too_complex(
        f"a page of the scan is {width:,} x {height:,} pixels, above the limit of {MAX_SCAN_PIXELS:,} "
        "pixels per page (documents.limits.MAX_SCAN_PIXELS)",
        "a 600-dpi A4 scan is ~35 million pixels; re-scan at 200-300 dpi",
    )


def pdf_pages(content: bytes, *, max_pages: int = MAX_OCR_PAGES) -> Iterator[Image.Image]:
    """The pages of a PDF rendered at RENDER_DPI in greyscale (smaller if a page is huge)."""
    import pypdfium2

    doc = pypdfium2.PdfDocument(content)
    try:
        count = len(doc)
        if count > max_pages:
            raise _too_many_pages(count, max_pages)
        for index in range(count):
            page = doc[index]
            try:
                width_pt, height_pt = page.get_size()
                scale = RENDER_DPI / 72
                if width_pt * height_pt * scale * scale > MAX_SCAN_PIXELS:
                    # A page is drawn at whatever size it declares (up to 200 inches): fit the budget.
                    scale = math.sqrt(MAX_SCAN_PIXELS / max(width_pt * height_pt, 1.0))
                image = page.render(scale=scale, grayscale=True).to_pil()
                image.info["dpi"] = (72 * scale, 72 * scale)
                yield image
            finally:
                page.close()
    finally:
        doc.close()


def image_pages(content: bytes, *, max_pages: int = MAX_OCR_PAGES) -> Iterator[Image.Image]:
    """The frames of a PNG, JPEG or (multi-page) TIFF, EXIF orientation applied."""
    from PIL import Image, ImageOps, ImageSequence

    # Pillow's own bomb check warns at half our limit and raises at the full one; we check the
    # declared size ourselves first and name our limit.
    Image.MAX_IMAGE_PIXELS = MAX_SCAN_PIXELS
    try:
        image = Image.open(io.BytesIO(content))
    except Image.DecompressionBombError:
        raise too_complex(
            f"the image declares more than {MAX_SCAN_PIXELS:,} pixels", "re-scan at 200-300 dpi"
        ) from None
    except Exception as exc:
        raise BadDocument(
            "unreadable_document",
            f"the image could not be decoded ({type(exc).__name__}); ask the sender to re-scan or re-export it",
        ) from None
    frames = getattr(image, "n_frames", 1)
    if frames > max_pages:
        raise _too_many_pages(frames, max_pages)
    for frame in ImageSequence.Iterator(image):
        width, height = frame.size
        if width * height > MAX_SCAN_PIXELS:
            raise _too_many_pixels(width, height)
        try:
            upright = ImageOps.exif_transpose(frame.copy())
        except Exception as exc:
            raise BadDocument(
                "unreadable_document",
                f"an image page could not be decoded ({type(exc).__name__}); ask the sender to re-scan it",
            ) from None
        yield upright


@dataclass(frozen=True)
class _Prepared:
    image: Image.Image
    denoised: bool
    points_per_pixel: float  # of the working image: for boxes in points


def normalise(image: Image.Image) -> _Prepared:
    """Greyscale, in the working size range, contrast stretched, despeckled when noisy."""
    from PIL import Image as PILImage
    from PIL import ImageChops, ImageFilter, ImageOps

    if image.mode in ("RGBA", "LA", "P"):
        # Transparent pixels of a screenshot are "no ink": flatten them onto white paper.
        rgba = image.convert("RGBA")
        paper = PILImage.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = PILImage.alpha_composite(paper, rgba)
    grey = image.convert("L")
    # A rendered PDF page carries its rendering dpi, a photo or scan its own (or none: assumed).
    dpi = float((image.info.get("dpi") or (ASSUMED_SCAN_DPI,))[0]) or ASSUMED_SCAN_DPI
    points_per_pixel = 72 / dpi
    long_side = max(grey.size)
    if long_side > WORK_MAX_LONG_SIDE or long_side < WORK_MIN_LONG_SIDE:
        target = WORK_MAX_LONG_SIDE if long_side > WORK_MAX_LONG_SIDE else WORK_MIN_LONG_SIDE
        factor = target / long_side
        points_per_pixel /= factor
        grey = grey.resize(
            (max(1, round(grey.width * factor)), max(1, round(grey.height * factor))),
            PILImage.Resampling.LANCZOS,
        )
    median = grey.filter(ImageFilter.MedianFilter(3))
    # Speckle and JPEG ringing differ from their neighbourhood's median; clean strokes mostly do not.
    diff = ImageChops.difference(grey, median).point(lambda v: 255 if v > 32 else 0)
    histogram = diff.histogram()
    noisy = histogram[255] / max(1, grey.width * grey.height) > NOISE_SHARE
    if noisy:
        grey = median
    grey = ImageOps.autocontrast(grey, cutoff=1)
    return _Prepared(grey, noisy, points_per_pixel)


# -- one page ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Word:
    x0: float
    x1: float
    yc: float
    height: float
    text: str
    score: float
    euro_by_shape: bool = False


@dataclass(frozen=True)
class _Line:
    text: str  # layout text
    score: float  # the weakest word's
    boxes: tuple[Box, ...]  # one per segment
    euro_by_shape: bool  # a word's euro sign was put back by `ocr_glyphs`


@dataclass(frozen=True)
class _PageText:
    lines: tuple[_Line, ...]
    page: OcrPage


def _detect(eng: Any, page: Any) -> list[Any]:
    """Text boxes (4 corner points, full-resolution coordinates) found on a downscaled copy."""
    import cv2
    import numpy as np

    height, width = page.shape[:2]
    factor = min(1.0, DET_LONG_SIDE / max(height, width))
    small = page if factor == 1.0 else cv2.resize(page, (round(width * factor), round(height * factor)))
    boxes, _ = eng.text_det(small)
    if boxes is None or len(boxes) == 0:
        return []
    scaled = [np.asarray(b, dtype=np.float32) / np.float32(factor) for b in boxes]
    return list(eng.sorted_boxes(np.array(scaled)))


def _edge_lengths(box: Any) -> tuple[float, float]:
    width = math.dist(box[0], box[1])
    height = math.dist(box[0], box[3])
    return width, height


def _upright_share(boxes: Sequence[Any]) -> float:
    """Share of the text (by box length) in boxes taller than wide: a page turned by 90 degrees."""
    tall = wide = 0.0
    for box in boxes:
        width, height = _edge_lengths(box)
        if height > 1.5 * width:
            tall += height
        elif width > 1.5 * height:
            wide += width
    return tall / (tall + wide) if tall + wide else 0.0


def _upside_down(eng: Any, page: Any, boxes: Sequence[Any]) -> bool:
    """The direction classifier's vote, weighted by its scores, over the widest lines."""
    widest = sorted(boxes, key=lambda b: -_edge_lengths(b)[0])[:15]
    crops = eng.get_crop_img_list(page, list(widest))
    _, votes, _ = eng.text_cls(crops)
    flipped = sum(float(score) for label, score in votes if label == "180")
    upright = sum(float(score) for label, score in votes if label == "0")
    return flipped > upright


def _skew_degrees(boxes: Sequence[Any]) -> float:
    """Median baseline angle of the clearly horizontal boxes (image y grows downwards)."""
    angles = []
    for box in boxes:
        width, height = _edge_lengths(box)
        if width > 3 * height and width > 40:
            angles.append(math.degrees(math.atan2(box[1][1] - box[0][1], box[1][0] - box[0][0])))
    return statistics.median(angles) if angles else 0.0


def read_page(number: int, image: Image.Image) -> _PageText:
    import cv2
    import numpy as np

    started = time.perf_counter()
    eng = engine()
    prepared = normalise(image)
    page = cv2.cvtColor(np.asarray(prepared.image), cv2.COLOR_GRAY2BGR)
    rotation = 0
    boxes = _detect(eng, page)
    if boxes and _upright_share(boxes) > 0.5:
        page = np.ascontiguousarray(np.rot90(page, 1))
        rotation = 90
        boxes = _detect(eng, page)
    if boxes and _upside_down(eng, page, boxes):
        page = np.ascontiguousarray(np.rot90(page, 2))
        rotation = (rotation + 180) % 360
        boxes = _detect(eng, page)
    skew = _skew_degrees(boxes)
    words: list[_Word] = []
    if boxes:
        crops = eng.get_crop_img_list(page, boxes)
        recognised, _ = eng.text_rec(crops)
        height, width = page.shape[:2]
        slope = math.tan(math.radians(skew))
        for box, crop, rec in zip(boxes, crops, recognised, strict=True):
            read, score = tidy(str(rec[0]).strip()), float(rec[1])
            text = restore_euro(read, crop)
            if not text:
                continue
            xs = [float(p[0]) for p in box]
            ys = [float(p[1]) for p in box]
            # Straighten the coordinates (not the pixels): a skewed baseline would otherwise put
            # a label and its value, 10 cm apart, on different lines.
            xc = (min(xs) + max(xs)) / 2
            yc = (min(ys) + max(ys)) / 2 - (xc - width / 2) * slope
            words.append(_Word(min(xs), max(xs), yc, _edge_lengths(box)[1], text, score, text != read))
        lines = tuple(_layout_lines(words, float(width), prepared.points_per_pixel))
    else:
        lines = ()
    info = OcrPage(
        page=number,
        rotation=rotation,
        skew_degrees=round(skew, 2),
        denoised=prepared.denoised,
        boxes=len(words),
        seconds=round(time.perf_counter() - started, 3),
    )
    return _PageText(lines, info)


_GLUED_CODE_AFTER = re.compile(r"(?<=\d)([A-Z]{3})\b")
_GLUED_CODE_BEFORE = re.compile(r"\b([A-Z]{3})(?=\d)")
_SEPARATOR_DOT = re.compile(r"\s*([·•●∙▪])\s*")
# The recogniser's alphabet is Chinese and Latin, and it spells some colons and brackets in
# their full-width forms ("N° de facture ：123"), which no label rule expects: folded to ASCII,
# one character for one, so the layout's columns stay where they were.
FULL_WIDTH_TO_ASCII = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}
# Nor has it "€" (its pound sign is the full-width "￡", folded above): a euro sign comes out as
# "∈" (no invoice prints set membership), or as a "C", an "E" or nothing, which only the glyph's
# shape tells apart (`ocr_glyphs.restore_euro`).
OCR_SUBSTITUTES = FULL_WIDTH_TO_ASCII | {ord("∈"): ord("€")}
# A small degree sign ("N° 2023-6013") is often read as "?": a question mark between an N and a
# number asks nothing.
_NUMERO_AS_QUESTION = re.compile(r"\b([Nn])\?(?=\s*\d|$)")


def tidy(text: str) -> str:
    """Put back the spaces the recogniser tends to drop where the field rules need them.

    "16,636.78GBP" is no amount to a rule that wants the number to end at a word boundary, and
    "Acme Ltd·Street 1" is no sender line without spaces around the dot. Only currency codes
    the pipeline knows are split off, so an invoice number like "INV123ABC" stays whole.
    """

    def code(m: re.Match[str], before: bool) -> str:
        found = m.group(1)
        if found not in KNOWN_CURRENCIES:
            return found
        return f"{found} " if before else f" {found}"

    text = _NUMERO_AS_QUESTION.sub(r"\1°", text.translate(OCR_SUBSTITUTES))
    text = _GLUED_CODE_AFTER.sub(lambda m: code(m, False), text)
    text = _GLUED_CODE_BEFORE.sub(lambda m: code(m, True), text)
    return _SEPARATOR_DOT.sub(r" \1 ", text)


def _layout_lines(words: Sequence[_Word], page_width: float, points_per_pixel: float) -> Iterator[_Line]:
    """Rows of words as layout text (segments apart by SEGMENT_GAP), each with its segments' boxes."""
    if not words:
        return
    typical = statistics.median(w.height for w in words)
    rows: list[list[_Word]] = []
    centres: list[float] = []
    for word in sorted(words, key=lambda w: w.yc):
        if rows and abs(word.yc - centres[-1]) < 0.5 * typical:
            rows[-1].append(word)
            centres[-1] = sum(w.yc for w in rows[-1]) / len(rows[-1])
        else:
            rows.append([word])
            centres.append(word.yc)
    for row in rows:
        row.sort(key=lambda w: w.x0)
        out = ""
        groups: list[list[_Word]] = []
        prev: _Word | None = None
        for word in row:
            if prev is not None and word.x0 - prev.x1 < 0.8 * typical:
                out += " " + word.text  # one phrase the detector cut in two
                groups[-1].append(word)
            else:
                column = int(max(0.0, word.x0) / page_width * PAGE_COLUMNS)
                if out:
                    out += SEGMENT_GAP
                out = out.ljust(column) + word.text
                groups.append([word])
            prev = word
        boxes = tuple(_box(g, points_per_pixel) for g in groups)
        yield _Line(out.rstrip(), min(w.score for w in row), boxes, any(w.euro_by_shape for w in row))


def _box(words: Sequence[_Word], points_per_pixel: float) -> Box:
    top = min(w.yc - w.height / 2 for w in words)
    bottom = max(w.yc + w.height / 2 for w in words)
    x0, x1 = min(w.x0 for w in words), max(w.x1 for w in words)
    return (
        round(x0 * points_per_pixel, 1),
        round(top * points_per_pixel, 1),
        round(x1 * points_per_pixel, 1),
        round(bottom * points_per_pixel, 1),
    )


# -- documents --------------------------------------------------------------------------------------


def ocr_pages(pages: Iterator[Image.Image], *, max_chars: int) -> OcrResult:
    texts: list[str] = []
    lines: list[OcrLine | None] = []
    infos: list[OcrPage] = []
    total = 0
    for number, image in enumerate(pages, start=1):
        page = read_page(number, image)
        infos.append(page.page)
        if texts:
            lines.append(None)  # the "\f" line between pages
        page_lines = [line.text for line in page.lines]
        lines.extend(
            OcrLine(number, round(line.score, 4), line.boxes, line.euro_by_shape) for line in page.lines
        )
        text = "\n".join(page_lines)
        total += len(text) + 3
        if total > max_chars:
            raise text_too_long(total, max_chars)
        texts.append(text)
    layout = OcrLayout(ENGINE, tuple(infos), tuple(lines))
    return OcrResult("\n\f\n".join(texts), layout, len(infos))


def ocr_pdf(content: bytes, *, max_chars: int, max_pages: int = MAX_OCR_PAGES) -> OcrResult:
    return ocr_pages(pdf_pages(content, max_pages=max_pages), max_chars=max_chars)


def ocr_image(content: bytes, *, max_chars: int, max_pages: int = MAX_OCR_PAGES) -> OcrResult:
    return ocr_pages(image_pages(content, max_pages=max_pages), max_chars=max_chars)


def nothing_read(fields: InvoiceFields) -> bool:
    """No key field could be read (or none above the confidence threshold): the scan is unusable."""
    return all(getattr(fields, name) is None for name in KEY_FIELDS)


def illegible(missing: Sequence[str], layout: OcrLayout) -> BadDocument:
    pages = ", ".join(f"page {p.page}: {p.boxes} text boxes" for p in layout.pages)
    return BadDocument(
        ILLEGIBLE,
        f"the scan could not be read well enough: {', '.join(missing)} could not be read with confidence "
        f"({pages}); ask the vendor for a clearer scan, a text PDF or an e-invoice XML, or enter it by hand",
    )
