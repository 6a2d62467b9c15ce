"""store.corrections: a person's correction of a held invoice's fields (engine/corrections.py,
behind the CLI, the review page and the Launchpad alike).

The correction is a review action like the others (store.review): under the invoice's processing
lock, fenced, in one transaction with its audit row and the lock's release. It also decides the
duplicate question again, under the same advisory locks as the pipeline's decision
(store.dedupe): those of the fields before and after, taken before the fence, in one sorted call.
The corrected fields are computed once, by the engine, from the fields it read (`Correction`);
in the fence they are saved only if the invoice's fields are still those.

Queries: sql/queries/corrections.sql.
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
from invoice_pipeline.engine.review_records import ActionOutcome, LockedTarget
from invoice_pipeline.engine.store.claims import Claims
from invoice_pipeline.engine.store.database import Database
from invoice_pipeline.engine.store.dedupe import Dedupe
from invoice_pipeline.engine.store.review import Review

CORRECTIONS = QueryFile("corrections")

# Given the corrected fields and the duplicate decision made on them (None: an original), why
# the invoice stays held (domain/review.py's reasons, computed by the engine: engine/verdicts.py).
HeldFor = Callable[[InvoiceFields, MatchOutcome | None], list[str]]
Matcher = Callable[[MatchCandidate, list[tuple[UUID, str, InvoiceFields]]], MatchOutcome | None]


@dataclass(frozen=True)
class Correction:
    """What a person asked to change, and who: the fields as they were read (`old`), the fields as
    corrected (`new`), and the values it changed (before and after, for the audit row)."""

    org_id: str
    old: InvoiceFields
    new: InvoiceFields
    before: dict[str, str | None]
    after: dict[str, str | None]
    actor: str
    note: str | None

    @classmethod
    def of(
        cls, org_id: str, old: InvoiceFields, changes: Mapping[str, Any], actor: str, note: str | None
    ) -> Correction:
        """The one place the corrected fields are computed (`domain.corrections.apply_changes`)."""
        new, before, after = apply_changes(old, changes, actor, note)
        return cls(org_id, old, new, before, after, actor, note)


class Corrections:
    """The correction of fields (queries: corrections.sql): a review action (`review`), decided
    again through `dedupe`, released through `claims`."""

    def __init__(self, db: Database, claims: Claims, dedupe: Dedupe, review: Review) -> None:
        self.db = db
        self.claims = claims
        self.dedupe = dedupe
        self.review = review

    def correct(
        self, lease: Lease, correction: Correction, held_for: HeldFor, match: Matcher
    ) -> ActionOutcome:
        """The corrected fields, validated and decided again, saved fenced with their audit row.

        Refused (nothing written, the lock released) when the invoice's fields are no longer those
        the correction was made on, when the corrected invoice is not valid, cannot form a
        duplicate key, or is the original other invoices are held against and its keys change.
        The invoice stays needs_review: a person approves the corrected values.
        """
        return self.db.retrying(
            lambda: self._correct_once(lease, correction, held_for, match),
            f"review correct of invoice {lease.invoice_id}",
        )

    def _correct_once(
        self, lease: Lease, correction: Correction, held_for: HeldFor, match: Matcher
    ) -> ActionOutcome:
        invoice_id = lease.invoice_id

        def locks_first(conn: psycopg.Connection[Any]) -> None:
            # The decision's advisory locks, of the fields before and after, before any row (the
            # lock order, sql/0009). Were the fields changed meanwhile, the check in the fence
            # refuses: nothing is written under locks of other keys.
            both = (candidate_of(invoice_id, correction.org_id, f) for f in (correction.old, correction.new))
            found = [c for c in both if c is not None]
            if found:
                self.dedupe.take_locks(conn, found)

        with self.db.fenced(lease, locks_first) as conn:
            target = self.review.locked_target(conn, invoice_id)
            checked = self._checked(conn, target, correction)
            if isinstance(checked, str):
                self.claims.finish_in(conn, lease.job_id, "succeeded", f"review correct refused: {checked}")
                return ActionOutcome(invoice_id, "correct", False, target.status, target.status, checked)
            return self._save(conn, lease, target, correction, checked, held_for, match)

    @staticmethod
    def _checked(
        conn: psycopg.Connection[Any], target: LockedTarget, correction: Correction
    ) -> MatchCandidate | str:
        """The duplicate candidate the corrected fields make, or why the correction is refused."""
        if target.status != "needs_review":
            return f"it is {target.status}; correct applies to needs_review invoices"
        if target.fields is None:
            return "it has no fields to correct"
        if target.org_id != correction.org_id or InvoiceFields.from_json(target.fields) != correction.old:
            return "its fields changed since they were read for this correction: look at it again"
        problems = validate_fields(correction.new)
        if problems:
            return "the corrected invoice would not be valid: " + "; ".join(p.reason for p in problems)
        candidate = candidate_of(target.invoice_id, target.org_id, correction.new)
        if candidate is None:
            return "the corrected fields cannot identify the invoice (no number or no seller)"
        old_candidate = candidate_of(target.invoice_id, target.org_id, correction.old)
        keys_change = old_candidate is None or old_candidate.stored_keys != candidate.stored_keys
        if keys_change and target.duplicate_status == "original":
            dependents = conn.execute(
                CORRECTIONS["correct_dependents"], {"invoice_id": target.invoice_id}
            ).fetchone()
            if dependents is not None and dependents[0]:
                return (
                    f"{dependents[0]} other invoice(s) are held or filed as copies of this one: "
                    "decide those first (not-duplicate or confirm-duplicate), then correct it"
                )
        return candidate

    def _save(
        self,
        conn: psycopg.Connection[Any],
        lease: Lease,
        target: LockedTarget,
        correction: Correction,
        candidate: MatchCandidate,
        held_for: HeldFor,
        match: Matcher,
    ) -> ActionOutcome:
        """The duplicate question decided again on the corrected fields, they and the audit row
        saved, the lock released: the invoice stays needs_review."""
        invoice_id, new = lease.invoice_id, correction.new
        rows = self.dedupe.locked_candidates(conn, candidate)
        others = [
            (r.id, r.org_id, InvoiceFields.from_json(r.fields))
            for r in rows
            if r.org_id == target.org_id and r.id != invoice_id
        ]
        outcome = match(candidate, others)
        detail = f"corrected {describe(correction.before, correction.after)}"
        decision = (
            "an original"
            if outcome is None
            else f"{'an exact copy' if outcome.exact else 'a suspected duplicate'} of {outcome.original_id}"
        )
        conn.execute(
            CORRECTIONS["correct_save"], saved_correction(invoice_id, new, candidate, outcome, held_for)
        )
        conn.execute(
            CORRECTIONS["insert_correction_action"],
            {
                "invoice_id": invoice_id,
                "job_id": lease.job_id,
                "actor": correction.actor,
                "note": correction.note,
                "from_status": target.status,
                "to_status": "needs_review",
                "review_reasons": target.review_reasons,
                "detail": f"{detail}; decided again: {decision}; still held for a person's approval",
                "values_before": Jsonb(correction.before),
                "values_after": Jsonb(correction.after),
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
