"""A person's corrections to an invoice's fields: parsed, typed and applied. Pure, no database.

`invoice-pipeline review correct ID --set payable_total=29.99 --set issue_date=2015-07-02`, the
review page's form and the `correct_invoice` Launchpad job all hand their text here, so one
set of rules says what a correction may say. A corrected value's source says who gave it: a
value a person typed is no page reading, so an amount a person corrected needs no arithmetic
check (`InvoiceFields.payable_from_page` is False for it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any

from .fields import FIELD_NAMES, FieldSource, InvoiceFields
from .review import CORRECTED

__all__ = ["CORRECTED", "CorrectionError", "apply_changes", "parse_changes", "parse_value"]

# The source prefix of a value a person gave.
REVIEW_SOURCE = "review:"

DATE_FIELDS = ("issue_date", "due_date")
AMOUNT_FIELDS = ("net_total", "tax_total", "payable_total")
TEXT_LIMIT = 500
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class CorrectionError(ValueError):
    """A correction that cannot be applied as given; the message says why."""


def parse_assignment(text: str) -> tuple[str, str]:
    """'payable_total=29.99' -> ('payable_total', '29.99')."""
    name, sep, value = text.partition("=")
    if not sep:
        raise CorrectionError(f"a correction looks like field=value, got {text!r}")
    return name.strip(), value.strip()


def parse_value(name: str, text: str) -> Any:
    """The typed value of one field, from what a person typed ('' clears an optional field)."""
    if name not in FIELD_NAMES:
        raise CorrectionError(f"no field {name!r}; the fields are {', '.join(FIELD_NAMES)}")
    text = text.strip()
    if _CONTROL.search(text):
        raise CorrectionError(f"{name}: control characters are not allowed")
    if len(text) > TEXT_LIMIT:
        raise CorrectionError(f"{name}: at most {TEXT_LIMIT} characters")
    if name == "document_type":
        if text not in ("invoice", "credit_note"):
            raise CorrectionError("document_type is invoice or credit_note")
        return text
    if not text:
        if name in ("invoice_number", "payable_total"):
            raise CorrectionError(f"{name} cannot be cleared: every invoice needs one")
        return None
    if name in DATE_FIELDS:
        try:
            return date.fromisoformat(text)
        except ValueError:
            raise CorrectionError(f"{name} must be a date as YYYY-MM-DD, got {text!r}") from None
    if name in AMOUNT_FIELDS:
        try:
            value = Decimal(text.replace(" ", ""))
        except InvalidOperation:
            raise CorrectionError(f"{name} must be an amount such as 29.99, got {text!r}") from None
        if not value.is_finite():
            raise CorrectionError(f"{name} must be a finite amount, got {text!r}")
        return value
    if name == "currency":
        code = text.upper()
        if not re.fullmatch(r"[A-Z]{3}", code):
            raise CorrectionError(f"currency must be a 3-letter ISO 4217 code, got {text!r}")
        return code
    return text


def parse_changes(assignments: Iterable[str] | Mapping[str, str]) -> dict[str, Any]:
    """Typed changes from 'name=value' texts (or a name -> text mapping); a name given twice is refused."""
    pairs = (
        list(assignments.items())
        if isinstance(assignments, Mapping)
        else [parse_assignment(a) for a in assignments]
    )
    out: dict[str, Any] = {}
    for name, text in pairs:
        if name in out:
            raise CorrectionError(f"{name} is given twice")
        out[name] = parse_value(name, text)
    if not out:
        raise CorrectionError("nothing to correct: give at least one field=value")
    return out


def as_text(value: Any) -> str | None:
    """A field value as the audit trail and the page show it."""
    if value is None:
        return None
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def apply_changes(
    fields: InvoiceFields, changes: Mapping[str, Any], reviewer: str, note: str | None = None
) -> tuple[InvoiceFields, dict[str, str | None], dict[str, str | None]]:
    """The corrected fields, and the values before and after of each field given.

    A field set to the value it already had is still recorded: a person confirming an amount
    read from the page (so it no longer waits for an arithmetic check) is a correction too.
    """
    sources = dict(fields.sources)
    before: dict[str, str | None] = {}
    after: dict[str, str | None] = {}
    updates: dict[str, Any] = {}
    for name, value in changes.items():
        if name not in FIELD_NAMES:
            raise CorrectionError(f"no field {name!r}")
        before[name] = as_text(getattr(fields, name))
        after[name] = as_text(value)
        updates[name] = value
        old = fields.sources.get(name)
        why = f"was {before[name] if before[name] is not None else 'empty'}" + (
            f" ({old.source})" if old is not None else ""
        )
        # The page and box of the reading stay, so the page still shows where it was read.
        sources[name] = FieldSource(
            f"{REVIEW_SOURCE} corrected by {reviewer}",
            1.0,
            f"{why}; {note}" if note else why,
            old.page if old is not None else None,
            old.box if old is not None else None,
        )
    return replace(fields, **updates, sources=sources), before, after


def describe(before: Mapping[str, str | None], after: Mapping[str, str | None]) -> str:
    return ", ".join(f"{name} {before[name] or '(empty)'} -> {after[name] or '(empty)'}" for name in after)
