"""What the review page reads: plain frozen values, no database handle (the store fills them)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID


@dataclass(frozen=True)
class QueueRow:
    invoice_id: UUID
    org_id: str
    filename: str | None
    invoice_number: str | None
    seller_name: str | None
    payable_total: Decimal | None
    currency: str | None
    duplicate_status: str | None
    review_reasons: list[str]
    since: datetime
    age: timedelta


@dataclass(frozen=True)
class QueueCount:
    """Held invoices per reason code (or per org: `reason` is then the org id)."""

    reason: str
    invoices: int
    oldest: timedelta


@dataclass(frozen=True)
class QueueFilter:
    """The queue's filters; `orgs` is what the reviewer may see (None: every org)."""

    orgs: tuple[str, ...] | None = None
    org_id: str | None = None
    reason: str | None = None
    older_than: timedelta | None = None

    def params(self) -> dict[str, Any]:
        return {
            "orgs": list(self.orgs) if self.orgs is not None else None,
            "org_id": self.org_id,
            "reason": self.reason,
            "older_than": self.older_than,
        }


@dataclass(frozen=True)
class QueuePage:
    rows: list[QueueRow]
    total: int
    offset: int
    limit: int


@dataclass(frozen=True)
class ReviewInvoice:
    """One invoice as the review page shows it."""

    invoice_id: UUID
    org_id: str
    status: str
    filename: str | None
    sha256: str | None
    fields: dict[str, Any] | None
    duplicate_status: str | None
    duplicate_of: UUID | None
    match_how: str | None
    match_score: float | None
    match_reasons: list[str]
    review_reasons: list[str]
    since: datetime
    attempts: int
    redrives: int
    quarantine_code: str | None
    quarantine_reason: str | None
    last_error: str | None
    format: str | None
    method: str | None
    page_count: int | None
    approval: str | None
    approval_rule: str | None
    posted_amount: Decimal | None
    posted_currency: str | None
    posted_at: datetime | None


@dataclass(frozen=True)
class HistoryEntry:
    """One review_actions row, with the values a correction changed."""

    id: int
    action: str
    actor: str
    note: str | None
    from_status: str
    to_status: str
    review_reasons: list[str]
    detail: str | None
    values_before: dict[str, Any] | None
    values_after: dict[str, Any] | None
    at: datetime
