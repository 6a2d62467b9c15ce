"""The records of delivering postings to the books (docs/exports.md): targets, the leases on
export rows, a batch's items, a delivery's outcome, and what `export status` shows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal
from uuid import UUID

TARGET_KINDS = ("datev", "webhook")


@dataclass(frozen=True)
class ExportTarget:
    """Where an org's postings go: a DATEV folder or a webhook. `settings` holds no secret."""

    id: int
    org_id: str
    name: str
    kind: str
    settings: dict[str, Any]
    enabled: bool
    batch_size: int
    max_attempts: int
    retry_base: timedelta


@dataclass(frozen=True)
class ExportLease:
    """A running export_jobs row, as its holder knows it: the job id is the fencing token."""

    job_id: UUID
    export_id: UUID
    attempt: int
    batch_id: UUID


@dataclass(frozen=True)
class ExportJobRecord:
    """An export_jobs row as the sweep's run reconciler reads it (a delivery run's leases)."""

    job_id: UUID
    export_id: UUID
    status: str
    error: str | None
    # Seconds since the job was last finished or heartbeated, on the database clock.
    idle_seconds: float


@dataclass(frozen=True)
class BatchItem:
    """One posting of a batch, with what a target writes of it."""

    export_id: UUID
    posting_id: UUID
    invoice_id: UUID
    seq: int
    amount: Decimal
    currency: str
    invoice_number: str | None
    issue_date: date | None
    due_date: date | None
    iban: str | None
    vendor_id: int | None
    registered_name: str | None
    registered_vat_id: str | None
    printed_seller_name: str | None
    printed_seller_vat_id: str | None
    payment_means: str | None
    correction_choice: str | None
    corrects_invoice_id: UUID | None
    posted_at: datetime
    document_sha256: str | None
    document_type: str | None
    vendor_identifiers: list[str]

    @property
    def vendor_name(self) -> str:
        return self.registered_name or self.printed_seller_name or ""


@dataclass(frozen=True)
class Batch:
    """A claimed batch: its id and creation time (a DATEV file's name and header), every row of
    it, and the leases this claim holds (the rows it may mark)."""

    target: ExportTarget
    batch_id: UUID
    created_at: datetime
    items: tuple[BatchItem, ...]
    leases: tuple[ExportLease, ...]

    def held_items(self) -> list[BatchItem]:
        held = {lease.export_id for lease in self.leases}
        return [item for item in self.items if item.export_id in held]


# A delivery's outcome for one export row: delivered; retry (408/429/5xx, a timeout, a cut
# connection); final (the target refused it for good: dead-lettered at once).
Verdict = Literal["delivered", "retry", "final"]


@dataclass(frozen=True)
class Delivery:
    export_id: UUID
    verdict: Verdict
    answer: str


@dataclass(frozen=True)
class Recorded:
    """What the fenced outcome wrote: the rows marked, and those whose lease was gone (nothing
    written for them: someone else delivers them)."""

    delivered: int
    retried: int
    dead: int
    lost: int


@dataclass(frozen=True)
class TargetStatus:
    org_id: str
    name: str
    kind: str
    enabled: bool
    due: int
    in_flight: int
    delivered: int
    dead: int
    next_due: datetime | None


@dataclass(frozen=True)
class DeadLetter:
    export_id: UUID
    invoice_id: UUID
    org_id: str
    target: str
    attempts: int
    answer: str | None
