"""The outbox's delivery side (issue 56; docs/exports.md): export targets, and export rows
claimed, heartbeated, fenced, swept, reported and redriven with the invoices' own lock design.

Export rows are written only by the posting's statement (documents.sql post_to_ledger, in the
fenced posting transaction); this part never creates one. A claim takes a batch's rows under
`export_jobs` locks (sql/0025 claim_export_batch: INSERT ... ON CONFLICT DO NOTHING under a
partial unique index, like processing_jobs); the process's LeaseKeeper heartbeats them; the
outcome is written behind `fence_export_jobs`, so a swept deliverer writes nothing.

Queries: sql/queries/exports.sql.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.engine.export_records import (
    TARGET_KINDS,
    Batch,
    BatchItem,
    DeadLetter,
    Delivery,
    ExportJobRecord,
    ExportLease,
    ExportTarget,
    Recorded,
    TargetStatus,
)
from invoice_pipeline.engine.store.database import Database

EXPORTS = QueryFile("exports")


class Exports:
    """Export targets and the delivery of export rows (queries: exports.sql)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- targets -----------------------------------------------------------------------------

    def add_target(
        self,
        org_id: str,
        name: str,
        kind: str,
        settings: dict[str, Any],
        *,
        batch_size: int = 100,
        max_attempts: int = 8,
        retry_base: timedelta = timedelta(seconds=30),
    ) -> ExportTarget:
        if kind not in TARGET_KINDS:
            raise ValueError(f"a target is one of {', '.join(TARGET_KINDS)}, not {kind!r}")
        params = {
            "org_id": org_id,
            "name": name,
            "kind": kind,
            "settings": Jsonb(settings),
            "batch_size": batch_size,
            "max_attempts": max_attempts,
            "retry_base": retry_base,
        }
        with self.db.transaction() as conn:
            target = self.db.fetch_one(conn, ExportTarget, EXPORTS["add_target"], params)
        assert target is not None
        return target

    def targets(self, org_id: str | None = None) -> list[ExportTarget]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(conn, ExportTarget, EXPORTS["targets"], {"org_id": org_id})

    def set_enabled(self, org_id: str, name: str, enabled: bool) -> bool:
        params = {"org_id": org_id, "name": name, "enabled": enabled}
        return self.db.scalar(EXPORTS["set_target_enabled"], params) is not None

    def targets_due(self) -> list[ExportTarget]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(conn, ExportTarget, EXPORTS["targets_due"], {})

    # -- the lock cycle ----------------------------------------------------------------------

    def claim_batch(self, target: ExportTarget, owner: str) -> Batch | None:
        """One batch of the target's due rows under new export_jobs locks, or None (nothing due,
        or everything due is held elsewhere)."""
        params = {"target_id": target.id, "limit": target.batch_size, "owner": owner}

        def take() -> list[ExportLease]:
            with self.db.transaction() as conn:
                return self.db.fetch_all(conn, ExportLease, EXPORTS["claim_batch"], params)

        leases = self.db.retrying_or_none(take, f"claiming a batch of {target.name}")
        if not leases:
            return None
        batch_id = leases[0].batch_id
        with self.db.pool.connection() as conn:
            items = self.db.fetch_all(conn, BatchItem, EXPORTS["batch_items"], {"batch_id": batch_id})
            created = conn.execute(EXPORTS["batch_created_at"], {"batch_id": batch_id}).fetchone()
        assert created is not None
        return Batch(target, batch_id, created[0], tuple(items), tuple(leases))

    def heartbeat_many(self, job_ids: list[UUID]) -> set[UUID]:
        """LeaseKeeper's beat for export leases: on the heartbeat connection, never waiting."""
        rows = self.db.heartbeat_rows(EXPORTS["heartbeat_export_locks"], {"job_ids": job_ids})
        return {row[0] for row in rows}

    def jobs_of_owner(self, owner: str) -> list[ExportJobRecord]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(conn, ExportJobRecord, EXPORTS["export_jobs_of_owner"], {"owner": owner})

    def release_stale(self) -> int:
        """Free the export leases not renewed within the store's lease TTL."""
        stale_after = self.db.lock_ttl
        return int(
            self.db.retrying(
                lambda: self.db.scalar(EXPORTS["release_stale_export_locks"], {"stale_after": stale_after}),
                "the export sweep",
            )
        )

    def record(self, leases: Sequence[ExportLease], deliveries: Sequence[Delivery]) -> Recorded:
        """Each delivery's outcome, behind one fence for the batch's leases, in one transaction:
        only rows whose job is still running are marked (and their jobs finished)."""
        by_export = {d.export_id: d for d in deliveries}
        job_ids = [lease.job_id for lease in leases if lease.export_id in by_export]

        def write() -> Recorded:
            counts = {"delivered": 0, "retried": 0, "dead": 0}
            with self.db.transaction() as conn:
                alive = {
                    row[1]: row[0] for row in conn.execute(EXPORTS["fence_exports"], {"job_ids": job_ids})
                }
                for export_id, job_id in sorted(alive.items()):
                    delivery = by_export[export_id]
                    counts[self._mark(conn, delivery)] += 1
                    conn.execute(
                        EXPORTS["finish_export_job"],
                        {
                            "job_id": job_id,
                            "status": "succeeded" if delivery.verdict == "delivered" else "failed",
                            "error": None if delivery.verdict == "delivered" else delivery.answer[:2000],
                        },
                    )
            return Recorded(counts["delivered"], counts["retried"], counts["dead"], len(job_ids) - len(alive))

        return self.db.retrying(write, f"recording {len(job_ids)} export outcome(s)")

    @staticmethod
    def _mark(conn: Any, delivery: Delivery) -> str:
        params = {"export_id": delivery.export_id, "answer": delivery.answer[:10_000]}
        if delivery.verdict == "delivered":
            conn.execute(EXPORTS["mark_delivered"], params)
            return "delivered"
        row = conn.execute(EXPORTS["mark_failed"], params | {"final": delivery.verdict == "final"}).fetchone()
        return "dead" if row is not None and row[0] == "dead" else "retried"

    # -- operators ---------------------------------------------------------------------------

    def status(self, org_id: str | None = None) -> list[TargetStatus]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(conn, TargetStatus, EXPORTS["status"], {"org_id": org_id})

    def dead_letters(self, org_id: str | None = None) -> list[DeadLetter]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(conn, DeadLetter, EXPORTS["dead_letters"], {"org_id": org_id})

    def requeue(
        self, org_id: str | None = None, target: str | None = None, export_ids: Sequence[UUID] | None = None
    ) -> int:
        """Dead letters due again now (attempts from zero, in their batch)."""
        params = {
            "org_id": org_id,
            "target": target,
            "export_ids": list(export_ids) if export_ids is not None else None,
        }
        with self.db.transaction() as conn:
            return len(conn.execute(EXPORTS["requeue"], params).fetchall())
