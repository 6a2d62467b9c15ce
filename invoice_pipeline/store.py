"""InvoiceStore: the one component that owns the connection pool and every database call.

Every query comes from `sql/queries/*.sql` by name. Writes a pipeline step makes take a
`Lease` and run fenced: in one transaction, first the `fence` statement (the job must still be
the running one), then the write. A swept holder gets `LeaseLost` and has written nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal, TypeVar
from uuid import UUID

import pandas as pd
import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from invoice_pipeline.config import validate_database_url
from invoice_pipeline.db.sqlfiles import query
from invoice_pipeline.documents.extracted import ExtractedText
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.keys import lock_ids, search_ids
from invoice_pipeline.domain.matching import MatchCandidate
from invoice_pipeline.leases import Lease, LeaseLost, LockHolder

log = logging.getLogger(__name__)

T = TypeVar("T")
FINISH_STATUSES = ("succeeded", "failed")
# Where an invoice rests until a person acts: no run picks it up again by itself.
TERMINAL_STATUSES = ("processed", "needs_review", "quarantined", "needs_attention")
IDLE_IN_TRANSACTION_MS = 60_000


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def as_uuid(value: UUID | str, what: str = "invoice_id") -> UUID:
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        raise ValueError(f"{what} must be a UUID, got {value!r}") from None


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


@dataclass(frozen=True)
class LedgerPosting:
    posting_id: UUID
    invoice_id: UUID
    amount: Decimal
    currency: str
    posted_at: datetime


@dataclass(frozen=True)
class DueInvoice:
    invoice_id: UUID
    org_id: str
    attempt: int
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


# Who a claimed invoice's request waits for: one owner for all, or one per invoice once the
# caller has planned its runs (the sensor: one run key per invoice or per batch).
RequestedBy = str | Callable[[list[DueInvoice]], Mapping[UUID, str]] | None


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


# Given the org's candidate originals as (invoice id, org id, fields), which one this invoice
# copies, if any. Pure domain code (invoice_pipeline.domain.matching) behind it.
MatchFunction = Callable[[list[tuple[UUID, str, InvoiceFields]]], MatchOutcome | None]


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


class InvoiceStore:
    def __init__(self, database_url: str, *, min_size: int = 1, max_size: int = 10) -> None:
        self.database_url = validate_database_url(database_url)
        self.pool = ConnectionPool(
            database_url,
            min_size=min_size,
            max_size=max_size,
            # A worker frozen inside a fenced write holds its job row; the server ends that
            # session after this long, so the sweep is never blocked behind it for good.
            kwargs={
                "autocommit": True,
                "options": f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS}",
            },
            # A connection that died with the server is replaced instead of handed out.
            check=ConnectionPool.check_connection,
            open=True,
            name="invoice-pipeline",
        )

    def close(self) -> None:
        self.pool.close()

    # -- plumbing ------------------------------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[Any]]:
        with self.pool.connection() as conn, conn.transaction():
            yield conn

    @contextmanager
    def _fenced(self, lease: Lease) -> Iterator[psycopg.Connection[Any]]:
        """A transaction that holds lease's job row locked, or raises LeaseLost."""
        with self._transaction() as conn:
            row = conn.execute(
                query("fence"), {"job_id": lease.job_id, "invoice_id": lease.invoice_id}
            ).fetchone()
            if row is None:
                lease.mark_lost()
                raise LeaseLost(lease.job_id, lease.invoice_id, self._why_not_running(conn, lease.job_id))
            yield conn

    def _why_not_running(self, conn: psycopg.Connection[Any], job_id: UUID) -> str:
        row = conn.execute(query("job_status"), {"job_id": job_id}).fetchone()
        if row is None:
            return "no such job"
        return f"job is {row[0]}" + (f": {row[1]}" if row[1] else "")

    def _one(
        self, conn: psycopg.Connection[Any], cls: type[T], name: str, params: dict[str, Any]
    ) -> T | None:
        with conn.cursor(row_factory=class_row(cls)) as cur:
            return cur.execute(query(name), params).fetchone()

    def _all(self, conn: psycopg.Connection[Any], cls: type[T], name: str, params: dict[str, Any]) -> list[T]:
        with conn.cursor(row_factory=class_row(cls)) as cur:
            return cur.execute(query(name), params).fetchall()

    def _scalar(self, name: str, params: dict[str, Any]) -> Any:
        with self.pool.connection() as conn:
            row = conn.execute(query(name), params).fetchone()
            return None if row is None else row[0]

    # -- ingest --------------------------------------------------------------------------------

    def store_document(self, content: bytes, org_id: str, filename: str | None = None) -> IngestResult:
        """Keep the original bytes and create its invoice; the same bytes again are the same invoice."""
        if not org_id or not org_id.strip():
            raise ValueError("org_id must be a non-empty string")
        sha256 = hashlib.sha256(content).hexdigest()
        params = {
            "sha256": sha256,
            "content": content,
            "size_bytes": len(content),
            "org_id": org_id,
            "filename": filename,
        }
        with self._transaction() as conn:
            conn.execute(query("insert_document"), params)
            row = conn.execute(query("insert_invoice_for_document"), params).fetchone()
            if row is not None:
                return IngestResult(row[0], sha256, created=True)
            existing = conn.execute(query("invoice_for_document"), params).fetchone()
            assert existing is not None, "invoice vanished: rows are never deleted"
            return IngestResult(existing[0], sha256, created=False)

    def load_document(self, invoice_id: UUID | str) -> StoredDocument | None:
        with self.pool.connection() as conn:
            return self._one(conn, StoredDocument, "load_document", {"invoice_id": as_uuid(invoice_id)})

    def invoice_state(self, invoice_id: UUID | str) -> InvoiceState | None:
        with self.pool.connection() as conn:
            return self._one(conn, InvoiceState, "invoice_state", {"invoice_id": as_uuid(invoice_id)})

    # -- the lock ------------------------------------------------------------------------------

    def acquire(self, invoice_id: UUID | str, attempt: int, owner: str | None = None) -> Lease | None:
        """Take the invoice's lock, or None when another job is running it or the invoice is
        already finished (processed, quarantined, needs_attention). Never raises on contention."""
        invoice_id = as_uuid(invoice_id)
        if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
            raise ValueError(f"attempt must be a positive integer, got {attempt!r}")
        owner = owner or default_owner()
        params = {"invoice_id": invoice_id, "attempt": attempt, "owner": owner}
        with self.pool.connection() as conn:
            with conn.transaction():
                row = conn.execute(query("acquire_lock"), params).fetchone()
                job_id = row[0] if row else None
                if job_id is None:
                    return None
                if conn.execute(query("mark_invoice_processing"), params).fetchone() is None:
                    # Finished by a holder that completed after the caller last looked: undo the
                    # job row too, so the invoice is not reopened and its history stays clean.
                    raise psycopg.Rollback()
                return Lease(self, job_id, invoice_id, attempt, owner)
        return None

    def lease(self, job_id: UUID | str, invoice_id: UUID | str, attempt: int, owner: str | None) -> Lease:
        """A handle on a job taken earlier (e.g. by a previous step of the same run); fenced like any other."""
        return Lease(self, as_uuid(job_id, "job_id"), as_uuid(invoice_id), attempt, owner)

    def current_holder(self, invoice_id: UUID | str) -> LockHolder | None:
        with self.pool.connection() as conn:
            return self._one(conn, LockHolder, "current_holder", {"invoice_id": as_uuid(invoice_id)})

    def heartbeat(self, job_id: UUID | str) -> bool:
        return bool(self._scalar("heartbeat_lock", {"job_id": as_uuid(job_id, "job_id")}))

    def heartbeat_many(self, job_ids: list[UUID]) -> set[UUID]:
        """Heartbeat several jobs in one statement; returns those still running."""
        with self.pool.connection() as conn:
            return {row[0] for row in conn.execute(query("heartbeat_locks"), {"job_ids": job_ids}).fetchall()}

    def finish(self, job_id: UUID | str, status: str, error: str | None = None) -> bool:
        """Finish a job; False, changing nothing, when it is no longer running."""
        if status not in FINISH_STATUSES:
            raise ValueError(f"status must be one of {FINISH_STATUSES}, got {status!r}")
        return bool(
            self._scalar(
                "finish_lock", {"job_id": as_uuid(job_id, "job_id"), "status": status, "error": error}
            )
        )

    def release_stale_locks(
        self, invoice_id: UUID | str | None = None, stale_after: timedelta = timedelta(minutes=15)
    ) -> int:
        if not isinstance(stale_after, timedelta) or stale_after < timedelta(0):
            raise ValueError(f"stale_after must be a non-negative timedelta, got {stale_after!r}")
        params = {
            "invoice_id": None if invoice_id is None else as_uuid(invoice_id),
            "stale_after": stale_after,
        }
        return int(self._scalar("release_stale_locks", params))

    def job_history(self, invoice_id: UUID | str) -> list[JobRecord]:
        with self.pool.connection() as conn:
            return self._all(conn, JobRecord, "job_history", {"invoice_id": as_uuid(invoice_id)})

    def jobs_of_owner(self, owner: str) -> list[JobRecord]:
        with self.pool.connection() as conn:
            return self._all(conn, JobRecord, "jobs_of_owner", {"owner": owner})

    # -- fenced step writes --------------------------------------------------------------------

    def record_step(self, lease: Lease, step: str, *, skipped: bool) -> None:
        """Breadcrumb: the step started (and moves processing_stage), or was fast-forwarded."""
        params = {"invoice_id": lease.invoice_id, "job_id": lease.job_id, "step": step}
        with self._fenced(lease) as conn:
            conn.execute(query("record_step_skipped" if skipped else "record_step_executed"), params)

    def count_step_executions(self, invoice_id: UUID | str, step: str) -> int:
        return int(self._scalar("count_step_executions", {"invoice_id": as_uuid(invoice_id), "step": step}))

    def save_extracted_text(self, lease: Lease, extracted: ExtractedText) -> None:
        params = {"invoice_id": lease.invoice_id, "job_id": lease.job_id, **asdict(extracted)}
        with self._fenced(lease) as conn:
            conn.execute(query("save_extracted_text"), params)

    def load_extracted_text(self, invoice_id: UUID | str) -> ExtractedText | None:
        with self.pool.connection() as conn:
            return self._one(conn, ExtractedText, "load_extracted_text", {"invoice_id": as_uuid(invoice_id)})

    def save_fields(self, lease: Lease, fields: InvoiceFields) -> None:
        params = {
            "invoice_id": lease.invoice_id,
            "fields": Jsonb(fields.to_json()),
            "invoice_number": fields.invoice_number,
            "document_type": fields.document_type,
            "currency": fields.currency,
            "payable_total": fields.payable_total,
            "issue_date": fields.issue_date,
            "seller_name": fields.seller_name,
            "seller_vat_id": fields.seller_vat_id,
        }
        with self._fenced(lease) as conn:
            conn.execute(query("save_fields"), params)

    def load_fields(self, invoice_id: UUID | str) -> InvoiceFields | None:
        data = self._scalar("load_fields", {"invoice_id": as_uuid(invoice_id)})
        return None if data is None else InvoiceFields.from_json(data)

    def decide_duplicate(
        self, lease: Lease, candidate: MatchCandidate, match: MatchFunction
    ) -> DuplicateDecision:
        """Original, duplicate or suspected, decided under the blocking key's advisory locks.

        The locks come from the match rule (`domain/keys.py`): any two invoices the matcher
        could pair share one, so they decide one after the other, and the second sees the
        first. The candidates are every original in the blocking key's neighbourhood, read
        through an index with no LIMIT. Fence, locks, lookup and decision share one transaction,
        of few round trips: the locks and the read are one call, and the decision returns itself.
        """
        if candidate.key.org_id != candidate.org_id or candidate.invoice_id != str(lease.invoice_id):
            raise ValueError("the candidate is not the leased invoice of its org")
        with self._fenced(lease) as conn:
            rows = self._all(
                conn,
                DuplicateCandidateRow,
                "locked_duplicate_candidates",
                {
                    "lock_ids": list(lock_ids(candidate.block)),
                    "org_id": candidate.org_id,
                    "invoice_id": lease.invoice_id,
                    "block_keys": list(search_ids(candidate.block)),
                },
            )
            outcome = match(
                [
                    (r.id, r.org_id, InvoiceFields.from_json(r.fields))
                    for r in rows
                    if r.org_id == candidate.org_id
                ]
            )
            params: dict[str, Any] = {
                "invoice_id": lease.invoice_id,
                "org_id": candidate.org_id,
                **candidate.stored_keys,
            }
            if outcome is None:
                name = "mark_original"
            else:
                name = "mark_duplicate" if outcome.exact else "mark_suspected"
                params |= outcome.params()
            # None: decided already (a re-executed step); that decision stands.
            decided = self._one(conn, DuplicateDecision, name, params) or self._one(
                conn, DuplicateDecision, "load_duplicate_decision", {"invoice_id": lease.invoice_id}
            )
            assert decided is not None
            return decided

    def load_duplicate_decision(self, invoice_id: UUID | str) -> DuplicateDecision | None:
        with self.pool.connection() as conn:
            return self._one(
                conn, DuplicateDecision, "load_duplicate_decision", {"invoice_id": as_uuid(invoice_id)}
            )

    def record_approval(self, lease: Lease, decision: Literal["approved", "rejected"], rule: str) -> Approval:
        with self._fenced(lease) as conn:
            params = {
                "invoice_id": lease.invoice_id,
                "job_id": lease.job_id,
                "decision": decision,
                "rule": rule,
            }
            conn.execute(query("save_approval"), params)
            approval = self._one(conn, Approval, "load_approval", params)
            assert approval is not None
            return approval

    def hold_for_review(self, lease: Lease, reasons: list[str]) -> None:
        """Neither approve nor reject: the invoice ends needs_review, and a person decides."""
        if not reasons:
            raise ValueError("a hold needs at least one reason")
        with self._fenced(lease) as conn:
            conn.execute(query("hold_for_review"), {"invoice_id": lease.invoice_id, "reasons": reasons})

    def review_reasons(self, invoice_id: UUID | str) -> list[str] | None:
        """Why the invoice is held for a person; None when it is not held."""
        return self._scalar("load_review_reasons", {"invoice_id": as_uuid(invoice_id)})

    def load_approval(self, invoice_id: UUID | str) -> Approval | None:
        with self.pool.connection() as conn:
            return self._one(conn, Approval, "load_approval", {"invoice_id": as_uuid(invoice_id)})

    def post_to_ledger(self, lease: Lease, org_id: str, amount: Decimal, currency: str) -> LedgerPosting:
        """Post once: a second call returns the posting that exists (UNIQUE invoice_id)."""
        params = {
            "invoice_id": lease.invoice_id,
            "job_id": lease.job_id,
            "org_id": org_id,
            "amount": amount,
            "currency": currency,
        }
        with self._fenced(lease) as conn:
            conn.execute(query("post_to_ledger"), params)
            posting = self._one(conn, LedgerPosting, "load_ledger_posting", params)
            assert posting is not None
            return posting

    def load_ledger_posting(self, invoice_id: UUID | str) -> LedgerPosting | None:
        with self.pool.connection() as conn:
            return self._one(conn, LedgerPosting, "load_ledger_posting", {"invoice_id": as_uuid(invoice_id)})

    # -- ending a job --------------------------------------------------------------------------

    def complete(self, lease: Lease) -> None:
        """Release the lock as succeeded and mark the invoice processed (or needs_review), atomically."""
        with self._fenced(lease) as conn:
            conn.execute(query("mark_processed"), {"invoice_id": lease.invoice_id})
            conn.execute(query("finish_lock"), {"job_id": lease.job_id, "status": "succeeded", "error": None})

    def quarantine(self, lease: Lease, code: str, reason: str) -> None:
        """A bad document: keep it, say why, never retry it."""
        with self._fenced(lease) as conn:
            conn.execute(
                query("mark_quarantined"), {"invoice_id": lease.invoice_id, "code": code, "reason": reason}
            )
            conn.execute(
                query("finish_lock"),
                {"job_id": lease.job_id, "status": "failed", "error": f"quarantined: {code}: {reason}"},
            )

    def fail(
        self, job_id: UUID | str, error: str, *, max_attempts: int, retry_base: timedelta
    ) -> Rescheduled | None:
        """Release a failed job at once (no waiting for the sweep) and schedule the invoice's retry.

        Unfenced on purpose: a failing holder may already have been swept, and then the
        finish changes nothing while the reschedule still applies.
        """
        job_id = as_uuid(job_id, "job_id")
        with self._transaction() as conn:
            conn.execute(query("finish_lock"), {"job_id": job_id, "status": "failed", "error": error})
            row = conn.execute("SELECT invoice_id FROM processing_jobs WHERE id = %s", (job_id,)).fetchone()
            if row is None:
                return None
            rescheduled = self._all(
                conn,
                Rescheduled,
                "reschedule_failed",
                {
                    "invoice_id": row[0],
                    "max_attempts": max_attempts,
                    "retry_base": retry_base,
                    "error": error,
                },
            )
        return rescheduled[0] if rescheduled else None

    def reschedule_orphans(self, *, max_attempts: int, retry_base: timedelta) -> list[Rescheduled]:
        """Invoices left 'processing' with no running job (their holder was swept) get a retry or give up."""
        with self._transaction() as conn:
            return self._all(
                conn,
                Rescheduled,
                "reschedule_failed",
                {"invoice_id": None, "max_attempts": max_attempts, "retry_base": retry_base, "error": None},
            )

    # -- the sensor ----------------------------------------------------------------------------

    def claim_due_invoices(
        self, limit: int, request_timeout: timedelta | None = None, *, requested_by: RequestedBy = None
    ) -> list[DueInvoice]:
        """Due invoices not yet requested, marked requested; with request_timeout, also older requests.

        `requested_by` records whose run the requests wait for: an owner's text, or a function
        from the claimed invoices (in seq order) to each one's owner. Either way it is written
        in the claiming transaction, so no request exists without its owner.
        """
        if limit < 1:
            raise ValueError(f"limit must be positive, got {limit}")
        owner = requested_by if isinstance(requested_by, str) else None
        with self._transaction() as conn:
            due = sorted(
                self._all(
                    conn,
                    DueInvoice,
                    "claim_due_invoices",
                    {"limit": limit, "request_timeout": request_timeout, "requested_by": owner},
                ),
                key=lambda d: d.seq,
            )
            if due and callable(requested_by):
                owners = requested_by(due)
                ids = [d.invoice_id for d in due if d.invoice_id in owners]
                conn.execute(
                    query("assign_request_owners"),
                    {"invoice_ids": ids, "owners": [owners[i] for i in ids]},
                )
        return due

    def open_request_owners(self) -> list[OpenRequests]:
        with self.pool.connection() as conn:
            return self._all(conn, OpenRequests, "open_request_owners", {})

    def release_requests(
        self,
        owner: str,
        reason: str,
        *,
        count_attempt: bool,
        min_age: timedelta,
        max_attempts: int,
        retry_base: timedelta,
    ) -> list[Rescheduled]:
        """Free the unclaimed requests of `owner`, whose run ended or died (see release_requests)."""
        params = {
            "owner": owner,
            "reason": reason,
            "count_attempt": count_attempt,
            "min_age": min_age,
            "max_attempts": max_attempts,
            "retry_base": retry_base,
        }
        with self._transaction() as conn:
            return self._all(conn, Rescheduled, "release_requests", params)

    def status_counts_of(self, invoice_ids: list[UUID]) -> dict[str, int]:
        with self.pool.connection() as conn:
            rows = conn.execute(query("status_counts_of"), {"invoice_ids": invoice_ids}).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def stale_requests(self, request_timeout: timedelta) -> list[UUID]:
        with self.pool.connection() as conn:
            rows = conn.execute(query("stale_requests"), {"request_timeout": request_timeout}).fetchall()
        return [r[0] for r in rows]

    def expire_requests(
        self, invoice_ids: list[UUID], request_timeout: timedelta, *, max_attempts: int, retry_base: timedelta
    ) -> list[Rescheduled]:
        """Count requests no run claimed as failed attempts, so the retry gets a new run key."""
        if not invoice_ids:
            return []
        params = {
            "invoice_ids": invoice_ids,
            "request_timeout": request_timeout,
            "max_attempts": max_attempts,
            "retry_base": retry_base,
        }
        with self._transaction() as conn:
            return self._all(conn, Rescheduled, "expire_requests", params)

    # -- reading for people --------------------------------------------------------------------

    def status_summary(self) -> StatusSummary:
        with self.pool.connection() as conn:
            by_status: dict[str, int] = dict(conn.execute(query("count_by_status")).fetchall())
            by_stage: dict[str, int] = dict(conn.execute(query("count_by_stage")).fetchall())
            locks = conn.execute(query("lock_summary")).fetchone()
            dupes = conn.execute(query("duplicate_summary")).fetchone()
            attention = self._all(conn, AttentionItem, "attention_list", {})
        assert locks is not None and dupes is not None
        return StatusSummary(
            by_status,
            by_stage,
            locks[0],
            locks[1],
            locks[2],
            dupes[0],
            dupes[1],
            dupes[2],
            dupes[3],
            attention,
        )

    def invoice_overview(self, invoice_id: UUID | str) -> InvoiceOverview | None:
        with self.pool.connection() as conn:
            return self._one(conn, InvoiceOverview, "invoice_overview", {"invoice_id": as_uuid(invoice_id)})

    def frame(self, name: str, params: dict[str, Any] | None = None) -> pd.DataFrame:
        """A report query as a DataFrame, for the pandas report assets."""
        with self.pool.connection() as conn, conn.cursor() as cur:
            cur.execute(query(name), params or {})
            columns = [c.name for c in cur.description or []]
            return pd.DataFrame(cur.fetchall(), columns=columns)

    def offending_ids(self, check: str, params: dict[str, Any] | None = None) -> list[str]:
        """Ids that break an invariant (see the check_* queries); empty when it holds."""
        with self.pool.connection() as conn:
            return [r[0] for r in conn.execute(query(check), params or {}).fetchall()]

    def outcomes_of_org(self, org_id: str) -> list[InvoiceOutcome]:
        with self.pool.connection() as conn:
            return self._all(conn, InvoiceOutcome, "demo_outcomes", {"org_id": org_id})


def json_default(value: Any) -> Any:
    if isinstance(value, UUID | Decimal):
        return str(value)
    if isinstance(value, date | datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def dumps(value: Any) -> str:
    return json.dumps(value, default=json_default, indent=2)
