"""Claims and leases: take an invoice's lock (one, or a chunk in one statement), heartbeat it,
end the job (completed, quarantined, failed and rescheduled), and claim due invoices for runs.

Queries: sql/queries/claims.sql.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any
from uuid import UUID

import psycopg

from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.engine.records import (
    AcquiredLock,
    ChunkWrite,
    DueInvoice,
    JobRecord,
    Lease,
    LockHolder,
    Quarantine,
    Rescheduled,
)
from invoice_pipeline.engine.store.database import Database, as_uuid

log = logging.getLogger(__name__)
CLAIMS = QueryFile("claims")

FINISH_STATUSES = ("succeeded", "failed")


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# Who a claimed invoice's request waits for: one owner for all, or one per invoice once the
# caller has planned its runs (the sensor: one run key per invoice or per batch).
RequestedBy = str | Callable[[list[DueInvoice]], Mapping[UUID, str]] | None


class Claims:
    """Locks and leases over the store's database (queries: claims.sql)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def acquire(self, invoice_id: UUID | str, attempt: int, owner: str | None = None) -> Lease | None:
        """Take the invoice's lock, or None when another job is running it or the invoice is
        already finished (processed, quarantined, needs_attention). Never raises on contention."""
        invoice_id = as_uuid(invoice_id)
        if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
            raise ValueError(f"attempt must be a positive integer, got {attempt!r}")
        owner = owner or default_owner()
        params = {"invoice_id": invoice_id, "attempt": attempt, "owner": owner}

        def take() -> Lease | None:
            with self.db.pool.connection() as conn:
                with conn.transaction():
                    # acquire_processing_lock locks the invoice row, then inserts the job
                    # (the lock order, sql/0009); the update below finds the row locked already.
                    row = conn.execute(CLAIMS["acquire_lock"], params).fetchone()
                    job_id = row[0] if row else None
                    if job_id is None:
                        return None
                    if conn.execute(CLAIMS["mark_invoice_processing"], params).fetchone() is None:
                        # Finished by a holder that completed after the caller last looked: undo
                        # the job row too, so the invoice is not reopened and its history stays clean.
                        raise psycopg.Rollback()
                    return Lease(job_id, invoice_id, attempt, owner)
            return None

        return self.db.retrying_or_none(take, f"acquiring invoice {invoice_id}")

    def acquire_many(self, refs: Sequence[tuple[UUID, int | None]], owner: str) -> list[AcquiredLock]:
        """Take the locks of a chunk in one statement (acquire_processing_locks, sql/0005).

        Each invoice as `acquire` would: an attempt of None is the invoice's next one; an
        invoice held elsewhere or already finished is left out, never an error.
        """
        for _, attempt in refs:
            if attempt is not None and (
                not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1
            ):
                raise ValueError(f"attempt must be a positive integer, got {attempt!r}")
        params = {
            "invoice_ids": [as_uuid(invoice_id) for invoice_id, _ in refs],
            "attempts": [attempt for _, attempt in refs],
            "owner": owner,
        }

        def take() -> list[AcquiredLock]:
            with self.db.pool.connection() as conn:
                return self.db.fetch_all(conn, AcquiredLock, CLAIMS["acquire_locks"], params)

        if (locks := self.db.retrying_or_none(take, f"claiming {len(refs)} invoice(s)")) is not None:
            return locks
        # Still contended after the retries: one invoice's problem, not the chunk's. Each is
        # tried alone; one that still loses is left out, as if it had bounced.
        if len(refs) == 1:
            log.warning("claim of invoice %s gave up after contention; left unclaimed", refs[0][0])
            return []
        return [lock for ref in refs for lock in self.acquire_many([ref], owner)]

    def lease(self, job_id: UUID | str, invoice_id: UUID | str, attempt: int, owner: str | None) -> Lease:
        """A handle on a job taken earlier (e.g. by a previous step of the same run); fenced like any other."""
        return Lease(as_uuid(job_id, "job_id"), as_uuid(invoice_id), attempt, owner)

    def current_holder(self, invoice_id: UUID | str) -> LockHolder | None:
        with self.db.pool.connection() as conn:
            return self.db.fetch_one(
                conn, LockHolder, CLAIMS["current_holder"], {"invoice_id": as_uuid(invoice_id)}
            )

    def heartbeat(self, job_id: UUID | str) -> bool:
        return bool(self.db.scalar(CLAIMS["heartbeat_lock"], {"job_id": as_uuid(job_id, "job_id")}))

    def heartbeat_many(self, job_ids: list[UUID]) -> set[UUID]:
        """Heartbeat several jobs in one statement; returns those still running.

        On the database's own heartbeat connection, never the pool's, and without waiting for
        any row lock (heartbeat_locks): heartbeats never queue behind work.
        """
        rows = self.db.heartbeat_rows(CLAIMS["heartbeat_locks"], {"job_ids": job_ids})
        return {row[0] for row in rows}

    def finish(self, job_id: UUID | str, status: str, error: str | None = None) -> bool:
        """Finish a job; False, changing nothing, when it is no longer running."""
        if status not in FINISH_STATUSES:
            raise ValueError(f"status must be one of {FINISH_STATUSES}, got {status!r}")
        return bool(
            self.db.scalar(
                CLAIMS["finish_lock"], {"job_id": as_uuid(job_id, "job_id"), "status": status, "error": error}
            )
        )

    @staticmethod
    def finish_in(conn: psycopg.Connection[Any], job_id: UUID, status: str, error: str | None) -> None:
        """Finish a job inside the caller's transaction (a review action releases its lock with its write)."""
        conn.execute(CLAIMS["finish_lock"], {"job_id": job_id, "status": status, "error": error})

    def job_history(self, invoice_id: UUID | str) -> list[JobRecord]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(
                conn, JobRecord, CLAIMS["job_history"], {"invoice_id": as_uuid(invoice_id)}
            )

    def jobs_of_owner(self, owner: str) -> list[JobRecord]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(conn, JobRecord, CLAIMS["jobs_of_owner"], {"owner": owner})

    def complete_many(self, leases: Sequence[Lease]) -> ChunkWrite[None]:
        """Release each lock as succeeded and mark its invoice processed (or needs_review), atomically."""
        processed = self.db.writer(CLAIMS["mark_processed"])
        finish = self.db.writer(CLAIMS["finish_lock"])

        def write(conn: psycopg.Connection[Any], lease: Lease, _: None) -> None:
            processed(conn, lease, {})
            finish(conn, lease, {"status": "succeeded", "error": None})

        return self.db.write_chunk([(lease, None) for lease in leases], write)

    def complete(self, lease: Lease) -> None:
        self.db.only(self.complete_many([lease]), lease)

    def quarantine_many(
        self, items: Sequence[tuple[Lease, Quarantine]], *, step: str | None = None
    ) -> ChunkWrite[None]:
        """Bad documents: keep them, say why, never retry them."""
        mark = self.db.writer(CLAIMS["mark_quarantined"])
        finish = self.db.writer(CLAIMS["finish_lock"])

        def write(conn: psycopg.Connection[Any], lease: Lease, q: Quarantine) -> None:
            mark(conn, lease, {"code": q.code, "reason": q.reason})
            finish(conn, lease, {"status": "failed", "error": f"quarantined: {q.code}: {q.reason}"})

        return self.db.write_chunk(items, write, step=step)

    def quarantine(self, lease: Lease, code: str, reason: str) -> None:
        self.db.only(self.quarantine_many([(lease, Quarantine(code, reason))]), lease)

    def fail(
        self, job_id: UUID | str, error: str, *, max_attempts: int, retry_base: timedelta
    ) -> Rescheduled | None:
        """Release a failed job at once (no waiting for the sweep) and schedule the invoice's retry.

        Unfenced on purpose: a failing holder may already have been swept, and then the
        finish changes nothing while the reschedule still applies (unless another job holds the
        invoice by now). In the lock order: the invoice row, then the job row. Still contended
        after the retries, it gives up (None): the caller stops heartbeating the lease, and the
        sweep releases it after its TTL.
        """
        job_id = as_uuid(job_id, "job_id")
        params = {"job_id": job_id, "status": "failed", "error": error}

        def release() -> Rescheduled | None:
            with self.db.transaction() as conn:
                row = conn.execute(CLAIMS["lock_invoice_of_job"], params).fetchone()
                if row is None:
                    return None
                conn.execute(CLAIMS["finish_lock"], params)
                rescheduled = self.reschedule(conn, [row[0]], max_attempts, retry_base, error)
            return rescheduled[0] if rescheduled else None

        return self.db.retrying_or_none(release, f"releasing job {job_id}")

    def reschedule(
        self,
        conn: psycopg.Connection[Any],
        locked_invoice_ids: list[UUID],
        max_attempts: int,
        retry_base: timedelta,
        error: str | None,
    ) -> list[Rescheduled]:
        """reschedule_failed for invoices whose rows this transaction has locked already."""
        return self.db.fetch_all(
            conn,
            Rescheduled,
            CLAIMS["reschedule_failed"],
            {
                "invoice_ids": locked_invoice_ids,
                "max_attempts": max_attempts,
                "retry_base": retry_base,
                "error": error,
            },
        )

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
        return self.db.retrying(
            lambda: self._claim_due(limit, request_timeout, requested_by, owner), "the due query"
        )

    def _claim_due(
        self, limit: int, request_timeout: timedelta | None, requested_by: RequestedBy, owner: str | None
    ) -> list[DueInvoice]:
        with self.db.transaction() as conn:
            due = sorted(
                self.db.fetch_all(
                    conn,
                    DueInvoice,
                    CLAIMS["claim_due_invoices"],
                    {"limit": limit, "request_timeout": request_timeout, "requested_by": owner},
                ),
                key=lambda d: d.seq,
            )
            if due and callable(requested_by):
                owners = requested_by(due)
                ids = [d.invoice_id for d in due if d.invoice_id in owners]
                conn.execute(
                    CLAIMS["assign_request_owners"],
                    {"invoice_ids": ids, "owners": [owners[i] for i in ids]},
                )
        return due
