"""The stored document's pages as PNG images, and where a field's box lies on them.

PDFs are rendered with pypdfium2, scans decoded with Pillow. A document is addressed by its
SHA-256, so a rendered page never goes stale: pages are cached in memory (a small LRU) and on
disk (`<cache>/<sha256>-<page>-<scale>.png`), and the page sizes in points beside them. Boxes
(`FieldSource.box`) are in PDF points of the upright page, origin top-left; the page shows them
as percentages of the page's size, so they line up at any zoom.
"""

from __future__ import annotations

import io
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# 1.5 x 72 = 108 dpi: legible on a screen, ~120 KB per A4 page.
RENDER_SCALE = 1.5
MAX_PAGES = 20
MEMORY_PAGES = 64
ASSUMED_SCAN_DPI = 200.0


@dataclass(frozen=True)
class PageSize:
    width: float  # points
    height: float


def _pdf_sizes(content: bytes) -> list[PageSize]:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(content)
    try:
        return [PageSize(*pdf[i].get_size()) for i in range(min(len(pdf), MAX_PAGES))]
    finally:
        pdf.close()


def _pdf_page_png(content: bytes, page: int, scale: float) -> bytes:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(content)
    try:
        image = pdf[page - 1].render(scale=scale).to_pil()
    finally:
        pdf.close()
    out = io.BytesIO()
    image.save(out, "PNG", optimize=False, compress_level=3)
    return out.getvalue()


def _image_frames(content: bytes) -> list[tuple[int, PageSize]]:
    from PIL import Image

    with Image.open(io.BytesIO(content)) as image:
        frames = []
        for index in range(min(getattr(image, "n_frames", 1), MAX_PAGES)):
            image.seek(index)
            dpi = image.info.get("dpi") or (ASSUMED_SCAN_DPI, ASSUMED_SCAN_DPI)
            x_dpi = float(dpi[0]) or ASSUMED_SCAN_DPI
            y_dpi = float(dpi[1]) or ASSUMED_SCAN_DPI
            frames.append((index, PageSize(image.width * 72 / x_dpi, image.height * 72 / y_dpi)))
        return frames


def _image_page_png(content: bytes, page: int, scale: float) -> bytes:
    from PIL import Image, ImageOps

    sizes = _image_frames(content)
    with Image.open(io.BytesIO(content)) as image:
        image.seek(page - 1)
        frame = ImageOps.exif_transpose(image.convert("RGB"))
        size = sizes[page - 1][1]
        frame = frame.resize((max(1, int(size.width * scale)), max(1, int(size.height * scale))))
        out = io.BytesIO()
        frame.save(out, "PNG", compress_level=3)
        return out.getvalue()


def document_kind(content: bytes) -> str:
    from invoice_pipeline.documents.detect import sniff

    try:
        return sniff(content)
    except Exception:
        return "unknown"


class PageRenderer:
    """Page images and sizes, cached by the document's SHA-256."""

    def __init__(self, cache_dir: Path | None, scale: float = RENDER_SCALE) -> None:
        self.cache_dir = cache_dir
        self.scale = scale
        self._images: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._sizes: dict[str, list[PageSize]] = {}
        self._lock = threading.Lock()
        if cache_dir is not None:
            cache_dir.mkdir(parents=True, exist_ok=True)

    def _path(self, sha256: str, suffix: str) -> Path | None:
        if self.cache_dir is None or not all(c in "0123456789abcdef" for c in sha256):
            return None
        return self.cache_dir / f"{sha256}{suffix}"

    def sizes(self, sha256: str, content: Callable[[], bytes | None]) -> list[PageSize]:
        """The page sizes in points; [] for a document without pages (XML, JSON)."""
        with self._lock:
            if sha256 in self._sizes:
                return self._sizes[sha256]
        path = self._path(sha256, "-sizes.json")
        if path is not None and path.exists():
            found = [PageSize(w, h) for w, h in json.loads(path.read_text())]
        else:
            data = content()
            found = self._read_sizes(data) if data is not None else []
            if path is not None and data is not None:
                path.write_text(json.dumps([[s.width, s.height] for s in found]))
        with self._lock:
            self._sizes[sha256] = found
        return found

    @staticmethod
    def _read_sizes(data: bytes) -> list[PageSize]:
        kind = document_kind(data)
        try:
            if kind == "pdf":
                return _pdf_sizes(data)
            if kind == "image":
                return [size for _, size in _image_frames(data)]
        except Exception:
            return []
        return []

    def png(self, sha256: str, page: int, content: Callable[[], bytes | None]) -> bytes | None:
        key = (sha256, page)
        with self._lock:
            if key in self._images:
                self._images.move_to_end(key)
                return self._images[key]
        path = self._path(sha256, f"-{page}-{self.scale:g}.png")
        if path is not None and path.exists():
            image = path.read_bytes()
        else:
            data = content()
            if data is None or not 1 <= page <= len(self.sizes(sha256, lambda: data)):
                return None
            kind = document_kind(data)
            image = (_pdf_page_png if kind == "pdf" else _image_page_png)(data, page, self.scale)
            if path is not None:
                tmp = path.with_suffix(".tmp")
                tmp.write_bytes(image)
                tmp.replace(path)
        with self._lock:
            self._images[key] = image
            while len(self._images) > MEMORY_PAGES:
                self._images.popitem(last=False)
        return image


@dataclass(frozen=True)
class DrawnBox:
    """A box on a page, as CSS percentages of the page."""

    label: str
    title: str
    kind: str  # "field", "candidate", "differs"
    left: float
    top: float
    width: float
    height: float


def drawn(
    label: str, title: str, kind: str, box: tuple[float, float, float, float], size: PageSize
) -> DrawnBox:
    x0, top, x1, bottom = box
    pad = 1.5  # points around the words
    left = max(0.0, (min(x0, x1) - pad) / size.width * 100)
    up = max(0.0, (min(top, bottom) - pad) / size.height * 100)
    width = min(100.0 - left, (abs(x1 - x0) + 2 * pad) / size.width * 100)
    height = min(100.0 - up, (abs(bottom - top) + 2 * pad) / size.height * 100)
    return DrawnBox(label, title, kind, round(left, 3), round(up, 3), round(width, 3), round(height, 3))
