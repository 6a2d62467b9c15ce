"""The text layer of a document, kept separately from the fields read from it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ExtractedText:
    """What `extract_text` recovered from the raw bytes.

    It is stored between pipeline steps, so field extraction can be re-run (with better
    heuristics) without touching the original file again.
    """

    format: str
    text: str
    structured: str | None
    method: str
    page_count: int | None = None
    # A hybrid PDF's text-layer boxes (reading.words.TextBoxes JSON): `structured` holds its XML,
    # and the page is compared with it (documents.page_witness). None for every other document.
    page_boxes: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "text": self.text,
            "structured": self.structured,
            "method": self.method,
            "page_count": self.page_count,
            "page_boxes": self.page_boxes,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ExtractedText:
        return cls(
            format=str(d["format"]),
            text=str(d.get("text") or ""),
            structured=d.get("structured"),
            method=str(d.get("method") or ""),
            page_count=d.get("page_count"),
            page_boxes=d.get("page_boxes"),
        )
