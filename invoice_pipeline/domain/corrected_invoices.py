"""What the ledger books for a corrected invoice (UNTDID 1001 type 384 and its kin): pure.

A corrected invoice refers to the invoice it corrects (BT-25, the preceding invoice reference).
It is never paid on top of it (issue 58): a person approving it chooses

* `replace`: the correction takes the original's place. The ledger then holds, for the original
  and its corrections together, the correction's amount due: the posting is the difference
  between that amount and what is booked for the original now (the original's own posting plus
  every earlier correction's), so only the difference is paid (or credited).
* `reverse`: the correction cancels the original. The posting is minus what is booked for it, so
  the original and its corrections together come to zero.

Either way what is booked for the original after the correction is a function of the choice
and the correction alone, never of how many corrections came before: two corrections in a row
replace, they never add up. The store reads what is booked under an advisory lock on the
original (store/payments.py), so two corrections of one original are booked one after the other.

The original must be decided (posted, or rejected) before a correction of it is booked: a
correction of an invoice that is still held would otherwise be booked beside a posting that
comes later. Money fails closed: anything this module cannot book is a reason, and the
correction stays held.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Literal
from uuid import UUID

from .keys import hash64

CorrectionChoice = Literal["replace", "reverse"]
CORRECTION_CHOICES: tuple[CorrectionChoice, ...] = ("replace", "reverse")


@dataclass(frozen=True)
class OriginalBooking:
    """The invoice a correction refers to, and what the ledger holds for it now."""

    invoice_id: UUID
    invoice_number: str | None
    status: str
    # 'approved' or 'rejected' (None: no decision yet).
    decision: str | None
    # The original's own posting plus every correction's posting against it (0: nothing booked).
    booked: Decimal
    # The currency it was booked in (None: nothing booked).
    booked_currency: str | None


@dataclass(frozen=True)
class CorrectionBooking:
    """The posting an approved correction makes: `amount` is the difference it books."""

    original_id: UUID
    choice: CorrectionChoice
    amount: Decimal


def booking_for_correction(
    choice: CorrectionChoice, amount_due: Decimal, currency: str, original: OriginalBooking
) -> CorrectionBooking | str:
    """The correction's posting, or why it cannot be booked (the correction stays held)."""
    name = f"the invoice it corrects ({original.invoice_number or original.invoice_id})"
    if original.status != "processed" or original.decision is None:
        return f"{name} is not decided yet ({original.status}): approve or reject it first"
    if original.booked_currency is not None and original.booked_currency != currency:
        return (
            f"{name} is booked in {original.booked_currency}, the correction is in {currency}: "
            "a correction in another currency cannot replace or reverse it"
        )
    if choice == "reverse":
        if original.booked == 0:
            return f"nothing is booked for {name}: there is nothing to reverse; reject the correction"
        return CorrectionBooking(original.invoice_id, choice, -original.booked)
    return CorrectionBooking(original.invoice_id, choice, amount_due - original.booked)


def original_lock_id(org_id: str, original_id: UUID) -> int:
    """The advisory lock under which what is booked for an original is read and added to."""
    return hash64("\x1f".join(("corrects", org_id, str(original_id))))


def choice_text(choice: CorrectionChoice) -> str:
    return (
        "replaces the invoice it corrects (the difference is booked)"
        if choice == "replace"
        else "reverses the invoice it corrects (what was booked for it is taken back)"
    )
