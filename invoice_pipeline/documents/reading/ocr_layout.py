"""What OCR produced, stored with the text: per text line of a scan, its page, its weakest
recognition score and its segment boxes (`OcrLayout`), and the score a field's value must reach.

Kept apart from the recogniser (`documents.ocr`) so the page readers can place and score a value
read from a scan without importing the OCR engine's module.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...domain.fields import Box
from .words import TextBoxes, stored_box

# Field values read from OCR text whose weakest character box scored below this are not used:
# the field is null with a reason. Clean 200-dpi text scores 0.95-1.0 here; a misread digit
# typically scores 0.5-0.8.
MIN_FIELD_CONFIDENCE = 0.80


@dataclass(frozen=True)
class OcrPage:
    page: int
    rotation: int  # degrees turned counter-clockwise to make the text upright
    skew_degrees: float
    denoised: bool
    boxes: int
    seconds: float


@dataclass(frozen=True)
class OcrLine:
    """One line of the OCR text: the page it is on, its weakest recognition score, and the box of
    each of its segments in points of the upright page (origin top-left), as `TextBoxes` has them
    for a text PDF (a layout stored before boxes were kept has none)."""

    page: int
    confidence: float
    boxes: tuple[Box, ...] = ()
    # A euro sign on this line was put back from its shape (`ocr_glyphs`): the recogniser
    # cannot spell it, so the line's text alone would show no currency.
    euro_by_shape: bool = False


@dataclass(frozen=True)
class OcrLayout:
    """Per text line of an OCRed document, where it came from; kept in ExtractedText.structured.

    Field extraction can then run again from the stored text (a retry fast-forwarding past OCR)
    and still know each field's page and confidence.
    """

    engine: str
    pages: tuple[OcrPage, ...]
    lines: tuple[OcrLine | None, ...]

    def to_structured(self) -> str:
        return json.dumps(
            {
                "ocr": {
                    "engine": self.engine,
                    "pages": [p.__dict__ for p in self.pages],
                    "lines": [None if ln is None else _stored(ln) for ln in self.lines],
                }
            }
        )

    @classmethod
    def from_structured(cls, structured: str | None) -> OcrLayout | None:
        if not structured or not structured.lstrip().startswith("{"):
            return None
        try:
            data = json.loads(structured)["ocr"]
            return cls(
                engine=str(data["engine"]),
                pages=tuple(OcrPage(**p) for p in data["pages"]),
                lines=tuple(None if ln is None else _line(ln) for ln in data["lines"]),
            )
        except (ValueError, KeyError, TypeError):
            return None

    def text_boxes(self) -> TextBoxes:
        """The segment boxes line by line, for the field sources (`reading.words.PageGeometry`)."""
        return TextBoxes(tuple(() if ln is None else ln.boxes for ln in self.lines))

    def locate(self, line_numbers: Sequence[int]) -> tuple[int, float]:
        """(page, confidence) of a value read from these text lines: the weakest line counts."""
        found = [self.lines[i] for i in line_numbers if 0 <= i < len(self.lines)]
        known = [ln for ln in found if ln is not None]
        if not known:
            return (1, 0.0)
        return (known[0].page, min(ln.confidence for ln in known))


def _stored(line: OcrLine) -> list[Any]:
    out: list[Any] = [line.page, line.confidence, [list(b) for b in line.boxes]]
    return [*out, True] if line.euro_by_shape else out


def _line(stored: Sequence[Any]) -> OcrLine:
    boxes = tuple(stored_box(b) for b in stored[2]) if len(stored) > 2 else ()
    return OcrLine(int(stored[0]), float(stored[1]), boxes, len(stored) > 3 and stored[3] is True)
