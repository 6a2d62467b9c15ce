"""Real pages scanned (issue 40): the development set's PDFs as a scanner would give them.

The 27 labelled PDFs of `../shared/corpus/pdf-layouts/` (read in place, never copied), stripped to
their pages (`page_reading.strip_to_page`), are rendered at 150 and 200 dpi, in greyscale and
bitonal (black and white at a fixed threshold, as a document scanner's default), saved as
image-only PDFs and read by the product's own `extract_text` + `extract_fields`: OCR, then the
same readers (and ranker) as any scan. Scored like `page_reading_lolo`: the six key fields, fields
the page does not print skipped, right / wrong value / empty, how many files were quarantined (a
`BadDocument`: the scan was refused, not held for a person), and how many currencies were only
suggested by the seller's VAT country (OCR cannot spell "€" or "£"), which holds the invoice. The
seller is also counted as duplicate detection compares it (`normalize_vendor`: accents and legal
forms folded), beside the exact spelling the key-field figure asks for.

These pages are the development set, so the readers' rules were written after reading their
text layers; what this adds is what OCR and resolution take away from the same pages. The scans
are the project's rendering of real layouts, not paper through a scanner.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import statistics
import time
from collections import Counter
from typing import Any

from PIL import Image

from benchmarks.harness import BenchContext, BenchResult, register
from benchmarks.labelled_pages import CORPUS, NOT_PRINTED_PER_README, corpus_truth, same
from benchmarks.page_reading import KEY_FIELDS, strip_to_page
from benchmarks.page_reading_lolo import Tally
from invoice_pipeline.documents import BadDocument, extract_fields, extract_text
from invoice_pipeline.documents.reading.ocr_layout import OcrLayout
from invoice_pipeline.domain.normalize import normalize_vendor
from invoice_pipeline.samples.scans import encode, render_pages

# name -> (dpi, PIL mode). Bitonal: a fixed threshold, as a scanner's black-and-white default.
SETTINGS: dict[str, tuple[int, str]] = {
    "150 dpi grey": (150, "L"),
    "150 dpi bitonal": (150, "1"),
    "200 dpi grey": (200, "L"),
    "200 dpi bitonal": (200, "1"),
}
BITONAL_THRESHOLD = 160


def scan_of(pdf: bytes, dpi: int, mode: str) -> bytes:
    """The PDF's pages rendered at `dpi` in greyscale or bitonal, as an image-only PDF."""
    pages: list[Image.Image] = []
    for page in render_pages(pdf, dpi):
        grey = page.convert("L")
        pages.append(grey if mode == "L" else grey.point(lambda v: 255 if v >= BITONAL_THRESHOLD else 0, "1"))
    return encode(pages, "pdf", dpi)


def _labelled_files() -> list[tuple[str, dict[str, Any], frozenset[str]]]:
    expected = json.loads((CORPUS / "expected.json").read_text(encoding="utf-8"))["files"]
    return [
        (
            path,
            corpus_truth(want),
            frozenset(want.get("not_printed") or ()) | NOT_PRINTED_PER_README.get(path, frozenset()),
        )
        for path, want in sorted(expected.items())
        if path.endswith(".pdf") and want.get("layout")
    ]


def _read(work: tuple[str, str, dict[str, Any], frozenset[str]]) -> dict[str, Any]:
    """One file scanned with one setting and read by the product, in a pool worker."""
    path, setting, truth, not_printed = work
    dpi, mode = SETTINGS[setting]
    scan = scan_of(strip_to_page((CORPUS / path).read_bytes()), dpi, mode)
    out: dict[str, Any] = {"path": path, "setting": setting, "code": None, "fields": {}, "pages": []}
    started = time.perf_counter()
    try:
        extracted = extract_text(scan, path.rsplit("/", 1)[-1])
        layout = OcrLayout.from_structured(extracted.structured)
        out["pages"] = [p.seconds for p in layout.pages] if layout else []
        fields = extract_fields(extracted)
    except BadDocument as exc:
        out["code"] = exc.code
        out["seconds"] = time.perf_counter() - started
        return out
    for key in KEY_FIELDS:
        if key in not_printed:
            continue
        got = getattr(fields, key)
        out["fields"][key] = (same(key, got, truth[key]), got is not None)
        if got is not None and not same(key, got, truth[key]):
            out.setdefault("wrong", []).append(f"{key}: read {got!r}, is {truth[key]!r}")
    out["currency_held"] = fields.currency_inferred_on_a_scan
    if "seller_name" not in not_printed and fields.seller_name and truth["seller_name"]:
        # What duplicate detection and the vendor registry compare: accents and legal forms folded.
        out["seller_same_vendor"] = normalize_vendor(fields.seller_name) == normalize_vendor(
            truth["seller_name"]
        )
    out["seconds"] = time.perf_counter() - started
    return out


@register("real_scans", "six key fields from the development set's real pages scanned at 150/200 dpi")
def run(ctx: BenchContext) -> BenchResult:  # the context's database is not used
    result = BenchResult(
        "real_scans",
        "The development set's real pages as image-only scans, read by the product (OCR + readers).",
        params={"settings": {k: {"dpi": d, "mode": m} for k, (d, m) in SETTINGS.items()}},
    )
    if not (CORPUS / "expected.json").exists():
        result.notes.append(f"skipped: no corpus at {CORPUS}")
        return result
    files = _labelled_files()
    if ctx.quick:
        files = files[:3]
    work = [(path, setting, truth, skip) for setting in SETTINGS for path, truth, skip in files]
    with mp.get_context("spawn").Pool(2) as pool:
        outcomes = pool.map(_read, work, chunksize=1)
    rows = [
        "| scan | key fields right | wrong values | empty | quarantined | currency only suggested (held) "
        "| seller, the same vendor | per field |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for setting in SETTINGS:
        mine = [o for o in outcomes if o["setting"] == setting]
        overall, per_field = Tally(), {key: Tally() for key in KEY_FIELDS}
        for o, (path, _truth, skip) in zip(mine, files, strict=True):
            for key in KEY_FIELDS:
                if key in skip:
                    continue
                ok, read = o["fields"].get(key, (False, False))  # quarantined: nothing read
                overall.add(ok, read)
                per_field[key].add(ok, read)
            for wrong in o.get("wrong", []):
                result.notes.append(f"{setting}: {path}: {wrong}")
        quarantined = Counter(o["code"] for o in mine if o["code"])
        share = 100 * overall.right / overall.total
        result.figure(f"{setting}: key fields right", "%", better="higher").add(share)
        result.figure(f"{setting}: wrong values", "count").add(overall.wrong)
        result.figure(f"{setting}: quarantined", "files").add(sum(quarantined.values()))
        empty = overall.total - overall.right - overall.wrong
        rows.append(
            f"| {setting} | {overall} ({share:.1f} %) | {overall.wrong} | {empty} | "
            f"{sum(quarantined.values())} of {len(mine)} {dict(quarantined) or ''} | "
            f"{sum(bool(o.get('currency_held')) for o in mine)} | "
            f"{sum(bool(o.get('seller_same_vendor')) for o in mine)}/{per_field['seller_name'].total} | "
            + ", ".join(f"{k} {t}" for k, t in per_field.items())
            + " |"
        )
    result.tables.append("\n".join(rows))
    seconds = [s for o in outcomes for s in o["pages"]]
    if seconds:
        result.notes.append(
            f"OCR seconds per page: median {statistics.median(seconds):.1f}, max {max(seconds):.1f} "
            "(two pool workers sharing 2 cores)"
        )
    return result
