"""The euro sign OCR cannot spell, told by its shape (`documents.ocr_glyphs`), and what a currency
read from it may do: post only when the seller's VAT country confirms it (issue 40)."""

from __future__ import annotations

import io
from decimal import Decimal

import numpy as np
import pytest
from fpdf import FPDF

from invoice_pipeline.documents import ExtractedText, extract_fields, extract_text
from invoice_pipeline.documents import ocr as ocr_module
from invoice_pipeline.documents.ocr_glyphs import (
    EURO,
    EURO_MARGIN,
    EURO_MIN_SCORE,
    RIVALS,
    judge,
    restore_euro,
)
from invoice_pipeline.documents.reading.ocr_layout import OcrLayout, OcrLine, OcrPage
from invoice_pipeline.domain.fields import EURO_BY_SHAPE, EURO_CONFIRMED
from invoice_pipeline.domain.review import CURRENCY_UNKNOWN, money_reasons
from invoice_pipeline.samples.scans import encode, render_pages
from invoice_pipeline_tests.tools import needs_tool

# What a scanner makes of 9-12 point type: 150 and 200 dpi, in each PDF standard family.
FACES = [(family, style) for family in ("helvetica", "times", "courier") for style in ("", "B")]
SCANS = [(size, dpi) for size in (9, 12) for dpi in (150, 200)]


def _page(
    lines: list[str],
    size: float = 11,
    family: str = "helvetica",
    style: str = "",
    page: str | tuple[float, float] = "A4",
) -> bytes:
    pdf = FPDF(format=page)
    pdf.core_fonts_encoding = "windows-1252"  # the standard fonts' "€"
    pdf.add_page()
    pdf.set_font(family, style, size)
    for i, text in enumerate(lines):
        pdf.set_xy(20, 20 + size * 0.6 * i)
        pdf.cell(pdf.w - 40, size * 0.5, text)
    out = io.BytesIO()
    pdf.output(out)
    return out.getvalue()


# A page a tenth of A4's area, for the sweep below: its 912 renders of a whole A4 page took 31 s.
LABEL = (5 * 25.4, 2 * 25.4)


def _crop(
    text: str, family: str, style: str, size: float, dpi: int, page: str | tuple[float, float] = "A4"
) -> np.ndarray:
    """`text` as a line's crop from a greyscale scan: the ink's box with a margin, as the
    recogniser's crops are cut. The page's size moves the glyphs by a fraction of a pixel (the
    renderer rounds the page to whole pixels), which is all that tells the sizes apart."""
    grey = np.asarray(render_pages(_page([text], size, family, style, page), dpi)[0].convert("L"))
    ys, xs = np.nonzero(grey < 128)
    pad = 4
    return grey[max(0, ys.min() - pad) : ys.max() + pad, max(0, xs.min() - pad) : xs.max() + pad]


@pytest.mark.parametrize(("size", "dpi"), SCANS)
@pytest.mark.slow
def test_a_euro_sign_is_told_from_everything_else_that_ends_an_amount(size: int, dpi: int) -> None:
    misjudged: list[str] = []
    for family, style in FACES:
        for ch in EURO + RIVALS:
            # No verdict (two glyphs run together, say) is no euro sign.
            for last, printed in ((True, f"1.234,56 {ch}"), (False, f"{ch}1,234.56")):
                verdict = judge(_crop(printed, family, style, size, dpi, LABEL), last=last)
                if (verdict is not None and verdict.is_euro) != (ch == EURO):
                    misjudged.append(f"{family}{style} {printed!r}: {verdict}")
    assert not misjudged, misjudged


# Rivals on a coarse scan (120 dpi), where each of the two safeguards of `GlyphVerdict.is_euro` is
# the one that refuses the glyph: a minimum score alone would call the first three euro signs
# (they match the euro sign above it, yet their own shape better), a margin alone the last.
COARSE_RIVALS = [
    pytest.param("c1,234.56", "times", "B", 9, "margin", id="margin-times-bold-c"),
    pytest.param("1.234,56 £", "courier", "B", 8, "margin", id="margin-courier-bold-pound"),
    pytest.param("C1,234.56", "times", "", 10, "margin", id="margin-times-C"),
    pytest.param("e1,234.56", "courier", "B", 8, "minimum", id="minimum-courier-bold-e"),
]


@pytest.mark.parametrize(("printed", "family", "style", "size", "safeguard"), COARSE_RIVALS)
def test_a_rival_on_a_coarse_scan_is_no_euro_sign(
    printed: str, family: str, style: str, size: int, safeguard: str
) -> None:
    verdict = judge(_crop(printed, family, style, size, 120), last=printed[0].isdigit())
    assert verdict is not None
    # The case is one its safeguard alone decides: the other one would let the glyph through.
    if safeguard == "margin":
        assert verdict.euro >= EURO_MIN_SCORE, verdict
    else:
        assert verdict.euro >= verdict.rival_score + EURO_MARGIN, verdict
    assert not verdict.is_euro, f"{family}{style} {printed!r} called a euro sign: {verdict}"


