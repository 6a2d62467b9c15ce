"""Duplicate detection between one new invoice and the invoices already accepted.

One seller's number is paid once (issue 58): two documents of one seller whose normalised
numbers agree are the same invoice unless a person says otherwise, whatever their amounts,
formats or dates. So the amounts and the dates decide only *how* a pair is decided, never
*whether* it is compared.

Every pair first passes a gate of hard rules; no similarity score overrides them:

* never across organisations (checked here even if the caller passes other orgs' rows);
* never between different document types (a credit note reusing its invoice's number is not a
  duplicate of it);
* the same currency (totals of different currencies are never one amount);
* the same number skeleton: "INV-1001" and "INV-1002" of the same seller are two monthly
  invoices, not one invoice sent twice; "INV-1001", "1001" and "inv 1001" are one number.

The gate is what `domain/keys.py` derives the blocking key (the advisory locks and the candidate
search) from: widen it there first, or copies will race and hide from each other.

Past the gate, the seller must be the same: by VAT id when both sides have one (a different VAT
id is a different seller, whatever the names say), otherwise by name.

* **exact** (an automatic `duplicate`, rejected): the same normalised seller, number, document
  type and currency, equal amounts as posted, and the same issue year (or a date missing on one
  side); a rounding difference of a cent is held, never rejected unseen. Invoice "7" of 2026 is not invoice "7" of 2025.
* **fuzzy** (`suspected`, held for a person with both shown): every other agreement of number
  and seller — another amount, another year, a reformatted or OCR-confused number at any
  distance in time, a seller named alike but not identically. A pair of one seller (VAT ids
  equal, or names equal once normalised) is held whatever its score; a seller recognised only
  by a similar name must reach the score threshold, to which close issue dates add (they raise
  the score, they never gate it).

Amounts are compared as posted: a credit note's total is a credit whatever its sign, so a UBL
CreditNote of +100 and a CII 381 of -100 are the same amount.

A pair that cannot pass the gate because one side lacks what the gate compares (no currency, no
digits in the number, so no blocking key) is not waved through unchecked: **number twins** (the
same org, document type and normalised number, `keys.NumberKey`) of the same seller are
compared on what both sides do have. Currencies that both sides state and that differ make them
two invoices. Otherwise: exact when both state the same currency and the same total, in the
same year, else suspected — a scan that read less than the
e-invoice it copies is held for a person, never paid.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from rapidfuzz import fuzz

from .doctypes import duplicate_class
from .fields import InvoiceFields
from .keys import AMOUNT_TOLERANCE, BlockingKey, BusinessKey, NumberKey
from .normalize import (
    blocking_key,
    business_key,
    normalize_currency,
    normalize_invoice_number,
    normalize_vat_id,
    normalize_vendor,
)

SELLER_WEIGHT = 0.45
NUMBER_WEIGHT = 0.45
DATE_WEIGHT = 0.10
MISSING_DATE_SIMILARITY = 50.0
EXACT = "exact_key"
FUZZY = "fuzzy"


@dataclass(frozen=True)
class MatchCandidate:
    invoice_id: str
    org_id: str
    key: BusinessKey
    block: BlockingKey | None
    seller_name: str | None
    seller_vat_id: str | None
    invoice_number: str | None
    payable_total: Decimal | None
    currency: str | None
    issue_date: date | None
    document_type: str

    @property
    def number(self) -> NumberKey:
        return NumberKey(self.org_id, self.key.document_type, self.key.invoice_number)

    @property
    def stored_keys(self) -> dict[str, object]:
        """The keys a decided invoice keeps in its row (invoices' key columns), by column name."""
        return {
            "business_key": self.key.text,
            "business_key_hash": self.key.hash,
            "vendor_key": self.key.vendor,
            "block_key": self.block.id if self.block else None,
            "number_key": self.number.id,
        }

    @classmethod
    def from_fields(cls, invoice_id: str, org_id: str, fields: InvoiceFields) -> MatchCandidate:
        """Raises ValueError when the fields cannot form a business key (no number or vendor)."""
        return cls(
            invoice_id=invoice_id,
            org_id=org_id,
            key=business_key(org_id, fields),
            block=blocking_key(org_id, fields),
            seller_name=fields.seller_name,
            seller_vat_id=fields.seller_vat_id,
            invoice_number=fields.invoice_number,
            payable_total=fields.payable_total,
            currency=fields.currency,
            issue_date=fields.issue_date,
            document_type=duplicate_class(fields),
        )


@dataclass(frozen=True)
class Match:
    original_id: str
    score: float
    how: str
    reasons: tuple[str, ...]

    @property
    def exact(self) -> bool:
        return self.how == EXACT


def posted_amount(c: MatchCandidate) -> Decimal | None:
    """The total as the ledger posts it: a credit note is a credit whatever sign its format gave
    it (engine/stages.py posts -abs), an invoice as it stands; None when not known."""
    total = c.payable_total
    if total is None or not total.is_finite():
        return None
    return -abs(total) if c.document_type == "credit_note" else total


def passes_gate(new: MatchCandidate, old: MatchCandidate) -> bool:
    """The hard rules every accepted pair meets; the blocking key is made of exactly these."""
    a, b = new.block, old.block
    if a is None or b is None:
        return False
    return (
        new.org_id == old.org_id == a.org_id == b.org_id
        and new.invoice_id != old.invoice_id
        and (a.document_type, a.currency, a.number_skeleton)
        == (b.document_type, b.currency, b.number_skeleton)
    )


def _name(c: MatchCandidate) -> str | None:
    try:
        return normalize_vendor(c.seller_name) if c.seller_name else None
    except ValueError:
        return None


def _seller(new: MatchCandidate, old: MatchCandidate) -> tuple[float, bool, str] | None:
    """(similarity, exact, reason) when the sellers are the same one, else None."""
    vat_new, vat_old = normalize_vat_id(new.seller_vat_id), normalize_vat_id(old.seller_vat_id)
    if vat_new and vat_old:
        if vat_new != vat_old:
            return None
        return 100.0, True, f"same seller VAT id {vat_new}"
    name_new, name_old = _name(new), _name(old)
    if not name_new or not name_old:
        return None
    similarity = float(fuzz.token_sort_ratio(name_new, name_old))
    # Equal names count as the same seller only when neither side has a VAT id to contradict.
    exact = name_new == name_old and not vat_new and not vat_old
    how = "same normalised name" if exact else f"{similarity:.0f}% similar, by name only"
    return similarity, exact, f"seller names {old.seller_name!r} ~ {new.seller_name!r} ({how})"


def _amounts(new: MatchCandidate, old: MatchCandidate, currency: str) -> tuple[bool, str]:
    """(the amounts as posted are equal, why); unknown never agrees. A rounding difference (at
    most AMOUNT_TOLERANCE) is the same invoice's amount only in a person's eyes: held, never
    rejected unseen (issue 58: "equal amounts in the same year: a duplicate")."""
    a, b = posted_amount(new), posted_amount(old)
    cur = f" {currency}" if currency else ""
    if a is None or b is None:
        return False, "payable total missing on one side: the amounts could not be compared"
    if a == b:
        return True, f"same total {b}{cur}"
    if abs(a - b) <= AMOUNT_TOLERANCE:
        return False, (
            f"totals {old.payable_total} ~ {new.payable_total}{cur} (within {AMOUNT_TOLERANCE}): a rounding "
            "difference, or two invoices; a person decides"
        )
    return False, (
        f"totals {old.payable_total} and {new.payable_total}{cur} differ by {abs(a - b)}: "
        f"a person decides whether the seller's number {new.invoice_number} was re-priced or is another invoice"
    )


def _dates(new: MatchCandidate, old: MatchCandidate, days: int) -> tuple[bool, float, str]:
    """(same issue year or a date missing, similarity for the score, why). Dates far apart
    score nothing, but never stop one seller's number from being compared."""
    if new.issue_date is None or old.issue_date is None:
        return True, MISSING_DATE_SIMILARITY, "issue date missing on one side"
    apart = abs((new.issue_date - old.issue_date).days)
    close = 100.0 - (50.0 * apart / days if days else 0.0) if apart <= days else 0.0
    if new.issue_date.year != old.issue_date.year:
        return (
            False,
            close,
            f"issued {old.issue_date} and {new.issue_date}, in another year: "
            "a person decides whether the number was reused or the invoice re-sent",
        )
    return True, close, f"issue dates {apart} days apart"


def twins(new: MatchCandidate, old: MatchCandidate) -> bool:
    """Number twins that the gate cannot fully compare: one side has no blocking key or no currency."""
    return (
        new.org_id == old.org_id
        and new.invoice_id != old.invoice_id
        and new.number == old.number
        and not (gate_comparable(new) and gate_comparable(old))
    )


def gate_comparable(c: MatchCandidate) -> bool:
    """Everything the gate compares is known: a blocking key, and a currency in it."""
    return c.block is not None and bool(c.block.currency)


def _compare_twins(new: MatchCandidate, old: MatchCandidate, days: int, threshold: float) -> Match | None:
    seller = _seller(new, old)
    if seller is None or seller[0] < threshold:
        return None
    seller_sim, seller_exact, seller_reason = seller
    reasons = [seller_reason, f"same invoice number {new.invoice_number} ~ {old.invoice_number}"]
    cur_new, cur_old = _currency(new), _currency(old)
    if cur_new and cur_old and cur_new != cur_old:
        return None  # totals of different currencies are never one amount
    amounts_agree, amount_reason = _amounts(new, old, cur_old or cur_new or "")
    same_year, _, date_reason = _dates(new, old, days)
    reasons += [amount_reason, date_reason]
    if cur_new and cur_old and seller_exact and amounts_agree and same_year:
        return Match(old.invoice_id, 100.0, EXACT, (*reasons, f"same document type {new.document_type}"))
    if not (cur_new and cur_old):
        reasons.append("currency missing on one side: only the number and the seller could be compared")
    return Match(old.invoice_id, round(seller_sim, 2), FUZZY, tuple(reasons))


def _currency(c: MatchCandidate) -> str | None:
    return normalize_currency(c.currency) or None


def _compare(new: MatchCandidate, old: MatchCandidate, days: int, threshold: float) -> Match | None:
    if twins(new, old):
        return _compare_twins(new, old, days, threshold)
    if not passes_gate(new, old):
        return None
    seller = _seller(new, old)
    if seller is None:
        return None
    seller_sim, seller_exact, seller_reason = seller
    assert new.block is not None
    amounts_agree, amount_reason = _amounts(new, old, new.block.currency)
    same_year, date_sim, date_reason = _dates(new, old, days)
    same_number = new.key.invoice_number == old.key.invoice_number
    number_reason = (
        f"invoice number {old.invoice_number} ~ {new.invoice_number} (normalised {new.key.invoice_number})"
        if same_number
        else f"invoice number {old.invoice_number} ~ {new.invoice_number} (same digits {new.block.number_skeleton})"
    )
    if seller_exact and same_number and amounts_agree and same_year:
        reasons = (seller_reason, number_reason, amount_reason, f"same document type {new.document_type}")
        return Match(old.invoice_id, 100.0, EXACT, reasons)

    number_sim = (
        100.0
        if same_number
        else 90.0
        + float(
            fuzz.ratio(
                normalize_invoice_number(new.invoice_number or ""),
                normalize_invoice_number(old.invoice_number or ""),
            )
        )
        / 10.0
    )
    score = round(SELLER_WEIGHT * seller_sim + NUMBER_WEIGHT * number_sim + DATE_WEIGHT * date_sim, 2)
    # One seller (VAT ids equal, or names equal once normalised) and one number: held whatever
    # the score says. Only a seller recognised by a similar name needs the score.
    if seller_sim < 100.0 and score < threshold:
        return None
    return Match(old.invoice_id, score, FUZZY, (seller_reason, number_reason, amount_reason, date_reason))


def find_match(
    candidate: MatchCandidate,
    originals: Iterable[MatchCandidate],
    *,
    date_tolerance_days: int = 3,
    threshold: float = 90.0,
) -> Match | None:
    """The original `candidate` copies, or None.

    An exact match beats any fuzzy one; among equals the higher score wins, then the original
    that comes first in `originals` (pass them in arrival order, so the earliest accepted copy
    is the one referenced).
    """
    best: tuple[tuple[int, float, int], Match] | None = None
    for index, old in enumerate(originals):
        match = _compare(candidate, old, date_tolerance_days, threshold)
        if match is None:
            continue
        rank = (1 if match.exact else 0, match.score, -index)
        if best is None or rank > best[0]:
            best = (rank, match)
    return best[1] if best is not None else None
