"""The review page's reads, and a person's correction of fields (engine/corrections.py).

The correction is a review action like the others (ReviewStore): under the invoice's processing
lock, fenced, in one transaction with its audit row and the lock's release. It also decides the
duplicate question again, under the same advisory locks as the pipeline's decision
(DedupeStore): those of the fields before and after, taken before the fence, in one sorted call.

Queries: sql/queries/review_ui.sql.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.domain.corrections import apply_changes, describe
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.matching import MatchCandidate
from invoice_pipeline.domain.validation import validate_fields
from invoice_pipeline.engine.records import Lease, MatchOutcome
from invoice_pipeline.engine.review_page_records import (
    HistoryEntry,
    QueueCount,
    QueueFilter,
    QueuePage,
    QueueRow,
    ReviewInvoice,
)
from invoice_pipeline.engine.review_records import ActionOutcome, LockedTarget
from invoice_pipeline.engine.store.base import as_uuid
from invoice_pipeline.engine.store.dedupe import DEDUPE
from invoice_pipeline.engine.store.review import REVIEW, ReviewStore

PAGES = QueryFile("review_ui")

# Given the corrected fields and the duplicate decision made on them (None: an original), why
# the invoice stays held (domain/review.py's reasons, computed by the engine).
HeldFor = Callable[[InvoiceFields, MatchOutcome | None], list[str]]
Matcher = Callable[[MatchCandidate, list[tuple[UUID, str, InvoiceFields]]], MatchOutcome | None]


@dataclass(frozen=True)
class Correction:
    """What a person asked to change, and who: the engine's request to the store."""

    changes: Mapping[str, Any]
    actor: str
    note: str | None