def test_the_sign_is_put_back_where_the_recogniser_dropped_or_misread_it() -> None:
    euro_after = _crop("160,65 €", "helvetica", "", 11, 150)
    assert restore_euro("160,65", euro_after) == "160,65 €"
    assert restore_euro("160,65 C", euro_after) == "160,65 €"
    assert restore_euro("Total TTC 160,65", euro_after) == "Total TTC 160,65 €"
    assert restore_euro("€34.20", euro_after) == "€34.20"  # read already: nothing to do
    assert restore_euro("€", euro_after) == "€"
    assert restore_euro("", _crop("€", "times", "", 11, 150)) == EURO
    assert restore_euro("34.20", _crop("€34.20", "helvetica", "B", 11, 150)) == "€34.20"
    # What is not a euro sign stays what the recogniser read.
    for text, printed in [
        ("160,65", "160,65"),
        ("160,65 %", "160,65 %"),
        ("160,65 C", "160,65 C"),
        ("160,65 E", "160,65 E"),
        ("160,65 $", "160,65 $"),
        ("Rechnung", "Rechnung"),
    ]:
        assert restore_euro(text, _crop(printed, "helvetica", "", 11, 150)) == text, printed


def _scan_fields(lines: list[str], shaped: set[int]) -> object:
    """OCR output whose `shaped` lines had their euro sign put back from its shape."""
    layout = OcrLayout(
        "test",
        (OcrPage(1, 0, 0.0, False, len(lines), 0.1),),
        tuple(OcrLine(1, 0.97, (), i in shaped) for i in range(len(lines))),
    )
    return extract_fields(
        ExtractedText("image", "\n".join(lines), layout.to_structured(), ocr_module.METHOD, 1)
    )


def _page_lines(vat: str | None) -> list[str]:
    sender = "Lindenhof Beratung GmbH · Ahornweg 4 · 10115 Berlin"
    return [
        sender + (f" · USt-IdNr.: {vat}" if vat else ""),
        "Rechnung Nr.: R-2026-0417",
        "Rechnungsdatum: 03.08.2026",
        *(f"Beratung, Woche {week}, 10 Std. zu 12,50 €      125,00 €" for week in range(1, 9)),
        "Nettobetrag        1.000,00 €",
        "USt 19 %             190,00 €",
        "Gesamtbetrag       1.190,00 €",
    ]


@pytest.mark.parametrize(
    ("vat", "held"),
    [("DE123456789", False), (None, True), ("GB123456789", True)],
    ids=["a euro country confirms it", "no VAT id", "a pound country"],
)
def test_a_euro_told_by_its_shape_posts_only_when_the_sellers_country_confirms_it(
    vat: str | None, held: bool
) -> None:
    shaped = _scan_fields(_page_lines(vat), shaped=set(range(3, 14)))
    assert shaped.currency == "EUR"  # type: ignore[attr-defined]
    source = shaped.sources["currency"].source  # type: ignore[attr-defined]
    assert EURO_BY_SHAPE in source and (EURO_CONFIRMED in source) is not held, source
    assert shaped.currency_inferred_on_a_scan is held  # type: ignore[attr-defined]
    reasons = [r for r in money_reasons(shaped) if r.startswith(CURRENCY_UNKNOWN)]  # type: ignore[arg-type]
    assert bool(reasons) is held, reasons
    if held:
        assert "looks like a euro sign" in reasons[0]
    # The same lines with a euro sign the recogniser spelt ("∈" folded back) are no guess.
    read = _scan_fields(_page_lines(vat), shaped=set())
    assert read.currency == "EUR" and not read.currency_inferred_on_a_scan  # type: ignore[attr-defined]


def test_the_layout_keeps_which_lines_had_their_sign_put_back() -> None:
    layout = OcrLayout(
        "test", (OcrPage(1, 0, 0.0, False, 2, 0.1),), (OcrLine(1, 0.9, (), True), None, OcrLine(1, 0.8))
    )
    again = OcrLayout.from_structured(layout.to_structured())
    assert again == layout
    # A layout stored before the sign was put back reads as it did.
    old = '{"ocr": {"engine": "e", "pages": [], "lines": [[1, 0.9, []]]}}'
    assert OcrLayout.from_structured(old) == OcrLayout("e", (), (OcrLine(1, 0.9, (), False),))


@needs_tool("OCR engine (rapidocr-onnxruntime)", ocr_module.available())
@pytest.mark.slow
def test_a_scan_printing_only_euro_signs_is_read_in_euro() -> None:
    page = render_pages(_page(_page_lines("DE123456789"), 11), 150)[0].convert("L")
    scan = encode([page], "pdf", 150)
    fields = extract_fields(extract_text(scan, "scan.pdf"))
    assert (fields.currency, fields.payable_total) == ("EUR", Decimal("1190.00"))
    assert not fields.currency_inferred_on_a_scan, fields.sources["currency"]
    assert EURO_BY_SHAPE in fields.sources["currency"].source
