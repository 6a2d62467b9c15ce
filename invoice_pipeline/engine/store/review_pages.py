"""The review page's reads, and a person's correction of fields (engine/corrections.py).

The correction is a review action like the others (store.review): under the invoice's processing
lock, fenced, in one transaction with its audit row and the lock's release. It also decides the
duplicate question again, under the same advisory locks as the pipeline's decision
(store.dedupe): those of the fields before and after, taken before the fence, in one sorted call.

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
from invoice_pipeline.engine.store.claims import Claims
from invoice_pipeline.engine.store.database import Database, as_uuid
from invoice_pipeline.engine.store.dedupe import Dedupe
from invoice_pipeline.engine.store.review import Review

PAGES = QueryFile("review_ui")

# Given the corrected fields and the duplicate decision made on them (None: an original), why
# the invoice stays held (domain/review.py's reasons, computed by the engine).
HeldFor = Callable[[InvoiceFields, MatchOutcome | None], list[str]]
Matcher = Callable[[MatchCandidate, list[tuple[UUID, str, InvoiceFields]]], MatchOutcome | None]


@dataclass(frozen=True)
class CheckedCorrection:
    """A correction that may be saved: the corrected fields, the values it changed (before and
    after, for the audit row) and the duplicate candidate the new fields make."""

    new: InvoiceFields
    before: dict[str, str | None]
    after: dict[str, str | None]
    candidate: MatchCandidate


@dataclass(frozen=True)
class Correction:
    """What a person asked to change, and who: the engine's request to the store."""

    changes: Mapping[str, Any]
    actor: str
    note: str | None