class ReviewPageStore(ReviewStore):
    # -- reads for the page ------------------------------------------------------------------------

    def review_queue_page(self, flt: QueueFilter, *, limit: int, offset: int) -> QueuePage:
        params = flt.params()
        with self.pool.connection() as conn:
            rows = self._all(
                conn, QueueRow, PAGES["review_page_queue"], params | {"limit": limit, "offset": offset}
            )
            found = conn.execute(PAGES["review_page_queue_count"], params).fetchone()
        return QueuePage(rows, int(found[0]) if found else 0, offset, limit)

    def review_reason_counts(self, flt: QueueFilter) -> list[QueueCount]:
        with self.pool.connection() as conn:
            return self._all(conn, QueueCount, PAGES["review_page_reason_counts"], flt.params())

    def review_org_counts(self, orgs: tuple[str, ...] | None) -> list[QueueCount]:
        with self.pool.connection() as conn:
            return self._all(
                conn,
                QueueCount,
                PAGES["review_page_org_counts"],
                {"orgs": list(orgs) if orgs is not None else None},
            )

    def review_invoice(self, invoice_id: UUID | str) -> ReviewInvoice | None:
        with self.pool.connection() as conn:
            return self._one(
                conn, ReviewInvoice, PAGES["review_page_invoice"], {"invoice_id": as_uuid(invoice_id)}
            )

    def review_page_history(self, invoice_id: UUID | str) -> list[HistoryEntry]:
        with self.pool.connection() as conn:
            return self._all(
                conn, HistoryEntry, PAGES["review_page_history"], {"invoice_id": as_uuid(invoice_id)}
            )

    def review_version(self, invoice_id: UUID | str) -> str | None:
        """What a reviewer saw, as one string: it changes with the status, the duplicate decision,
        the reasons, the fields, and every review action."""
        value = self._scalar(PAGES["review_page_version"], {"invoice_id": as_uuid(invoice_id)})
        return None if value is None else str(value)

    def record_login_lockout(self, reviewer: str, client_address: str, failures: int, seconds: float) -> None:
        """The review page locked `reviewer` after `failures` wrong passwords: on the record."""
        with self.pool.connection() as conn:
            conn.execute(
                PAGES["record_login_lockout"],
                {
                    "reviewer": reviewer,
                    "client_address": client_address,
                    "failures": failures,
                    "seconds": seconds,
                },
            )

    def document_content(self, sha256: str) -> bytes | None:
        value = self._scalar(PAGES["review_page_document"], {"sha256": sha256})
        return None if value is None else bytes(value)

    # -- the correction ----------------------------------------------------------------------------

    def review_correct(
        self, lease: Lease, correction: Correction, held_for: HeldFor, match: Matcher
    ) -> ActionOutcome:
        """The corrected fields, validated and decided again, saved fenced with their audit row.

        Refused (nothing written, the lock released) when the corrected invoice is not valid,
        cannot form a duplicate key, or is the original other invoices are held against and its
        keys change. The invoice stays needs_review: a person approves the corrected values.
        """
        return self._retrying(
            lambda: self._review_correct_once(lease, correction, held_for, match),
            f"review correct of invoice {lease.invoice_id}",
        )

    def _review_correct_once(
        self, lease: Lease, correction: Correction, held_for: HeldFor, match: Matcher
    ) -> ActionOutcome:
        invoice_id = lease.invoice_id

        def candidate_of(org_id: str, fields: InvoiceFields) -> MatchCandidate | None:
            try:
                return MatchCandidate.from_fields(str(invoice_id), org_id, fields)
            except ValueError:
                return None

        def locks_first(conn: psycopg.Connection[Any]) -> None:
            # The decision's advisory locks, of the fields before and after, before any row (the
            # lock order, sql/0009). The processing lock keeps the fields as they are until the
            # write: only its holder changes them.
            row = conn.execute(DEDUPE["decision_keys_of"], {"invoice_id": invoice_id}).fetchone()
            if row is None or row[1] is None:
                return
            old = InvoiceFields.from_json(row[1])
            new, _, _ = apply_changes(old, correction.changes, correction.actor, correction.note)
            found = [c for c in (candidate_of(row[0], old), candidate_of(row[0], new)) if c is not None]
            if found:
                self._take_dedupe_locks(conn, found)

        with self._fenced(lease, locks_first) as conn:
            target = self._one(
                conn, LockedTarget, REVIEW["review_target_for_update"], {"invoice_id": invoice_id}
            )
            assert target is not None, "invoices are never deleted"

            def refused(why: str) -> ActionOutcome:
                self._finish_in(conn, lease.job_id, "succeeded", f"review correct refused: {why}")
                return ActionOutcome(invoice_id, "correct", False, target.status, target.status, why)

            if target.status != "needs_review":
                return refused(f"it is {target.status}; correct applies to needs_review invoices")
            if target.fields is None:
                return refused("it has no fields to correct")
            old = InvoiceFields.from_json(target.fields)
            new, before, after = apply_changes(old, correction.changes, correction.actor, correction.note)
            problems = validate_fields(new)
            if problems:
                return refused(
                    "the corrected invoice would not be valid: " + "; ".join(p.reason for p in problems)
                )
            candidate = candidate_of(target.org_id, new)
            if candidate is None:
                return refused("the corrected fields cannot identify the invoice (no number or no seller)")
            old_candidate = candidate_of(target.org_id, old)
            keys_change = old_candidate is None or old_candidate.stored_keys != candidate.stored_keys
            if keys_change and target.duplicate_status == "original":
                dependents = conn.execute(PAGES["correct_dependents"], {"invoice_id": invoice_id}).fetchone()
                if dependents is not None and dependents[0]:
                    return refused(
                        f"{dependents[0]} other invoice(s) are held or filed as copies of this one: "
                        "decide those first (not-duplicate or confirm-duplicate), then correct it"
                    )
            rows = self._locked_candidates(conn, candidate)
            others = [
                (r.id, r.org_id, InvoiceFields.from_json(r.fields))
                for r in rows
                if r.org_id == target.org_id and r.id != invoice_id
            ]
            outcome = match(candidate, others)
            reasons = held_for(new, outcome)
            detail = f"corrected {describe(before, after)}"
            decision = (
                "an original"
                if outcome is None
                else f"{'an exact copy' if outcome.exact else 'a suspected duplicate'} of {outcome.original_id}"
            )
            conn.execute(
                PAGES["correct_save"],
                {
                    "invoice_id": invoice_id,
                    "fields": Jsonb(new.to_json()),
                    "invoice_number": new.invoice_number,
                    "document_type": new.document_type,
                    "currency": new.currency,
                    "payable_total": new.payable_total,
                    "issue_date": new.issue_date,
                    "seller_name": new.seller_name,
                    "seller_vat_id": new.seller_vat_id,
                    "duplicate_status": "original" if outcome is None else "suspected",
                    "original_id": None if outcome is None else outcome.original_id,
                    "how": None if outcome is None else outcome.how,
                    "score": None if outcome is None else outcome.score,
                    "reasons": None if outcome is None else list(outcome.reasons),
                    "review_reasons": reasons,
                    **candidate.stored_keys,
                },
            )
            conn.execute(
                PAGES["insert_correction_action"],
                {
                    "invoice_id": invoice_id,
                    "job_id": lease.job_id,
                    "actor": correction.actor,
                    "note": correction.note,
                    "from_status": target.status,
                    "to_status": "needs_review",
                    "review_reasons": target.review_reasons,
                    "detail": f"{detail}; decided again: {decision}; still held for a person's approval",
                    "values_before": Jsonb(before),
                    "values_after": Jsonb(after),
                },
            )
            self._finish_in(conn, lease.job_id, "succeeded", None)
            return ActionOutcome(
                invoice_id,
                "correct",
                True,
                target.status,
                "needs_review",
                f"{detail}; {decision} now; held until a person approves",
            )
