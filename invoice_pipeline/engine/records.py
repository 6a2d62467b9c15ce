"""The records the store reads and writes: plain frozen values, no database handle inside.

They travel from the store to the ops, the CLI and the reports; keeping them apart from
`engine/store/` lets any of those name a record without importing the connection pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, Generic, Literal, TypeVar
from uuid import UUID

from invoice_pipeline.domain.corrected_invoices import CorrectionChoice


@dataclass(frozen=True)
class Lease:
    """A running processing_jobs row, as its holder knows it. The job id is the fencing token
    every write carries; whether the lease still holds is the database's to say, not this value's."""

    job_id: UUID
    invoice_id: UUID
    attempt: int
    owner: str | None


@dataclass(frozen=True)
class AcquiredLock:
    """One invoice of a chunk whose lock was taken: its new job and attempt."""

    invoice_id: UUID
    org_id: str
    job_id: UUID
    attempt: int


@dataclass(frozen=True)
class LockHolder:
    """Who holds an invoice's lock, as the processing_jobs row says."""

    job_id: UUID
    invoice_id: UUID
    attempt: int
    owner: str | None
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_age: timedelta

    def describe(self) -> str:
        return (
            f"job {self.job_id} (attempt {self.attempt}, owner {self.owner or 'unknown'}) "
            f"since {self.started_at.isoformat()}, last heartbeat {self.heartbeat_age.total_seconds():.1f}s ago"
        )


R = TypeVar("R")


# Where an invoice rests until a person acts: no run picks it up again by itself.
TERMINAL_STATUSES = ("processed", "needs_review", "quarantined", "needs_attention")


@dataclass(frozen=True)
class JobRecord:
    job_id: UUID
    invoice_id: UUID
    attempt: int
    status: str
    owner: str | None
    started_at: datetime
    heartbeat_at: datetime
    finished_at: datetime | None
    error: str | None


@dataclass(frozen=True)
class IngestResult:
    invoice_id: UUID
    sha256: str
    created: bool


@dataclass(frozen=True)
class StoredDocument:
    invoice_id: UUID
    org_id: str
    filename: str | None
    sha256: str
    content: bytes


@dataclass(frozen=True)
class InvoiceState:
    invoice_id: UUID
    org_id: str
    status: str
    processing_stage: str | None
    attempts: int
    next_attempt_at: datetime
    last_error: str | None
    quarantine_code: str | None
    quarantine_reason: str | None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


@dataclass(frozen=True)
class DuplicateDecision:
    """The outcome of duplicate detection for one invoice, with why."""

    invoice_id: UUID
    status: Literal["original", "duplicate", "suspected"]
    group_id: UUID | None
    original_id: UUID | None
    business_key: str
    how: str | None
    score: Decimal | None
    reasons: list[str]

    @property
    def is_duplicate(self) -> bool:
        """An exact copy: rejected automatically."""
        return self.status == "duplicate"

    @property
    def is_suspected(self) -> bool:
        """A copy only by tolerance: held for a person, neither approved nor rejected."""
        return self.status == "suspected"


@dataclass(frozen=True)
class Approval:
    decision: Literal["approved", "rejected"]
    rule: str
    decided_at: datetime
    # What the person who approved it vouched for: each reason shown, as domain/payment.Reason.voucher.
    vouched: tuple[str, ...] = ()
    # A corrected invoice's approval: whether it replaces or reverses the original it names
    # (domain/corrected_invoices.py).
    correction_choice: CorrectionChoice | None = None
    corrects_invoice_id: UUID | None = None

    @property
    def approver(self) -> str | None:
        """The person who approved it (store/review.py writes "approved by <actor>"); None when
        the pipeline approved it by itself."""
        prefix = "approved by "
        if self.decision != "approved" or not self.rule.startswith(prefix):
            return None
        return self.rule[len(prefix) :].split(": ", 1)[0] or None


@dataclass(frozen=True)
class LedgerPosting:
    posting_id: UUID
    invoice_id: UUID
    amount: Decimal
    currency: str
    posted_at: datetime
    vendor_id: int | None = None
    vendor_name: str | None = None
    invoice_number: str | None = None
    issue_date: date | None = None
    due_date: date | None = None
    iban: str | None = None
    # The registry's name and VAT id of the vendor at posting time, beside what the document printed.
    registered_name: str | None = None
    registered_vat_id: str | None = None
    printed_seller_name: str | None = None
    printed_seller_vat_id: str | None = None
    # How the invoice is settled (domain/doctypes.payment_means_kind: "transfer", "direct_debit",
    # "card", ...); None: the document names no means. A direct debit is collected by the seller:
    # the export must not pay it by transfer as well (docs/formats.md "Payment means").
    payment_means: str | None = None
    # A corrected invoice's posting: the difference it books against the original it corrects.
    correction_choice: CorrectionChoice | None = None
    corrects_invoice_id: UUID | None = None


@dataclass(frozen=True)
class DueInvoice:
    invoice_id: UUID
    org_id: str
    attempt: int
    # How many times a person requeued it: part of the run key, so a redrive is launched anew.
    redrive: int
    seq: int


