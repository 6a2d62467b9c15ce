"""Turning the text of one element or label into a typed value."""

from __future__ import annotations

import re
from datetime import date
from decimal import Decimal, InvalidOperation

from ..domain.fields import FieldSource
from ..domain.validation import UNPARSEABLE_PREFIX

_SPACE = re.compile(r"\s+")


def collapse(text: str | None) -> str | None:
    """Whitespace collapsed; None when nothing is left."""
    if text is None:
        return None
    out = _SPACE.sub(" ", text).strip()
    return out or None


def strict_decimal(text: str) -> Decimal | None:
    """Structured formats write plain decimals ("1436.5"); anything else is not an amount.

    NaN and Infinity parse here on purpose: validation rejects them with a clear code, which is
    better than silently dropping the field.
    """
    cleaned = text.strip()
    if not re.fullmatch(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?|[+-]?(NaN|Infinity|inf)", cleaned, re.I):
        return None
    try:
        return Decimal(cleaned)
    except InvalidOperation:
        return None


def iso_date(text: str) -> date | None:
    cleaned = text.strip()
    # UBL allows a timezone suffix on xs:date ("2020-01-31Z", "2020-01-31+01:00").
    m = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})(?:Z|[+-]\d{2}:\d{2})?", cleaned)
    if not m:
        return None
    try:
        return date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        return None


def cii_date(text: str, fmt: str | None) -> date | None:
    """UN/CEFACT date: format 102 is CCYYMMDD; tolerate ISO dates some exporters emit instead."""
    cleaned = text.strip()
    if fmt in (None, "", "102") and re.fullmatch(r"\d{8}", cleaned):
        try:
            return date(int(cleaned[:4]), int(cleaned[4:6]), int(cleaned[6:8]))
        except ValueError:
            return None
    return iso_date(cleaned[:10]) if len(cleaned) >= 10 else None


def unparseable(source: str, raw: str, what: str) -> FieldSource:
    """Marks a present-but-invalid value so validation can say "bad", not "missing"."""
    shown = raw if len(raw) <= 40 else raw[:37] + "..."
    return FieldSource(source, 0.0, f"{UNPARSEABLE_PREFIX} {what}: {shown!r}")
