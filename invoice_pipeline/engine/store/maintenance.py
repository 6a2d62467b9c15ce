"""The sweep's statements: release stale locks, reschedule orphans, release the requests of runs
that ended or died, expire requests no run claimed. invoice_pipeline/engine/maintenance.py
decides when; this part only writes.

Queries: sql/queries/maintenance.sql.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from uuid import UUID

from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.engine.records import (
    OpenRequests,
    Rescheduled,
)
from invoice_pipeline.engine.store.claims import Claims
from invoice_pipeline.engine.store.database import Database, as_uuid

MAINTENANCE = QueryFile("maintenance")


class Maintenance:
    """The sweep's statements (queries: maintenance.sql); a retry is scheduled through `claims`."""

    def __init__(self, db: Database, claims: Claims) -> None:
        self.db = db
        self.claims = claims

    def release_stale_locks(self, invoice_id: UUID | str | None = None) -> int:
        """Free the leases (all, or the invoice's) whose heartbeat is older than the store's TTL."""
        params = {
            "invoice_id": None if invoice_id is None else as_uuid(invoice_id),
            "stale_after": self.db.lock_ttl,
        }
        return int(
            self.db.retrying(lambda: self.db.scalar(MAINTENANCE["release_stale_locks"], params), "the sweep")
        )

    def release_stale_locks_of(self, invoice_ids: Sequence[UUID]) -> int:
        """The sweep, for the invoices a chunk is about to claim."""
        if not invoice_ids:
            return 0
        params = {"invoice_ids": list(invoice_ids), "stale_after": self.db.lock_ttl}
        return int(
            self.db.retrying(
                lambda: self.db.scalar(MAINTENANCE["release_stale_locks_of"], params), "the chunk's sweep"
            )
        )

    def reschedule_orphans(self, *, max_attempts: int, retry_base: timedelta) -> list[Rescheduled]:
        """Invoices left 'processing' with no running job (their holder was swept) get a retry or give up.

        Two statements: lock the orphans' rows (skipping any row someone holds), then reschedule
        those that still have no running job, read with a snapshot taken after the locks. A run
        whose claim committed in between is seen, and its invoice is left alone.
        """

        def reschedule() -> list[Rescheduled]:
            with self.db.transaction() as conn:
                locked = [r[0] for r in conn.execute(MAINTENANCE["lock_orphans"]).fetchall()]
                if not locked:
                    return []
                return self.claims.reschedule(conn, locked, max_attempts, retry_base, None)

        return self.db.retrying(reschedule, "rescheduling orphans")

    def open_request_owners(self) -> list[OpenRequests]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(conn, OpenRequests, MAINTENANCE["open_request_owners"], {})

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

        def release() -> list[Rescheduled]:
            with self.db.transaction() as conn:
                return self.db.fetch_all(conn, Rescheduled, MAINTENANCE["release_requests"], params)

        return self.db.retrying(release, "releasing requests")

    def stale_requests(self, request_timeout: timedelta) -> list[UUID]:
        with self.db.pool.connection() as conn:
            rows = conn.execute(
                MAINTENANCE["stale_requests"], {"request_timeout": request_timeout}
            ).fetchall()
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

        def expire() -> list[Rescheduled]:
            with self.db.transaction() as conn:
                return self.db.fetch_all(conn, Rescheduled, MAINTENANCE["expire_requests"], params)

        return self.db.retrying(expire, "expiring requests")