@dataclass(frozen=True)
class Rescheduled:
    invoice_id: UUID
    status: str
    attempts: int
    next_attempt_at: datetime
    last_error: str | None


@dataclass(frozen=True)
class OpenRequests:
    """Invoices requested for one owner (see request_owner.py) and not yet claimed."""

    owner: str
    invoices: int
    age: timedelta


@dataclass(frozen=True)
class DuplicateCandidateRow:
    id: UUID
    org_id: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class MatchOutcome:
    original_id: UUID
    exact: bool
    how: str
    score: float
    reasons: tuple[str, ...]

    def params(self) -> dict[str, Any]:
        return {
            "original_id": self.original_id,
            "how": self.how,
            "score": self.score,
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class AttentionItem:
    invoice_id: UUID
    org_id: str
    status: str
    code: str
    reason: str
    filename: str | None


@dataclass(frozen=True)
class StatusSummary:
    by_status: dict[str, int]
    by_stage: dict[str, int]
    locks_held: int
    oldest_lock_started_at: datetime | None
    stalest_heartbeat_age: timedelta | None
    originals: int
    duplicates: int
    suspected_duplicates: int
    duplicate_groups: int
    attention: list[AttentionItem]


@dataclass(frozen=True)
class InvoiceOverview:
    invoice_id: UUID
    org_id: str
    status: str
    processing_stage: str | None
    attempts: int
    next_attempt_at: datetime
    filename: str | None
    sha256: str | None
    last_error: str | None
    quarantine_code: str | None
    quarantine_reason: str | None
    fields: dict[str, Any] | None
    duplicate_status: str | None
    duplicate_of: UUID | None
    duplicate_group_id: UUID | None
    match_how: str | None
    match_reasons: list[str] | None
    review_reasons: list[str] | None
    created_at: datetime


@dataclass(frozen=True)
class InvoiceOutcome:
    filename: str | None
    status: str
    duplicate_status: str | None
    duplicate_of: UUID | None
    original_filename: str | None
    match_how: str | None
    code: str
    reason: str
    approval: str | None
    posted: bool


@dataclass(frozen=True)
class ChunkWrite(Generic[R]):
    """What a fenced write for a chunk did, per invoice."""

    written: dict[UUID, R]
    # The job was no longer running (swept, or finished): nothing was written for the invoice.
    lost: dict[UUID, str]
    # The database refused this invoice's write (its data); the chunk's others were written.
    failed: dict[UUID, Exception]


@dataclass(frozen=True)
class Verdict:
    """The approval stage's result for one invoice."""

    decision: Literal["approved", "rejected", "held"]
    rule: str
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Posting:
    """What the ledger records: whom it pays (the registry's vendor), for what, how much, where to."""

    org_id: str
    amount: Decimal
    currency: str
    invoice_number: str | None = None
    issue_date: date | None = None
    due_date: date | None = None
    iban: str | None = None
    # The vendor paid: confirmed or registered in the posting's transaction (store/payments.py;
    # the single-invoice helper for tests may leave it unset).
    vendor_id: int | None = None
    # The registry's name and VAT id of that vendor at posting time, beside what the document printed.
    registered_name: str | None = None
    registered_vat_id: str | None = None
    printed_seller_name: str | None = None
    printed_seller_vat_id: str | None = None
    # How the invoice is settled (domain/doctypes.payment_means_kind: "transfer", "direct_debit",
    # "card", ...); None: the document names no means. A direct debit is collected by the seller:
    # the export must not pay it by transfer as well (docs/formats.md "Payment means").
    payment_means: str | None = None
    # A corrected invoice's posting: the difference it books against the original it corrects.
    correction_choice: CorrectionChoice | None = None
    corrects_invoice_id: UUID | None = None


@dataclass(frozen=True)
class Quarantine:
    code: str
    reason: str


@dataclass(frozen=True)
class CurrencyTotal:
    currency: str
    invoices: int
    total: Decimal


@dataclass(frozen=True)
class MetricTotal:
    """One maintained counter series (sql/0018_metrics.sql): `le` is a histogram bucket's upper
    bound (inf for a plain counter), `n` the count, `amount` its sum (money, seconds, pages)."""

    metric: str
    label: str
    le: float
    n: int
    amount: Decimal


@dataclass(frozen=True)
class InFlightCount:
    status: str
    stage: str
    n: int


@dataclass(frozen=True)
class HeldCount:
    reason: str
    n: int


@dataclass(frozen=True)
class QueueGauges:
    due: int
    oldest_due_seconds: float
    oldest_held_seconds: float
    leases_running: int


@dataclass(frozen=True)
class MetricsSnapshot:
    """What one scrape read, all from the database, so every host reports the same numbers."""

    totals: list[MetricTotal]
    in_flight: list[InFlightCount]
    held: list[HeldCount]
    queue: QueueGauges


def describe_error(exc: BaseException) -> str:
    """An error as a record keeps it (a job's or invoice's last_error, a Failed outcome): its kind and message."""
    return f"{type(exc).__name__}: {exc}"
