"""Where a line and its segments are on the page: page numbers and boxes for field sources.

The layout text (`pdf.layout_text`, `ocr`) has one visual line per text line and pages apart
by a "\\f" line. For a text PDF, `TextBoxes` keeps the box (PDF points, origin top-left) of
every segment of every line, stored in `ExtractedText.structured`, and beside each box the share
of the segment's characters set in a bold font (issue 40: a letterhead is often bold); an older
stored text without them still reads, only without boxes or weights. OCR words have no weight.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...domain.fields import Box

BOXES_KEY = "pdf_text_boxes"
BOLD_KEY = "pdf_text_bold"
# A segment: words kept apart from the next by at least three spaces (pdf.SEGMENT_GAP).
_SEGMENT = re.compile(r"\S+(?: {1,2}\S+)*")


@dataclass(frozen=True)
class Segment:
    """A run of text on one line of the layout text, apart from its neighbours by three spaces.

    `index` is its position among the line's segments: its box in `TextBoxes` (the layout text
    and the boxes are cut into the same segments, `pdf._segments`).
    """

    line: int
    index: int
    col: int
    text: str

    @property
    def end(self) -> int:
        return self.col + len(self.text)

    def overlaps(self, start: int, end: int, slack: int) -> bool:
        """Whether it shares columns with [start, end), give or take `slack` characters."""
        return self.col < end + slack and self.end > start - slack


def segments(text: str) -> list[list[Segment]]:
    """The segments of every line of a layout text, line by line."""
    return [
        [Segment(i, k, m.start(), m.group()) for k, m in enumerate(_SEGMENT.finditer(line))]
        for i, line in enumerate(text.replace("\r", "").split("\n"))
    ]


@dataclass(frozen=True)
class TextBoxes:
    """Per text line, the boxes of its segments in reading order (empty for a "\\f" line), and
    when the text layer names its fonts, each segment's bold share (0 to 1) in the same order."""

    lines: tuple[tuple[Box, ...], ...]
    bold: tuple[tuple[float, ...], ...] | None = None

    def to_structured(self) -> str:
        data: dict[str, Any] = {BOXES_KEY: [[list(b) for b in line] for line in self.lines]}
        if self.bold is not None:
            data[BOLD_KEY] = [list(line) for line in self.bold]
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_structured(cls, structured: str | None) -> TextBoxes | None:
        if not structured or not structured.lstrip().startswith("{"):
            return None
        try:
            data = json.loads(structured)
            lines = tuple(tuple(stored_box(b) for b in line) for line in data[BOXES_KEY])
        except (ValueError, KeyError, TypeError, IndexError):
            return None
        return cls(lines, _stored_bold(data.get(BOLD_KEY), lines))

    def bold_share(self, line: int, index: int) -> float | None:
        """The share of a segment's characters in a bold font; None where the layer says nothing."""
        if self.bold is None or not 0 <= line < len(self.bold):
            return None
        row = self.bold[line]
        return row[index] if 0 <= index < len(row) else None


def _stored_bold(values: Any, lines: tuple[tuple[Box, ...], ...]) -> tuple[tuple[float, ...], ...] | None:
    """The stored bold shares, if they line up with the boxes segment for segment; else none."""
    try:
        bold = tuple(tuple(_share(v) for v in line) for line in values)
    except (TypeError, ValueError):
        return None
    if len(bold) != len(lines) or any(len(b) != len(ln) for b, ln in zip(bold, lines, strict=True)):
        return None
    return bold


def _share(value: Any) -> float:
    share = float(value)
    return min(max(share, 0.0), 1.0) if math.isfinite(share) else 0.0


def stored_box(values: Sequence[Any]) -> Box:
    """A box as JSON keeps it (a list of four numbers)."""
    return (float(values[0]), float(values[1]), float(values[2]), float(values[3]))


def union(boxes: Sequence[Box | None]) -> Box | None:
    known = [b for b in boxes if b is not None]
    if not known:
        return None
    return (
        min(b[0] for b in known),
        min(b[1] for b in known),
        max(b[2] for b in known),
        max(b[3] for b in known),
    )


class PageGeometry:
    """Page number (1-based) of each text line and, when known, each segment's box."""

    def __init__(self, text: str, boxes: TextBoxes | None) -> None:
        self.page_of: list[int] = []
        page = 1
        for line in text.replace("\r", "").split("\n"):
            if line == "\f":
                page += 1
            self.page_of.append(page)
        # Boxes that do not line up with the text (a text edited after extraction) are ignored.
        self.boxes = boxes if boxes is not None and len(boxes.lines) == len(self.page_of) else None

    def page(self, line: int) -> int:
        return self.page_of[line] if 0 <= line < len(self.page_of) else 1

    def box(self, line: int, index: int) -> Box | None:
        if self.boxes is None or not 0 <= line < len(self.boxes.lines):
            return None
        row = self.boxes.lines[line]
        return row[index] if 0 <= index < len(row) else None

    def bold(self, line: int, index: int) -> float | None:
        return self.boxes.bold_share(line, index) if self.boxes is not None else None

    def same_column(self, seg: Segment, head: Segment, slack: int) -> bool:
        """Whether `seg` stands under (or over) `head`, give or take `slack` of head's characters.

        With both boxes known this is measured on the page: the layout text places a segment by
        where it starts, in characters of one width, so a right-aligned amount in a larger font
        starts further left in the text than its cell does on the page."""
        a, b = self.box(seg.line, seg.index), self.box(head.line, head.index)
        if a is None or b is None or not head.text:
            return seg.overlaps(head.col, head.end, slack)
        pad = slack * (b[2] - b[0]) / len(head.text)
        return a[0] < b[2] + pad and a[2] > b[0] - pad
