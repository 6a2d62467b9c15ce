"""Scans the project makes itself: generated invoices rendered to images, then degraded.

Each sample invoice (and the visual layer of its Factur-X form) is rendered to pixels with PDFium,
degraded the way real scans are (turned, skewed, low resolution, speckled and JPEG-compressed,
grey paper), and saved as an image-only PDF, PNG, JPEG or TIFF. Everything is a function of the
seed, and each scan keeps the generator's ground truth, so OCR accuracy can be measured per
degradation (`benchmarks/ocr_accuracy.py`) and the demo can include scans.
"""

from __future__ import annotations

import io
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..domain.fields import InvoiceFields
from .drawing import InvoiceDrawer
from .render import SampleInvoice, facturx_pdf, invoice_pdf

if TYPE_CHECKING:
    from PIL import Image

# name -> (file kind, render dpi). Each input kind the pipeline accepts appears at least once.
DEGRADATIONS: dict[str, tuple[str, int]] = {
    "clean": ("pdf", 200),
    "rotated_90": ("png", 200),
    "rotated_180": ("pdf", 200),
    "rotated_270": ("tiff", 200),
    "skewed": ("jpeg", 200),
    "low_resolution": ("pdf", 150),
    "noisy": ("jpeg", 200),
    "greyscale": ("png", 200),
}
EXTENSIONS = {"pdf": "pdf", "png": "png", "jpeg": "jpg", "tiff": "tif"}


@dataclass(frozen=True)
class ScanSample:
    name: str
    degradation: str
    kind: str
    content: bytes
    invoice: SampleInvoice
    source_format: str  # "pdf" or "facturx-pdf": which rendering was scanned

    @property
    def expected(self) -> InvoiceFields:
        return self.invoice.to_fields()


def render_pages(pdf: bytes, dpi: int) -> list[Image.Image]:
    """Every page of a PDF as an RGB image at `dpi` (what a scanner would see)."""
    import pypdfium2

    doc = pypdfium2.PdfDocument(pdf)
    try:
        return [doc[i].render(scale=dpi / 72).to_pil().convert("RGB") for i in range(len(doc))]
    finally:
        doc.close()


def degrade(image: Image.Image, degradation: str, rng: random.Random) -> Image.Image:
    """One page as a scanner or a phone would deliver it (`rng` draws angles and noise)."""
    from PIL import Image as PILImage
    from PIL import ImageFilter

    white = (255, 255, 255)
    if degradation in ("clean", "low_resolution"):
        return image
    if degradation.startswith("rotated_"):
        # PIL turns counter-clockwise; a page fed in sideways is turned clockwise.
        return image.rotate(-int(degradation.split("_")[1]), expand=True)
    if degradation == "skewed":
        angle = rng.uniform(1.5, 4.0) * rng.choice((-1, 1))
        return image.rotate(angle, resample=PILImage.Resampling.BICUBIC, expand=True, fillcolor=white)
    if degradation == "noisy":
        angle = rng.uniform(0.3, 1.0) * rng.choice((-1, 1))
        turned = image.rotate(angle, resample=PILImage.Resampling.BICUBIC, expand=True, fillcolor=white)
        grey = turned.convert("L")
        pixels = grey.load()
        assert pixels is not None
        width, height = grey.size
        # Speckle: dust and toner dots, ~0.4 % of the pixels, dark and light.
        for _ in range(width * height // 250):
            x, y = rng.randrange(width), rng.randrange(height)
            pixels[x, y] = 0 if rng.random() < 0.6 else 255
        return grey.filter(ImageFilter.GaussianBlur(0.4)).convert("RGB")
    if degradation == "greyscale":
        grey = image.convert("L")
        # Grey recycled paper and a weak toner: ink ~70, paper ~200.
        return grey.point(lambda v: 70 + v * 130 // 255).filter(ImageFilter.GaussianBlur(0.5))
    raise ValueError(f"unknown degradation {degradation!r}")


def encode(pages: Sequence[Image.Image], kind: str, dpi: int, *, jpeg_quality: int = 85) -> bytes:
    """Pages as an image-only PDF, PNG (first page), JPEG (first page) or multi-page TIFF."""
    out = io.BytesIO()
    first, rest = pages[0], list(pages[1:])
    if kind == "pdf":
        first.save(out, "PDF", resolution=float(dpi), save_all=True, append_images=rest)
    elif kind == "png":
        first.save(out, "PNG", dpi=(dpi, dpi), optimize=False)
    elif kind == "jpeg":
        first.convert("RGB").save(out, "JPEG", quality=jpeg_quality, dpi=(dpi, dpi))
    elif kind == "tiff":
        first.save(out, "TIFF", compression="tiff_deflate", dpi=(dpi, dpi), save_all=True, append_images=rest)
    else:
        raise ValueError(f"unknown scan kind {kind!r}")
    return out.getvalue()


def scan_invoice(
    inv: SampleInvoice,
    degradation: str,
    rng: random.Random,
    *,
    lang: str = "en",
    style: int = 0,
    facturx: bool = False,
    kind: str | None = None,
    first_page_only: bool = False,
) -> bytes:
    """One invoice, rendered (as its PDF, or the visual layer of its Factur-X), scanned, degraded."""
    file_kind, dpi = DEGRADATIONS[degradation]
    source = facturx_pdf(inv, lang) if facturx else invoice_pdf(inv, lang, style=style)
    rendered = render_pages(source, dpi)
    # The generated PDF's second page holds only its footer; the benchmark OCRs the first alone.
    pages = [degrade(page, degradation, rng) for page in (rendered[:1] if first_page_only else rendered)]
    # A noisy scan is also a badly compressed one: quality 25-40 leaves visible JPEG artefacts.
    quality = rng.randint(25, 40) if degradation == "noisy" else 85
    return encode(pages, kind or file_kind, dpi, jpeg_quality=quality)


def draw_invoice(seed: int) -> SampleInvoice:
    """One generated invoice (the generator's drawing, nothing written)."""
    return InvoiceDrawer(seed).invoice()


def scan_corpus(
    count: int,
    *,
    seed: int = 0,
    degradations: Sequence[str] = tuple(DEGRADATIONS),
    first_page_only: bool = False,
) -> list[ScanSample]:
    """`count` generated invoices, each scanned with every degradation (seeded, reproducible).

    Every fourth invoice is scanned from the visual layer of its Factur-X form; the rest from the
    plain PDF in both of its styles, in the seller's language (English, German, French).
    """
    builder = InvoiceDrawer(seed)
    rng = random.Random(seed)
    samples: list[ScanSample] = []
    for i in range(count):
        inv = builder.invoice()
        lang = builder.lang(inv)
        facturx = i % 4 == 3
        style = rng.randint(0, 1)
        for degradation in degradations:
            kind, _ = DEGRADATIONS[degradation]
            content = scan_invoice(
                inv,
                degradation,
                rng,
                lang=lang,
                style=style,
                facturx=facturx,
                first_page_only=first_page_only,
            )
            name = f"{i:03d}_{degradation}.{EXTENSIONS[kind]}"
            samples.append(
                ScanSample(name, degradation, kind, content, inv, "facturx-pdf" if facturx else "pdf")
            )
    return samples
