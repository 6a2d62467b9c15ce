"""A document's pages as PNG images, drawn in the document sandbox (the review page shows them).

PDFs are rendered with pypdfium2, scans decoded with Pillow, both in the pipeline's document
sandbox (`documents.sandbox`: a worker process with the pipeline's memory, CPU and wall-clock
bounds), never in the web process: a 1 KB PDF can ask for a page of metres, a 50 KB scan for
billions of pixels. A page whose image would exceed the pipeline's own pixel bound
(`MAX_PAGE_PIXELS`, the scans' 40 M) is refused from its size alone, before anything is drawn,
and the refusal is shown in the page's place (`PageRefused`). A document is addressed by its
SHA-256, so a rendered page never goes stale: pages are cached in memory (a small LRU) and on
disk (`<cache>/<sha256>-<page>-<scale>.png`), and the page sizes in points beside them (a
field's box, `FieldSource.box`, is in PDF points of the upright page, origin top-left).

Here, in the documents layer, because it runs where the parsers run: the sandbox's worker
(`sandbox_worker`) draws with `sandboxed`, and the review page asks `PageRenderer`.
"""

from __future__ import annotations

import base64
import io
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from invoice_pipeline.documents.errors import BadDocument
from invoice_pipeline.documents.limits import MAX_SCAN_PIXELS
from invoice_pipeline.documents.sandbox import Sandbox, SandboxLimits, SandboxUnavailable, shared_sandbox

# 1.5 x 72 = 108 dpi: legible on a screen, ~120 KB per A4 page.
RENDER_SCALE = 1.5
MAX_PAGES = 20
MEMORY_PAGES = 64
ASSUMED_SCAN_DPI = 200.0
# The largest page image drawn (width x height in pixels, at RENDER_SCALE): the pipeline's own
# bound on a page's pixels (an A4 page at 1.5x is 1.1 M).
MAX_PAGE_PIXELS = MAX_SCAN_PIXELS
# The worker's bounds while it draws: the pipeline's defaults (1 GiB, 30 s CPU, 60 s).
PAGE_SANDBOX_LIMITS = SandboxLimits()


class PageRefused(ValueError):
    """A page that is not drawn, and why (shown in the page's place)."""


def too_many_pixels(size: PageSize, scale: float) -> str | None:
    """Why a page of `size` points is not drawn at `scale`, or None when it may be."""
    width, height = int(size.width * scale), int(size.height * scale)
    if width * height <= MAX_PAGE_PIXELS:
        return None
    return (
        f"page not shown: its image would be {width:,} x {height:,} pixels, over the "
        f"{MAX_PAGE_PIXELS / 1e6:g} M pixels the pipeline draws at most (open the original file)"
    )


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
        if image.width * image.height > MAX_PAGE_PIXELS:  # decoding it would cost this much
            raise PageRefused(
                f"page not shown: the scan is {image.width:,} x {image.height:,} pixels, over the "
                f"{MAX_PAGE_PIXELS / 1e6:g} M pixels the pipeline decodes at most"
            )
        frame = ImageOps.exif_transpose(image.convert("RGB"))
        size = sizes[page - 1][1]
        frame = frame.resize((max(1, int(size.width * scale)), max(1, int(size.height * scale))))
        out = io.BytesIO()
        frame.save(out, "PNG", compress_level=3)
        return out.getvalue()


def read_page_sizes(data: bytes) -> list[PageSize]:
    """The page sizes in points; [] for a document without pages or one that cannot be read."""
    kind = document_kind(data)
    try:
        if kind == "pdf":
            return _pdf_sizes(data)
        if kind == "image":
            return [size for _, size in _image_frames(data)]
    except Exception:
        return []
    return []


def render_page(data: bytes, page: int, scale: float) -> bytes:
    """One page as PNG, within MAX_PAGE_PIXELS (PageRefused beyond it). Run in the sandbox."""
    sizes = read_page_sizes(data)
    if not 1 <= page <= len(sizes):
        raise PageRefused("no such page")
    refused = too_many_pixels(sizes[page - 1], scale)
    if refused is not None:
        raise PageRefused(refused)
    return (_pdf_page_png if document_kind(data) == "pdf" else _image_page_png)(data, page, scale)


