"""Review and redrive: a person's actions (invoice_pipeline/engine/review.py) and the review policies.

Each action takes the invoice's processing lock with the function a pipeline run acquires with,
then writes fenced, in one transaction: the invoice row locked, the change, its audit row, and
the lock released (store.claims). A review can never race a running pipeline or another
reviewer: whoever holds the lock goes first. Releasing a suspected duplicate decides again under
the duplicate decision's advisory locks (store.dedupe).

Queries: sql/queries/review.sql.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from datetime import timedelta
from typing import Any
from uuid import UUID

import psycopg

from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.domain.corrected_invoices import CorrectionChoice, choice_text
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.matching import MatchCandidate
from invoice_pipeline.domain.payment import Reason, payment_reasons, vouch
from invoice_pipeline.domain.review import DEFAULT_POLICY, SUSPECTED_DUPLICATE, ReviewPolicy, reason_code
from invoice_pipeline.domain.validation import posting_gaps
from invoice_pipeline.engine.records import (
    Lease,
    MatchOutcome,
)
from invoice_pipeline.engine.review_records import (
    ACTION_FROM,
    Action,
    ActionOutcome,
    LockedTarget,
    ReviewActionRecord,
    ReviewQueueLine,
    ReviewTarget,
)
from invoice_pipeline.engine.store.claims import Claims
from invoice_pipeline.engine.store.database import Database, as_uuid
from invoice_pipeline.engine.store.dedupe import Dedupe
from invoice_pipeline.engine.store.payments import Payments

# The refusal of an approval whose reasons changed since the person looked (issue 52).
REASONS_CHANGED = "the reasons changed since you looked"

REVIEW = QueryFile("review")


def _approvable_fields(target: LockedTarget) -> InvoiceFields | str:
    """The fields an approval decides on, or why no approval can be taken before anything else:
    the duplicate check has not run, it found a suspected duplicate, or posting lacks a field."""
    if target.duplicate_status is None:
        return (
            "the duplicate check has not run on it (its number or seller was not read): "
            "correct the missing fields first (review correct), then approve"
        )
    if target.duplicate_status == "suspected":
        return (
            f"it is a suspected duplicate of {target.duplicate_of}: approving would pay it twice; "
            "decide that first with not-duplicate (then it continues) or confirm-duplicate"
        )
    fields = InvoiceFields.from_json(target.fields) if target.fields else None
    gaps = posting_gaps(fields) if fields is not None else ["fields"]
    if gaps or fields is None:
        return (
            f"it has no {' and no '.join(g.removeprefix('a ') for g in gaps)}, which posting needs: "
            "reject it and ask the seller for a corrected copy"
        )
    return fields


def review_policies_in(conn: psycopg.Connection[Any], org_ids: list[str]) -> dict[str, ReviewPolicy]:
    """`review_policies`, read on `conn` (inside a transaction that holds a pool connection)."""
    wanted = sorted(set(org_ids))
    rows = conn.execute(REVIEW["review_policies"], {"org_ids": wanted}).fetchall()
    found = {str(r[0]): ReviewPolicy(r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows}
    return {org: found.get(org, DEFAULT_POLICY) for org in wanted}


def _said(what: str, note: str | None) -> str:
    return f"{what}: {note}" if note else what


def _save_approval(
    conn: psycopg.Connection[Any],
    lease: Lease,
    decision: str,
    rule: str,
    vouched: Sequence[str] = (),
    correction: tuple[CorrectionChoice, UUID] | None = None,
) -> bool:
    params = {
        "invoice_id": lease.invoice_id,
        "job_id": lease.job_id,
        "decision": decision,
        "rule": rule,
        "vouched": list(vouched),
        "correction_choice": correction[0] if correction else None,
        "corrects_invoice_id": correction[1] if correction else None,
    }
    return conn.execute(REVIEW["review_save_approval"], params).fetchone() is not None


def _not_shown(now: Sequence[Reason], shown: list[str]) -> list[str]:
    """The reasons of now a person was not shown. A reason about the invoice as a whole (a
    business exception) was shown if its code was: its text may name today's date. One about a
    party or an account was shown only as that very text, which names them."""
    codes = {reason_code(r) for r in shown}
    return [r.text for r in now if r.text not in shown and (r.subject or r.code not in codes)]


def _decided_again(
    conn: psycopg.Connection[Any],
    dedupe: Dedupe,
    lease: Lease,
    target: LockedTarget,
    match: Callable[[MatchCandidate, list[tuple[UUID, str, InvoiceFields]]], MatchOutcome | None],
) -> tuple[str, str] | str:
    """A suspected duplicate released by a person, decided again without the original they
    dismissed (under the decision's locks): an original now, or suspected of another one."""
    if target.duplicate_status != "suspected" or target.fields is None:
        return "it is not a suspected duplicate"
    candidate = MatchCandidate.from_fields(
        str(lease.invoice_id), target.org_id, InvoiceFields.from_json(target.fields)
    )
    rows = dedupe.locked_candidates(conn, candidate)
    others = [
        (r.id, r.org_id, InvoiceFields.from_json(r.fields))
        for r in rows
        if r.org_id == target.org_id and r.id != target.duplicate_of
    ]
    remaining = [r for r in target.review_reasons or [] if reason_code(r) != SUSPECTED_DUPLICATE]
    outcome = match(candidate, others)
    if outcome is None:
        row = conn.execute(
            REVIEW["review_release_original"],
            {"invoice_id": lease.invoice_id, "remaining": remaining},
        ).fetchone()
        assert row is not None
        if row[0] == "pending":
            return (
                "pending",
                f"not a duplicate of {target.duplicate_of}: an original now, due for the pipeline",
            )
        return (
            row[0],
            f"not a duplicate of {target.duplicate_of}: an original now, still held for its other reasons",
        )
    suspicion = f"{SUSPECTED_DUPLICATE} of {outcome.original_id}: {'; '.join(outcome.reasons)}"
    conn.execute(
        REVIEW["review_resuspect"],
        {
            "invoice_id": lease.invoice_id,
            "review_reasons": [*remaining, suspicion],
            **outcome.params(),
        },
    )
    return "needs_review", (
        f"not a duplicate of {target.duplicate_of}, but it looks like {outcome.original_id}: still held"
    )


class Review:
    """A person's actions and the review policies (queries: review.sql): each action releases its
    lock through `claims`, a released suspected duplicate is decided again through `dedupe`, and an
    approval re-decides who is paid through `payments`."""

    def __init__(self, db: Database, claims: Claims, dedupe: Dedupe, payments: Payments) -> None:
        self.db = db
        self.claims = claims
        self.dedupe = dedupe
        self.payments = payments

    def review_policies(self, org_ids: list[str]) -> dict[str, ReviewPolicy]:
        """Each org's review policy; an org without a row gets the default."""
        with self.db.pool.connection() as conn:
            return review_policies_in(conn, org_ids)

    def set_review_policy(self, org_id: str, policy: ReviewPolicy, updated_by: str) -> None:
        if not org_id or not org_id.strip():
            raise ValueError("org_id must be a non-empty string")
        params = {"org_id": org_id, "updated_by": updated_by, **asdict(policy)}
        with self.db.transaction() as conn:
            conn.execute(REVIEW["set_review_policy"], params)

    def review_targets(
        self,
        statuses: tuple[str, ...],
        *,
        invoice_ids: list[UUID] | None = None,
        org_id: str | None = None,
        reason: str | None = None,
        older_than: timedelta | None = None,
        limit: int = 10_000,
    ) -> list[ReviewTarget]:
        """Invoices in one of `statuses`, by id or by filter, the longest waiting first."""
        params = {
            "statuses": list(statuses),
            "invoice_ids": invoice_ids,
            "org_id": org_id,
            "reason": reason,
            "older_than": older_than,
            "limit": limit,
        }
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(conn, ReviewTarget, REVIEW["review_targets"], params)

    def take_review_lock(self, invoice_id: UUID | str, owner: str) -> Lease | None:
        """The invoice's processing lock for a person's action; None when someone holds it.

        Not `acquire`: that one starts a processing attempt (status 'processing') and refuses
        finished invoices, while an action acts on exactly those and sets the status itself.
        """
        invoice_id = as_uuid(invoice_id)

        def take() -> Any:
            with self.db.transaction() as conn:
                return conn.execute(
                    REVIEW["acquire_review_lock"], {"invoice_id": invoice_id, "owner": owner}
                ).fetchone()

        row = self.db.retrying_or_none(take, f"the review lock of invoice {invoice_id}")
        if row is None or row[0] is None:
            return None
        return Lease(row[0], invoice_id, int(row[1]), owner)

    def review_approve(
        self, lease: Lease, actor: str, note: str | None, correction: CorrectionChoice | None = None
    ) -> ActionOutcome:
        """Approved by a person: due again, so the pipeline runs on to post_to_ledger (once).

        The approval re-decides who is paid on the current fields and registry, under the
        identity keys' advisory locks (store/payments.py): a person vouches only for the reasons
        they were shown. A reason of now that the invoice was not held for (the registry changed
        since: the vendor was registered meanwhile with another account, say) refuses the
        approval and is added to the invoice's reasons for the person to see; a reason nobody may
        vouch for (the org's own identity as the seller, an impossible IBAN) refuses it too. What
        the approval vouches for is recorded with it; the posting holds again for anything else.
        A corrected invoice needs `correction` (`Payments.original_to_correct`).
        """
        policies: dict[str, ReviewPolicy] = {}

        def identity_locks_first(conn: psycopg.Connection[Any]) -> None:
            # Before any row (the lock order, sql/0009), from the fields as they are now: only
            # this lock's holder changes them, so they are what the row lock will see.
            keys = self.dedupe.decision_keys_of(conn, lease.invoice_id)
            if keys is not None:
                policies.update(review_policies_in(conn, [keys[0]]))
                self.payments.take_identity_locks(conn, [keys])

        def write(conn: psycopg.Connection[Any], target: LockedTarget) -> tuple[str, str] | str:
            fields = _approvable_fields(target)
            if isinstance(fields, str):
                return fields
            corrects = self.payments.original_to_correct(
                conn, target.org_id, target.invoice_id, fields, correction
            )
            if isinstance(corrects, str):
                return corrects
            facts = replace(
                self.payments.facts_in(
                    conn,
                    target.org_id,
                    fields,
                    policies.get(target.org_id, DEFAULT_POLICY),
                    target.duplicate_status,
                    target.duplicate_of,
                ),
                correction_choice=correction,
            )
            now = payment_reasons(facts)
            never = [r.text for r in now if not r.vouchable]
            if never:
                return (
                    f"it cannot be approved as it is: {'; '.join(never)}. Correct what is wrong "
                    "(review correct), or reject it"
                )
            shown = target.review_reasons or []
            new = _not_shown(now, shown)
            if new:
                conn.execute(
                    REVIEW["review_reasons_now"], {"invoice_id": lease.invoice_id, "reasons": [*shown, *new]}
                )
                return (
                    f"{REASONS_CHANGED}: {'; '.join(new)}. Look at the invoice again: approving vouches only "
                    "for the reasons you were shown"
                )
            if not _save_approval(
                conn,
                lease,
                "approved",
                _said(f"approved by {actor}", note),
                sorted(vouch(now)),
                (correction, corrects) if correction is not None and corrects is not None else None,
            ):
                return "it already has an approval decision"
            conn.execute(REVIEW["review_continue"], {"invoice_id": lease.invoice_id})
            if correction is not None:
                return "pending", f"approved: it {choice_text(correction)}; due now, the pipeline posts it"
            return "pending", "approved: due now, the pipeline posts it"

        return self._review_write(lease, "approve", actor, note, write, before_fence=identity_locks_first)

    def review_reject(self, lease: Lease, actor: str, reason: str) -> ActionOutcome:
        """Rejected by a person: finished, never posted."""

        def write(conn: psycopg.Connection[Any], target: LockedTarget) -> tuple[str, str] | str:
            if not _save_approval(conn, lease, "rejected", f"rejected by {actor}: {reason}"):
                return "it already has an approval decision"
            conn.execute(REVIEW["review_close"], {"invoice_id": lease.invoice_id})
            return "processed", f"rejected: {reason}"

        return self._review_write(lease, "reject", actor, reason, write)

    def review_confirm_duplicate(self, lease: Lease, actor: str, note: str | None) -> ActionOutcome:
        """A suspected duplicate is one: it joins its original's group and is rejected, never posted."""

        def write(conn: psycopg.Connection[Any], target: LockedTarget) -> tuple[str, str] | str:
            if target.duplicate_status != "suspected":
                return "it is not a suspected duplicate"
            confirmed = _said(f"confirmed by {actor}", note)
            row = conn.execute(
                REVIEW["review_confirm_duplicate"], {"invoice_id": lease.invoice_id, "confirmed": confirmed}
            ).fetchone()
            if row is None:
                raise RuntimeError(
                    f"invoice {lease.invoice_id}: its original {target.duplicate_of} is no original"
                )
            if not _save_approval(conn, lease, "rejected", f"duplicate of {row[0]}, {confirmed}"):
                raise RuntimeError(f"invoice {lease.invoice_id} was held, yet it has an approval decision")
            conn.execute(REVIEW["review_close"], {"invoice_id": lease.invoice_id})
            return "processed", f"confirmed duplicate of {row[0]}: rejected, not posted"

        return self._review_write(lease, "confirm_duplicate", actor, note, write)

    def review_not_duplicate(
        self,
        lease: Lease,
        actor: str,
        note: str | None,
        match: Callable[[MatchCandidate, list[tuple[UUID, str, InvoiceFields]]], MatchOutcome | None],
    ) -> ActionOutcome:
        """Release a suspected duplicate as an original, under the duplicate decision's locks.

        The same advisory locks as `decide_duplicate` (from the invoice's blocking key), then the
        same candidate read, without the original the person dismissed: if no other original
        matches, the invoice becomes one (so later copies match against it); if another one
        does (it arrived since), the invoice stays held, suspected of that one instead.
        """

        def dedupe_locks_first(conn: psycopg.Connection[Any]) -> None:
            # The decision's advisory locks before any row (the lock order, sql/0009), from the
            # fields as they are now; the candidate read below takes them again (held: no wait),
            # from the fields read under the row lock.
            self.dedupe.take_locks_of(conn, lease.invoice_id)

        def write(conn: psycopg.Connection[Any], target: LockedTarget) -> tuple[str, str] | str:
            return _decided_again(conn, self.dedupe, lease, target, match)

        return self._review_write(lease, "not_duplicate", actor, note, write, before_fence=dedupe_locks_first)

    def requeue(self, lease: Lease, actor: str, note: str | None) -> ActionOutcome:
        """A redrive: attempts start over and the invoice is due now, under a new run key.

        A quarantined invoice is requeued after a fix, so what was read from it is read again.
        """

        def write(conn: psycopg.Connection[Any], target: LockedTarget) -> tuple[str, str] | str:
            if target.status == "quarantined":
                conn.execute(REVIEW["review_forget_extraction"], {"invoice_id": lease.invoice_id})
            row = conn.execute(
                REVIEW["review_requeue"],
                {"invoice_id": lease.invoice_id, "from_statuses": list(ACTION_FROM["requeue"])},
            ).fetchone()
            assert row is not None
            was = target.quarantine_code or target.last_error or ""
            return "pending", f"redrive {row[1]}: due now, attempts start over" + (
                f" (was: {was})" if was else ""
            )

        return self._review_write(lease, "requeue", actor, note, write)

    def _review_write(
        self,
        lease: Lease,
        action: Action,
        actor: str,
        note: str | None,
        write: Callable[[psycopg.Connection[Any], LockedTarget], tuple[str, str] | str],
        *,
        before_fence: Callable[[psycopg.Connection[Any]], None] | None = None,
    ) -> ActionOutcome:
        """Fenced: the invoice row locked and checked, `write`, the audit row, the lock released.

        `write` returns (new status, what happened), or a refusal (a string) before it wrote
        anything. Either way the lock is released in the same transaction; an exception rolls
        everything back and leaves the lock to the caller (review.py finishes it as failed).
        The fence locks the invoice row, then the job row (the lock order, sql/0009); a
        transaction that lost to contention is retried whole.
        """
        return self.db.retrying(
            lambda: self._review_write_once(lease, action, actor, note, write, before_fence),
            f"review {action} of invoice {lease.invoice_id}",
        )

    def _review_write_once(
        self,
        lease: Lease,
        action: Action,
        actor: str,
        note: str | None,
        write: Callable[[psycopg.Connection[Any], LockedTarget], tuple[str, str] | str],
        before_fence: Callable[[psycopg.Connection[Any]], None] | None,
    ) -> ActionOutcome:
        with self.db.fenced(lease, before_fence) as conn:
            target = self.locked_target(conn, lease.invoice_id)
            allowed = ACTION_FROM[action]
            result = (
                write(conn, target)
                if target.status in allowed
                else f"it is {target.status}; {action} applies to {' or '.join(allowed)} invoices"
            )
            if isinstance(result, str):
                self.claims.finish_in(conn, lease.job_id, "succeeded", f"review {action} refused: {result}")
                return ActionOutcome(lease.invoice_id, action, False, target.status, target.status, result)
            to_status, detail = result
            conn.execute(
                REVIEW["insert_review_action"],
                {
                    "invoice_id": lease.invoice_id,
                    "job_id": lease.job_id,
                    "action": action,
                    "actor": actor,
                    "note": note,
                    "from_status": target.status,
                    "to_status": to_status,
                    "review_reasons": target.review_reasons,
                    "detail": detail,
                },
            )
            self.claims.finish_in(conn, lease.job_id, "succeeded", None)
            return ActionOutcome(lease.invoice_id, action, True, target.status, to_status, detail)

    def locked_target(self, conn: psycopg.Connection[Any], invoice_id: UUID) -> LockedTarget:
        """The invoice as an action sees it, its row locked for the rest of the transaction."""
        target = self.db.fetch_one(
            conn, LockedTarget, REVIEW["review_target_for_update"], {"invoice_id": invoice_id}
        )
        assert target is not None, "invoices are never deleted"
        return target

    def review_history(self, invoice_id: UUID | str) -> list[ReviewActionRecord]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(
                conn, ReviewActionRecord, REVIEW["review_history"], {"invoice_id": as_uuid(invoice_id)}
            )

    def review_queue_summary(self) -> list[ReviewQueueLine]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(conn, ReviewQueueLine, REVIEW["review_queue_summary"], {})
