"""The records of the review queue and its actions: plain frozen values, no database handle.

Apart from `records.py` so the review feature can grow without touching the pipeline's records;
the store, the CLI, the Dagster review jobs and the report asset all name them from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Literal
from uuid import UUID

Action = Literal["approve", "reject", "not_duplicate", "confirm_duplicate", "requeue", "correct"]
ACTIONS: tuple[Action, ...] = (
    "approve",
    "reject",
    "not_duplicate",
    "confirm_duplicate",
    "requeue",
    "correct",
)

# Where each action may start from. Everything else is refused before any lock is taken, and
# checked again under the lock (the status may have moved in between).
ACTION_FROM: dict[Action, tuple[str, ...]] = {
    "approve": ("needs_review",),
    "reject": ("needs_review",),
    "not_duplicate": ("needs_review",),
    "confirm_duplicate": ("needs_review",),
    # A dead letter, a failed attempt waiting for its backoff, or a quarantined file after a fix.
    "requeue": ("needs_attention", "failed", "quarantined"),
    # A person's correction of fields (engine/corrections.py): the invoice stays held.
    "correct": ("needs_review",),
}


@dataclass(frozen=True)
class ReviewTarget:
    """An invoice an action may apply to, as the queue lists it."""

    invoice_id: UUID
    org_id: str
    status: str
    filename: str | None
    invoice_number: str | None
    seller_name: str | None
    payable_total: Decimal | None
    currency: str | None
    duplicate_status: str | None
    duplicate_of: UUID | None
    review_reasons: list[str]
    quarantine_code: str | None
    last_error: str | None
    attempts: int
    redrives: int
    since: datetime
    age: timedelta


@dataclass(frozen=True)
class LockedTarget:
    """The invoice inside an action's fenced transaction, its row locked."""

    invoice_id: UUID
    org_id: str
    status: str
    duplicate_status: str | None
    duplicate_of: UUID | None
    review_reasons: list[str] | None
    fields: dict[str, Any] | None
    attempts: int
    redrives: int
    quarantine_code: str | None
    last_error: str | None


@dataclass(frozen=True)
class ActionOutcome:
    """What one action did to one invoice: applied (`done`) or refused, and why."""

    invoice_id: UUID
    action: Action
    done: bool
    from_status: str | None
    to_status: str | None
    message: str


@dataclass(frozen=True)
class ReviewActionRecord:
    """One row of the append-only audit table review_actions."""

    id: int
    invoice_id: UUID
    job_id: UUID
    action: str
    actor: str
    note: str | None
    from_status: str
    to_status: str
    review_reasons: list[str]
    detail: str | None
    at: datetime


@dataclass(frozen=True)
class ReviewQueueLine:
    """How many held invoices one org has for one reason code, and the oldest one's wait."""

    org_id: str
    reason: str
    invoices: int
    oldest: timedelta
