"""Business exceptions: usable invoices that a person must see before they are paid.

Two kinds of trouble reach a person (see the README's "Review and redrive"):

* an **unusable document** is quarantined by `validation.validate_fields` (no number, no total,
  impossible dates, unknown currency...): nothing to decide, the file must be fixed or re-sent;
* a **business exception** is a valid document that breaks what an accounts-payable team
  expects. EN 16931 allows a negative invoice total and puts no order between due date and
  issue date, so quarantining those threw away real, valid e-invoices. They are processed and
  end `needs_review` with the reasons below, and are never posted until a person decides.

Pure: no database, no clock unless `today` is left out.

Every reason starts with a machine-readable code, then a colon, then what a person needs to
decide: `negative_total: payable -120.00 EUR on an invoice (type 380); ...`. The CLI's and the
UI's `--reason` filter and the review-queue report group by that code (`reason_code`). The
approve stage adds one reason of its own, `suspected_duplicate of <id>: ...`, which needs the
database and so is not computed here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal

from .fields import InvoiceFields

NEGATIVE_TOTAL = "negative_total"
DUE_BEFORE_ISSUE = "due_before_issue"
OVER_LIMIT = "over_approval_limit"
FOREIGN_CURRENCY = "foreign_currency"
STALE_INVOICE = "stale_invoice"
SUSPECTED_DUPLICATE = "suspected_duplicate"

# Every code a reason can start with, for argument validation and the docs.
REASON_CODES: tuple[str, ...] = (
    NEGATIVE_TOTAL,
    DUE_BEFORE_ISSUE,
    OVER_LIMIT,
    FOREIGN_CURRENCY,
    STALE_INVOICE,
    SUSPECTED_DUPLICATE,
)

_CODE = re.compile(r"^[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class ReviewPolicy:
    """What one org wants a person to look at. The default holds nothing but what is always
    suspicious (negative invoice totals, due before issue).

    * `auto_approve_limit`: a payable total above it (in the invoice's own currency: there is
      no exchange-rate table, so set `home_currency` too when the org is billed in several)
      needs a person's approval. None: no limit.
    * `home_currency`: an invoice in any other currency is held (a typo'd or unexpected
      currency is a classic AP error). None: any known currency is fine.
    * `stale_after_days`: an invoice issued longer ago than this is held (late invoices are
      where duplicate payments and fraud hide). None: no age limit.
    """

    auto_approve_limit: Decimal | None = None
    home_currency: str | None = None
    stale_after_days: int | None = None

    def __post_init__(self) -> None:
        if self.auto_approve_limit is not None and (
            not self.auto_approve_limit.is_finite() or self.auto_approve_limit < 0
        ):
            raise ValueError(
                f"auto_approve_limit must be a non-negative amount, got {self.auto_approve_limit}"
            )
        if self.home_currency is not None and not re.fullmatch(r"[A-Z]{3}", self.home_currency):
            raise ValueError(f"home_currency must be a 3-letter ISO 4217 code, got {self.home_currency!r}")
        if self.stale_after_days is not None and self.stale_after_days < 1:
            raise ValueError(f"stale_after_days must be at least 1, got {self.stale_after_days}")


DEFAULT_POLICY = ReviewPolicy()


def review_reasons(fields: InvoiceFields, policy: ReviewPolicy, *, today: date | None = None) -> list[str]:
    """Why a person must see this (valid) invoice before it is paid; empty: nothing to see.

    Only called on fields that passed `validate_fields`, so amounts are finite and dates real.
    """
    out: list[str] = []
    payable, currency = fields.payable_total, fields.currency or "?"
    kind = "credit note" if fields.document_type == "credit_note" else "invoice"

    # A credit note may carry either sign (validation.py explains why); an invoice asking for a
    # negative amount is a refund or a correction sent under the wrong type, e.g. a French
    # "avoir" sent as an invoice: a person must say whether to book it as a credit.
    if payable is not None and payable < 0 and fields.document_type == "invoice":
        out.append(
            f"{NEGATIVE_TOTAL}: payable {payable} {currency} on an invoice (type 380); "
            "approve to book it as a credit, or reject and ask the seller for a credit note (type 381)"
        )
    issue, due = fields.issue_date, fields.due_date
    if issue is not None and due is not None and due < issue:
        out.append(
            f"{DUE_BEFORE_ISSUE}: due {due} is {(issue - due).days} day(s) before issue {issue}; "
            "check the payment terms before paying"
        )
    limit = policy.auto_approve_limit
    if limit is not None and payable is not None and abs(payable) > limit:
        out.append(
            f"{OVER_LIMIT}: payable {payable} {currency} is above the org's auto-approval limit {limit}; "
            "a person approves it"
        )
    home = policy.home_currency
    if home is not None and fields.currency is not None and fields.currency != home:
        out.append(
            f"{FOREIGN_CURRENCY}: {kind} in {fields.currency}, the org pays in {home}; check the currency"
        )
    if policy.stale_after_days is not None and issue is not None:
        today = today or date.today()
        if issue < today - timedelta(days=policy.stale_after_days):
            out.append(
                f"{STALE_INVOICE}: issued {issue}, more than {policy.stale_after_days} day(s) ago; "
                "check it was not paid already"
            )
    return out


def reason_code(reason: str) -> str:
    """The machine-readable code a reason starts with ('' when it has none)."""
    match = _CODE.match(reason)
    return match.group(0) if match else ""