class ReviewPages:
    """The review page's reads and the correction of fields (queries: review_ui.sql); the
    correction is a review action (`review`), decided again through `dedupe`, released through
    `claims`."""

    def __init__(self, db: Database, claims: Claims, dedupe: Dedupe, review: Review) -> None:
        self.db = db
        self.claims = claims
        self.dedupe = dedupe
        self.review = review

    # -- reads for the page ------------------------------------------------------------------------

    def review_queue_page(self, flt: QueueFilter, *, limit: int, offset: int) -> QueuePage:
        params = flt.params()
        with self.db.pool.connection() as conn:
            rows = self.db.fetch_all(
                conn, QueueRow, PAGES["review_page_queue"], params | {"limit": limit, "offset": offset}
            )
            found = conn.execute(PAGES["review_page_queue_count"], params).fetchone()
        return QueuePage(rows, int(found[0]) if found else 0, offset, limit)

    def review_reason_counts(self, flt: QueueFilter) -> list[QueueCount]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(conn, QueueCount, PAGES["review_page_reason_counts"], flt.params())

    def review_org_counts(self, orgs: tuple[str, ...] | None) -> list[QueueCount]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(
                conn,
                QueueCount,
                PAGES["review_page_org_counts"],
                {"orgs": list(orgs) if orgs is not None else None},
            )

    def review_invoice(self, invoice_id: UUID | str) -> ReviewInvoice | None:
        with self.db.pool.connection() as conn:
            return self.db.fetch_one(
                conn, ReviewInvoice, PAGES["review_page_invoice"], {"invoice_id": as_uuid(invoice_id)}
            )

    def review_page_history(self, invoice_id: UUID | str) -> list[HistoryEntry]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(
                conn, HistoryEntry, PAGES["review_page_history"], {"invoice_id": as_uuid(invoice_id)}
            )

    def review_version(self, invoice_id: UUID | str) -> str | None:
        """What a reviewer saw, as one string: it changes with the status, the duplicate decision,
        the reasons, the fields, and every review action."""
        value = self.db.scalar(PAGES["review_page_version"], {"invoice_id": as_uuid(invoice_id)})
        return None if value is None else str(value)

    def record_login_lockout(self, reviewer: str, client_address: str, failures: int, seconds: float) -> None:
        """The review page locked `reviewer` after `failures` wrong passwords: on the record."""
        with self.db.pool.connection() as conn:
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
        value = self.db.scalar(PAGES["review_page_document"], {"sha256": sha256})
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
        return self.db.retrying(
            lambda: self._review_correct_once(lease, correction, held_for, match),
            f"review correct of invoice {lease.invoice_id}",
        )

    def _review_correct_once(
        self, lease: Lease, correction: Correction, held_for: HeldFor, match: Matcher
    ) -> ActionOutcome:
        invoice_id = lease.invoice_id

        def locks_first(conn: psycopg.Connection[Any]) -> None:
            self._take_correction_locks(conn, invoice_id, correction)

        with self.db.fenced(lease, locks_first) as conn:
            target = self.review.locked_target(conn, invoice_id)
            checked = self._checked_correction(conn, invoice_id, target, correction)
            if isinstance(checked, str):
                self.claims.finish_in(conn, lease.job_id, "succeeded", f"review correct refused: {checked}")
                return ActionOutcome(invoice_id, "correct", False, target.status, target.status, checked)
            return self._save_correction(conn, lease, target, checked, correction, held_for, match)

    def _take_correction_locks(
        self, conn: psycopg.Connection[Any], invoice_id: UUID, correction: Correction
    ) -> None:
        """The decision's advisory locks, of the fields before and after, before any row (the
        lock order, sql/0009). The processing lock keeps the fields as they are until the write:
        only its holder changes them."""
        keys = self.dedupe.decision_keys_of(conn, invoice_id)
        if keys is None:
            return
        org_id, old = keys
        new, _, _ = apply_changes(old, correction.changes, correction.actor, correction.note)
        both = (candidate_of(invoice_id, org_id, old), candidate_of(invoice_id, org_id, new))
        found = [c for c in both if c is not None]
        if found:
            self.dedupe.take_locks(conn, found)

    @staticmethod
    def _checked_correction(
        conn: psycopg.Connection[Any], invoice_id: UUID, target: LockedTarget, correction: Correction
    ) -> CheckedCorrection | str:
        """The corrected fields and the candidate they make, or why the correction is refused."""
        if target.status != "needs_review":
            return f"it is {target.status}; correct applies to needs_review invoices"
        if target.fields is None:
            return "it has no fields to correct"
        old = InvoiceFields.from_json(target.fields)
        new, before, after = apply_changes(old, correction.changes, correction.actor, correction.note)
        problems = validate_fields(new)
        if problems:
            return "the corrected invoice would not be valid: " + "; ".join(p.reason for p in problems)
        candidate = candidate_of(invoice_id, target.org_id, new)
        if candidate is None:
            return "the corrected fields cannot identify the invoice (no number or no seller)"
        old_candidate = candidate_of(invoice_id, target.org_id, old)
        keys_change = old_candidate is None or old_candidate.stored_keys != candidate.stored_keys
        if keys_change and target.duplicate_status == "original":
            dependents = conn.execute(PAGES["correct_dependents"], {"invoice_id": invoice_id}).fetchone()
            if dependents is not None and dependents[0]:
                return (
                    f"{dependents[0]} other invoice(s) are held or filed as copies of this one: "
                    "decide those first (not-duplicate or confirm-duplicate), then correct it"
                )
        return CheckedCorrection(new, before, after, candidate)

    def _save_correction(
        self,
        conn: psycopg.Connection[Any],
        lease: Lease,
        target: LockedTarget,
        checked: CheckedCorrection,
        correction: Correction,
        held_for: HeldFor,
        match: Matcher,
    ) -> ActionOutcome:
        """The duplicate question decided again on the corrected fields, they and the audit row
        saved, the lock released: the invoice stays needs_review."""
        invoice_id, new, candidate = lease.invoice_id, checked.new, checked.candidate
        rows = self.dedupe.locked_candidates(conn, candidate)
        others = [
            (r.id, r.org_id, InvoiceFields.from_json(r.fields))
            for r in rows
            if r.org_id == target.org_id and r.id != invoice_id
        ]
        outcome = match(candidate, others)
        detail = f"corrected {describe(checked.before, checked.after)}"
        decision = (
            "an original"
            if outcome is None
            else f"{'an exact copy' if outcome.exact else 'a suspected duplicate'} of {outcome.original_id}"
        )
        conn.execute(PAGES["correct_save"], saved_correction(invoice_id, new, candidate, outcome, held_for))
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
                "values_before": Jsonb(checked.before),
                "values_after": Jsonb(checked.after),
            },
        )
        self.claims.finish_in(conn, lease.job_id, "succeeded", None)
        return ActionOutcome(
            invoice_id,
            "correct",
            True,
            target.status,
            "needs_review",
            f"{detail}; {decision} now; held until a person approves",
        )


def candidate_of(invoice_id: UUID, org_id: str, fields: InvoiceFields) -> MatchCandidate | None:
    """The invoice's duplicate candidate from these fields; None when they cannot form its keys."""
    try:
        return MatchCandidate.from_fields(str(invoice_id), org_id, fields)
    except ValueError:
        return None


def saved_correction(
    invoice_id: UUID,
    new: InvoiceFields,
    candidate: MatchCandidate,
    outcome: MatchOutcome | None,
    held_for: HeldFor,
) -> dict[str, Any]:
    """correct_save's parameters: the corrected fields, the decision made on them, and why the
    invoice stays held."""
    return {
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
        "review_reasons": held_for(new, outcome),
        **candidate.stored_keys,
    }
