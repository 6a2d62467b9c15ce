"""How much one document may cost: the bounds the parsers enforce themselves.

The sandbox (`documents.sandbox`) adds the bounds only a separate process can enforce (CPU,
memory, wall clock). These hold in-process too, and they turn the cheap-to-build,
expensive-to-read documents into a quarantine with a reason instead of a worker's lost hour.
"""

from __future__ import annotations

from .errors import UNSTORABLE, BadDocument, too_complex

DEFAULT_MAX_BYTES = 20 * 1024 * 1024
# A dense invoice page in the layout text is ~5,000 characters; this is ~200 such pages. Far
# above any invoice, far below what amplification tricks (text placed far right, a compressed
# flood of glyphs) would otherwise produce.
MAX_TEXT_CHARS = 1_000_000
# pdfminer needs ~60 µs per glyph: 500 dense pages is already minutes of CPU, so a longer file
# cannot be read within the time bounds anyway, and saying so up front is the clearer reason.
MAX_PDF_PAGES = 500
# OCR costs ~2.5 s of CPU per invoice page here and up to ~6 s for a page dense with text (one
# thread; benchmarks/results/ocr/): four pages fit the sandbox's 30 s CPU limit. A scan past it
# is `too_complex` before any page is read, instead of dying at the CPU limit halfway through.
MAX_OCR_PAGES = 4
# A 600-dpi A4 page is ~35 million pixels; decoding is bounded before it happens.
MAX_SCAN_PIXELS = 40_000_000

# Only NUL and unpaired surrogates are refused (UNSTORABLE). Other control characters are kept
# verbatim, as the sender wrote them, and escaped wherever a person reads them
# (`invoice_pipeline.terminal`).


def storable_text(text: str) -> str:
    """A text layer with unstorable characters as U+FFFD: it stays readable and can be saved."""
    return UNSTORABLE.sub("\ufffd", text)


def first_unstorable(value: str) -> str | None:
    m = UNSTORABLE.search(value)
    return None if m is None else m.group()


def text_too_long(chars: int, limit: int) -> BadDocument:
    return too_complex(
        f"the document's text is over {limit:,} characters (read so far: {chars:,}), the per-document "
        "text limit (DocumentReader.max_text_chars)",
        "an invoice has a few thousand characters per page; ask the sender for the invoice alone "
        "(or as an e-invoice XML), or raise the limit if this really is one invoice",
    )
