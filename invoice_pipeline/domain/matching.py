"""Duplicate detection between one new invoice and the invoices already accepted.

Hard rules come first and are never overridden by a similarity score:

* never across organisations (checked here even if the caller passes other orgs' rows);
* never between different document types (a credit note reusing its invoice's number is not a
  duplicate of it);
* the same invoice number from a different seller is not a duplicate;
* the same seller and number with a different payable total (or currency) is not a duplicate;
* fuzzy matches need identical digits in the invoice number: "INV-1001" and "INV-1002" of the
  same seller and amount are two monthly invoices, not one invoice sent twice.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from rapidfuzz import fuzz

from .fields import InvoiceFields
from .keys import BusinessKey
from .normalize import business_key, normalize_invoice_number, normalize_vendor

SELLER_WEIGHT = 0.45
NUMBER_WEIGHT = 0.45
DATE_WEIGHT = 0.10
MISSING_DATE_SIMILARITY = 50.0
# Totals this close are the same amount (rounding); the store's candidate query uses it too.
AMOUNT_TOLERANCE = Decimal("0.01")


@dataclass(frozen=True)
class MatchCandidate:
    invoice_id: str
    org_id: str
    key: BusinessKey
    seller_name: str | None
    seller_vat_id: str | None
    invoice_number: str | None
    payable_total: Decimal | None
    currency: str | None
    issue_date: date | None
    document_type: str

    @classmethod
    def from_fields(cls, invoice_id: str, org_id: str, fields: InvoiceFields) -> MatchCandidate:
        """Raises ValueError when the fields cannot form a business key (no number or vendor)."""
        return cls(
            invoice_id=invoice_id,
            org_id=org_id,
            key=business_key(org_id, fields),
            seller_name=fields.seller_name,
            seller_vat_id=fields.seller_vat_id,
            invoice_number=fields.invoice_number,
            payable_total=fields.payable_total,
            currency=fields.currency,
            issue_date=fields.issue_date,
            document_type=fields.document_type,
        )


@dataclass(frozen=True)
class Match:
    original_id: str
    score: float
    how: str
    reasons: tuple[str, ...]


def _digits(number: str) -> tuple[str, ...]:
    return tuple(run.lstrip("0") or "0" for run in re.findall(r"\d+", number))


def _vat(c: MatchCandidate) -> str | None:
    try:
        v = normalize_vendor(None, c.seller_vat_id) if c.seller_vat_id else None
    except ValueError:
        return None
    return v


def _name(c: MatchCandidate) -> str | None:
    try:
        return normalize_vendor(c.seller_name) if c.seller_name else None
    except ValueError:
        return None


def _amounts(new: MatchCandidate, old: MatchCandidate, tolerance: Decimal) -> str | None:
    """Reason text when totals agree, None when they do not (or are unknown)."""
    a, b = new.payable_total, old.payable_total
    if a is None or b is None or not a.is_finite() or not b.is_finite():
        return None
    if (new.currency or None) != (old.currency or None):
        return None
    if abs(a - b) > tolerance:
        return None
    cur = f" {new.currency}" if new.currency else ""
    return f"same total {a}{cur}" if a == b else f"totals {a} ~ {b}{cur} (within {tolerance})"


def _exact(new: MatchCandidate, old: MatchCandidate, tolerance: Decimal) -> Match | None:
    if new.key != old.key:
        return None
    same_amount = _amounts(new, old, tolerance)
    if same_amount is None:
        return None
    return Match(
        old.invoice_id,
        100.0,
        "exact_key",
        (
            f"same seller ({new.key.vendor})",
            f"invoice number {old.invoice_number} ~ {new.invoice_number} (normalised {new.key.invoice_number})",
            same_amount,
            f"same document type {new.document_type}",
        ),
    )


def _fuzzy(
    new: MatchCandidate, old: MatchCandidate, tolerance: Decimal, days: int, threshold: float
) -> Match | None:
    same_amount = _amounts(new, old, tolerance)
    if same_amount is None or not new.invoice_number or not old.invoice_number:
        return None
    reasons = []

    vat_new, vat_old = _vat(new), _vat(old)
    if vat_new and vat_old:
        if vat_new != vat_old:
            return None
        seller_sim = 100.0
        reasons.append(f"same seller VAT id {vat_new.removeprefix('vat:')}")
    else:
        name_new, name_old = _name(new), _name(old)
        if not name_new or not name_old:
            return None
        seller_sim = float(fuzz.token_sort_ratio(name_new, name_old))
        reasons.append(f"seller names {old.seller_name!r} ~ {new.seller_name!r} ({seller_sim:.0f}%)")

    num_new, num_old = (
        normalize_invoice_number(new.invoice_number),
        normalize_invoice_number(old.invoice_number),
    )
    if _digits(num_new) != _digits(num_old) or not _digits(num_new):
        return None
    if num_new == num_old:
        number_sim = 100.0
        reasons.append(f"invoice number {old.invoice_number} ~ {new.invoice_number} (normalised equal)")
    else:
        # Same digits, different letters ("INV-123" vs "123"): a lost or changed prefix.
        number_sim = 90.0 + float(fuzz.ratio(num_new, num_old)) / 10.0
        reasons.append(f"invoice number {old.invoice_number} ~ {new.invoice_number} (same digits)")

    reasons.append(same_amount)
    if new.issue_date is not None and old.issue_date is not None:
        apart = abs((new.issue_date - old.issue_date).days)
        if apart > days:
            return None
        date_sim = 100.0 - (50.0 * apart / days if days else 0.0)
        reasons.append(f"issue dates {apart} days apart")
    else:
        date_sim = MISSING_DATE_SIMILARITY
        reasons.append("issue date missing on one side")

    score = round(SELLER_WEIGHT * seller_sim + NUMBER_WEIGHT * number_sim + DATE_WEIGHT * date_sim, 2)
    if score < threshold:
        return None
    return Match(old.invoice_id, score, "fuzzy", tuple(reasons))


def find_match(
    candidate: MatchCandidate,
    originals: Iterable[MatchCandidate],
    *,
    amount_tolerance: Decimal = AMOUNT_TOLERANCE,
    date_tolerance_days: int = 3,
    threshold: float = 90.0,
) -> Match | None:
    """The best original `candidate` duplicates, or None.

    Ties go to the exact-key match, then to the original that comes first in `originals`
    (pass them in arrival order, so the earliest accepted copy is the one referenced).
    """
    best: tuple[float, int, int, Match] | None = None
    for index, old in enumerate(originals):
        if old.org_id != candidate.org_id or old.key.org_id != candidate.org_id:
            continue
        if old.document_type != candidate.document_type or old.invoice_id == candidate.invoice_id:
            continue
        match = _exact(candidate, old, amount_tolerance)
        if match is None and old.key != candidate.key:
            match = _fuzzy(candidate, old, amount_tolerance, date_tolerance_days, threshold)
        if match is None:
            continue
        rank = (match.score, 1 if match.how == "exact_key" else 0, -index, match)
        if best is None or rank[:3] > best[:3]:
            best = rank
    return best[3] if best is not None else None
