"""The euro sign on a scan, which the recogniser cannot spell, told apart by its shape.

PP-OCRv4's alphabet (Chinese and Latin, 6,623 characters) has "￡" and "￥" but no "€". A euro
sign beside an amount comes out as "∈" (folded back by `ocr.tidy`), as a "C", an "E" or a "6",
or, most often, as nothing: "160,65 €" is read "160,65". A page that prints its currency only as "€" then
shows no currency at all, and its invoice waits for a person.

The sign is still in the line's crop, so the glyph at the amount's end (or start) is cut out of
the crop and compared with the euro sign and with what else could stand there (the digits, the
letters OCR reads it as, other currency signs, the percent sign), each drawn in the three PDF
standard families (sans, serif, mono; regular and bold) by pdfium, which needs no font on the
machine. It is called a euro sign only when it looks more like one than like anything else by a
clear margin. This is a fact about one engine's alphabet and one symbol's shape, not a habit of
any layout; a euro read this way is still confirmed by the seller's VAT country before anything
is paid in it (`text_fields`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

EURO = "€"
# What else could be the last (or first) glyph of a line that holds an amount.
RIVALS = "0123456789CEce$£¥%"
# A glyph is a euro sign when it matches one this well (normalised correlation of 24x24 images) and
# better than every rival by this margin. The euro signs of one development-set page scanned at
# 150 dpi scored 0.64-0.77 and their nearest rival ("£") 0.09-0.2 lower; a digit scores about 0.8
# against itself and below 0.4 against "€".
EURO_MIN_SCORE = 0.6
EURO_MARGIN = 0.08
_SIZE = 24
# A glyph wider than this share of its height is two glyphs run together: no verdict.
_MAX_ASPECT = 1.2

# The recognised text with an amount at its end or start, and maybe a misread sign beside it.
_AMOUNT_AT_END = re.compile(r"(?P<amount>\d[\d.,' ]*[.,]\d{2})(?P<sign>\s*[CEce6])?\s*$")
_AMOUNT_AT_START = re.compile(r"^\s*(?P<sign>[CEce6]\s*)?(?P<amount>\d[\d.,' ]*[.,]\d{2})")
_MISREAD_ALONE = re.compile(r"^\s*[CEce]?\s*$")


@dataclass(frozen=True)
class GlyphVerdict:
    """How much the glyph looks like a euro sign, and like its likeliest rival."""

    euro: float
    rival: str
    rival_score: float

    @property
    def is_euro(self) -> bool:
        return self.euro >= EURO_MIN_SCORE and self.euro >= self.rival_score + EURO_MARGIN


def restore_euro(text: str, crop: Any) -> str:
    """`text` as recognised from `crop` (a line's image), with the euro sign the recogniser
    dropped or misread put back where the crop shows one; otherwise `text` unchanged."""
    if EURO in text:
        return text
    end = _AMOUNT_AT_END.search(text)
    if end is not None and _looks_like_euro(crop, last=True):
        return f"{text[: end.start('sign')] if end.group('sign') else text.rstrip()} {EURO}"
    start = _AMOUNT_AT_START.search(text)
    if start is not None and _looks_like_euro(crop, last=False):
        return f"{EURO}{text[start.start('amount') :]}"
    if _MISREAD_ALONE.match(text) and _looks_like_euro(crop, last=True, alone=True):
        return EURO
    return text


def _looks_like_euro(crop: Any, *, last: bool, alone: bool = False) -> bool:
    verdict = judge(crop, last=last, alone=alone)
    return verdict is not None and verdict.is_euro


def judge(crop: Any, *, last: bool = True, alone: bool = False) -> GlyphVerdict | None:
    """The verdict on the crop's last (or first) glyph, or on its only one (`alone`); None when
    no single glyph can be cut out."""
    glyph = _end_glyph(crop, last=last, alone=alone)
    if glyph is None:
        return None
    scores = {ch: max(float((glyph * t).sum()) for t in shapes) for ch, shapes in _templates().items()}
    euro = scores.pop(EURO)
    rival = max(scores, key=lambda ch: scores[ch])
    return GlyphVerdict(round(euro, 3), rival, round(scores[rival], 3))


def _ink(crop: Any) -> Any:
    """The crop's ink (True where dark), cut to its main text band: a line's crop often holds the
    edges of the lines above and below it."""
    import cv2
    import numpy as np

    grey = cv2.cvtColor(crop, cv2.COLOR_BGR2GRAY) if crop.ndim == 3 else crop
    if grey.size == 0 or int(grey.max()) - int(grey.min()) < 64:
        return None
    _, binary = cv2.threshold(grey, 0, 255, cv2.THRESH_BINARY_INV + cv2.THRESH_OTSU)
    # Specks (a JPEG's ringing, paper grain) would join the glyphs' columns: blobs of a few
    # pixels go, a comma stays.
    count, labels, stats, _ = cv2.connectedComponentsWithStats(binary, connectivity=8)
    smallest = max(4, int(0.01 * grey.shape[0] ** 2))
    keep = np.zeros(count, dtype=bool)
    keep[1:] = stats[1:, cv2.CC_STAT_AREA] >= smallest
    ink = keep[labels]
    rows = ink.sum(axis=1)
    bands = _runs(rows)
    if not bands:
        return None
    top, bottom = max(bands, key=lambda band: int(rows[band[0] : band[1]].sum()))
    return np.asarray(ink[top:bottom])


def _runs(profile: Any) -> list[tuple[int, int]]:
    """[start, end) of each run of non-zero values."""
    runs: list[tuple[int, int]] = []
    start: int | None = None
    for i, value in enumerate(list(profile) + [0]):
        if value and start is None:
            start = i
        elif not value and start is not None:
            runs.append((start, i))
            start = None
    return runs


def _end_glyph(crop: Any, *, last: bool, alone: bool) -> Any:
    import numpy as np

    ink = _ink(crop)
    if ink is None:
        return None
    columns = _runs(ink.sum(axis=0))
    if not columns or (alone and len(columns) != 1):
        return None
    left, right = columns[-1] if last else columns[0]
    part = ink[:, left:right]
    rows = np.nonzero(part.sum(axis=1))[0]
    glyph = part[rows.min() : rows.max() + 1]
    height, width = glyph.shape
    # Too flat (a dash, a dot) or two glyphs run together: not one sign.
    if height < 0.5 * ink.shape[0] or width > _MAX_ASPECT * height or height < 6:
        return None
    return _normalised(glyph.astype(np.float32))


def _normalised(image: Any) -> Any:
    import cv2
    import numpy as np

    small = cv2.resize(image, (_SIZE, _SIZE), interpolation=cv2.INTER_AREA)
    small -= small.mean()
    norm = float(np.linalg.norm(small))
    return small / norm if norm else small


# The PDF standard fonts the templates are drawn in: sans, serif and mono, regular and bold.
_FACES = ("Helvetica", "Helvetica-Bold", "Times-Roman", "Times-Bold", "Courier", "Courier-Bold")
_CELL = 40  # points per character cell
_POINT_SIZE = 28
_SCALE = 2  # pixels per point when drawn


def _template_pdf(chars: str) -> bytes:
    """One page: a row per face, a cell per character, in WinAnsi (where "€" is 0x80).

    Written by hand rather than with fpdf2, whose import alone costs 0.6 s, and the OCR worker
    that needs the templates is a fresh process for every scan."""
    width, height = _CELL * (len(chars) + 1), _CELL * (len(_FACES) + 1)
    codes = chars.encode("cp1252")
    stream = "".join(
        f"BT /F{row} {_POINT_SIZE} Tf {_CELL * col + 8} {height - _CELL * (row + 1)} Td <{code:02X}> Tj ET\n"
        for row in range(len(_FACES))
        for col, code in enumerate(codes)
    ).encode("ascii")
    fonts = " ".join(f"/F{i} {5 + i} 0 R" for i in range(len(_FACES)))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {width} {height}] "
        f"/Resources << /Font << {fonts} >> >> /Contents 4 0 R >>".encode("ascii"),
        b"<< /Length " + str(len(stream)).encode("ascii") + b" >>\nstream\n" + stream + b"endstream",
        *(
            f"<< /Type /Font /Subtype /Type1 /BaseFont /{face} /Encoding /WinAnsiEncoding >>".encode("ascii")
            for face in _FACES
        ),
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode("ascii") + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode("ascii")
    out += b"".join(f"{offset:010d} 00000 n \n".encode("ascii") for offset in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode("ascii")
    return bytes(out)


@functools.lru_cache(maxsize=1)
def _templates() -> dict[str, list[Any]]:
    """Each character of EURO + RIVALS drawn by pdfium in the six standard faces (built into
    pdfium: no font on the machine is needed), cut out and normalised like a glyph."""
    import numpy as np
    import pypdfium2 as pdfium

    chars = EURO + RIVALS
    page = pdfium.PdfDocument(_template_pdf(chars))[0]
    ink = np.asarray(page.render(scale=_SCALE).to_pil().convert("L")) < 128
    out: dict[str, list[Any]] = {}
    for row in range(len(_FACES)):
        for col, ch in enumerate(chars):
            # From the row above's baseline to just below this row's (where "$" ends).
            top, left = (_CELL * row + 4) * _SCALE, _CELL * col * _SCALE
            box = ink[top : top + (_CELL + 4) * _SCALE, left : left + _CELL * _SCALE]
            ys, xs = np.nonzero(box)
            if len(xs):
                glyph = box[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1].astype(np.float32)
                out.setdefault(ch, []).append(_normalised(glyph))
    return out