def sandboxed(header: dict[str, Any], content: bytes) -> dict[str, Any]:
    """The document sandbox's page operations (`sandbox_worker`): sizes, or one page's PNG
    (base64: the worker answers in JSON), or the refusal."""
    if header["op"] == "page_sizes":
        return {"sizes": [[s.width, s.height] for s in read_page_sizes(content)]}
    try:
        png = render_page(content, int(header["page"]), float(header["scale"]))
    except PageRefused as exc:
        return {"refused": str(exc)}
    return {"png": base64.b64encode(png).decode()}


def document_kind(content: bytes) -> str:
    from invoice_pipeline.documents.detect import sniff

    try:
        return sniff(content)
    except Exception:
        return "unknown"


class PageRenderer:
    """Page images and sizes, cached by the document's SHA-256."""

    def __init__(
        self, cache_dir: Path | None, scale: float = RENDER_SCALE, sandbox: Sandbox | None = None
    ) -> None:
        self.cache_dir = cache_dir
        self.scale = scale
        self.sandbox = sandbox or shared_sandbox(PAGE_SANDBOX_LIMITS)
        # Its imports (~0.3 s) while the page starts, not on the first reviewer's first view.
        self.sandbox.prestart()
        self._images: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._sizes: dict[str, list[PageSize]] = {}
        # Pages refused (too large, or over a sandbox bound), and why: refused once, not per view.
        self._refused: OrderedDict[tuple[str, int], str] = OrderedDict()
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

    def _read_sizes(self, data: bytes) -> list[PageSize]:
        if document_kind(data) not in ("pdf", "image"):
            return []
        try:
            reply = self._in_sandbox({"op": "page_sizes"}, data)
        except PageRefused:
            return []
        return [PageSize(w, h) for w, h in reply["sizes"]]

    def _in_sandbox(self, header: dict[str, Any], data: bytes) -> dict[str, Any]:
        try:
            reply: dict[str, Any] = self.sandbox.call(header, data)
        except BadDocument as exc:  # over a memory, CPU or time bound, or a parser crash
            raise PageRefused(f"page not shown: {exc.reason}") from None
        except SandboxUnavailable as exc:
            raise PageRefused(f"page not shown: the document sandbox is unavailable ({exc})") from None
        return reply

    def refused(self, sha256: str, page: int, size: PageSize) -> str | None:
        """Why this page is not drawn, when that is known without drawing it."""
        with self._lock:
            known = self._refused.get((sha256, page))
        return known or too_many_pixels(size, self.scale)

    def png(self, sha256: str, page: int, content: Callable[[], bytes | None]) -> bytes | None:
        """The page's PNG; None for no such page; PageRefused for a page not drawn."""
        key = (sha256, page)
        with self._lock:
            if key in self._images:
                self._images.move_to_end(key)
                return self._images[key]
            if key in self._refused:
                raise PageRefused(self._refused[key])
        path = self._path(sha256, f"-{page}-{self.scale:g}.png")
        if path is not None and path.exists():
            image = path.read_bytes()
        else:
            data = content()
            sizes = self.sizes(sha256, lambda: data) if data is not None else []
            if data is None or not 1 <= page <= len(sizes):
                return None
            try:
                refused = too_many_pixels(sizes[page - 1], self.scale)
                if refused is not None:
                    raise PageRefused(refused)
                reply = self._in_sandbox({"op": "page_png", "page": page, "scale": self.scale}, data)
                if "refused" in reply:
                    raise PageRefused(reply["refused"])
            except PageRefused as exc:
                with self._lock:
                    self._refused[key] = str(exc)
                    while len(self._refused) > MEMORY_PAGES:
                        self._refused.popitem(last=False)
                raise
            image = base64.b64decode(reply["png"])
            if path is not None:
                tmp = path.with_suffix(".tmp")
                tmp.write_bytes(image)
                tmp.replace(path)
        with self._lock:
            self._images[key] = image
            while len(self._images) > MEMORY_PAGES:
                self._images.popitem(last=False)
        return image
