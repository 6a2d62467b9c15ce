"""People in the loop: the actions a person takes on held, dead-lettered and quarantined invoices.

One implementation behind both doors: `invoice-pipeline review ...` / `requeue` (cli.py) and the
`review_invoice` / `requeue_invoices` jobs a person launches from the Dagster UI (review_jobs.py).

Every action:
1. is refused at once, without taking anything, when the invoice is in no state for it;
2. takes the invoice's processing lock (`acquire_processing_lock`, as a pipeline run does) and is
   refused, naming the holder, when a run or another reviewer holds it;
3. re-reads the invoice under the lock and writes fenced, with its audit row, in one
   transaction that also releases the lock (InvoiceStore, "review and redrive").

So a review never races a running pipeline or another reviewer: of two people approving and
rejecting the same invoice at once, one acts and the other is told who went first.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from uuid import UUID

from invoice_pipeline.domain.corrected_invoices import CorrectionChoice
from invoice_pipeline.domain.payment import PAYMENT_REASON_CODES
from invoice_pipeline.domain.review import REASON_CODES
from invoice_pipeline.engine.dedupe import match_outcome
from invoice_pipeline.engine.layouts import learn_quietly, unlearn_quietly
from invoice_pipeline.engine.leases import LeaseLost
from invoice_pipeline.engine.records import Lease, describe_error
from invoice_pipeline.engine.review_records import ACTION_FROM, Action, ActionOutcome, ReviewTarget
from invoice_pipeline.engine.store import InvoiceStore, as_uuid

# Lock owners of actions taken at a terminal, beside the orchestrator's runs' (review_jobs.py).
REVIEW_OWNER_PREFIX = "review:"
REVIEW_STATUSES = ("needs_review",)
REQUEUE_STATUSES = ACTION_FROM["requeue"]
# An action refused because the person acting may not act for the invoice's org.
NOT_THEIR_ORG = "not_their_org"
# An action refused because what the person saw changed before the action took the lock.
DECIDED_MEANWHILE = "someone decided this meanwhile: nothing changed; look at the invoice as it is now"


@dataclass(frozen=True)
class Actor:
    """Who acts: `name` goes into the audit trail, `owner` onto the processing lock; `orgs` the
    orgs whose invoices they may act on (None: every org, as at a terminal; empty: none)."""

    name: str
    owner: str
    orgs: tuple[str, ...] | None = None

    def may_act_for(self, org_id: str) -> bool:
        return self.orgs is None or org_id in self.orgs

    def not_their_org(self) -> str:
        """Why an action on another org's invoice is refused (which org is not said)."""
        return f"{NOT_THEIR_ORG}: {self.name} may not act for this invoice's org; nothing changed"

    @classmethod
    def os_user(cls) -> Actor:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # no passwd entry (a container's random uid)
            user = f"uid-{os.getuid()}"
        return cls(f"os-user:{user}", f"{REVIEW_OWNER_PREFIX}{user}@{socket.gethostname()}:{os.getpid()}")


@dataclass(frozen=True)
class TargetFilter:
    """Which invoices a bulk action applies to. Every given part must hold."""

    invoice_ids: tuple[UUID, ...] = ()
    org_id: str | None = None
    status: str | None = None
    reason: str | None = None
    older_than: timedelta | None = None

    @property
    def has_filter(self) -> bool:
        return any(v is not None for v in (self.org_id, self.status, self.reason, self.older_than))


def check_reason_code(code: str) -> str:
    """A --reason filter: one of the review codes, or a quarantine code (lowercase words)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", code):
        known = ", ".join((*REASON_CODES, *PAYMENT_REASON_CODES))
        raise ValueError(f"reason must be a code such as {known} (or a quarantine code), got {code!r}")
    return code


_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "": 86400}


def parse_age(text: str) -> timedelta:
    """'7d', '12h', '30m', '90s', '2w' (a bare number is days)."""
    match = _AGE.match(text)
    if not match:
        raise ValueError(f"age must look like 7d, 12h, 30m, 90s or 2w, got {text!r}")
    return timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2)])


def statuses_for(action: Action, status: str | None) -> tuple[str, ...]:
    allowed = ACTION_FROM[action]
    if status is None:
        return allowed
    if status not in allowed:
        raise ValueError(f"{action} applies to {' or '.join(allowed)} invoices, not {status!r}")
    return (status,)


def select_targets(store: InvoiceStore, action: Action, flt: TargetFilter) -> list[ReviewTarget]:
    return store.review.review_targets(
        statuses_for(action, flt.status),
        invoice_ids=list(flt.invoice_ids) or None,
        org_id=flt.org_id,
        reason=flt.reason,
        older_than=flt.older_than,
    )


def act(
    store: InvoiceStore,
    action: Action,
    invoice_id: UUID | str,
    actor: Actor,
    note: str | None = None,
    *,
    expect_version: str | None = None,
    correction: CorrectionChoice | None = None,
) -> ActionOutcome:
    """One action on one invoice, under its processing lock. `note` is the reason for a reject;
    `correction` is an approval's choice for a corrected invoice (replace or reverse the original).

    `expect_version`: what the person saw (`store.review_version`, the review page sends it);
    checked under the lock, so a decision someone made meanwhile refuses this one.
    """
    invoice_id = as_uuid(invoice_id)
    note = note.strip() if note and note.strip() else None
    if action == "correct":
        raise ValueError("a correction needs its values: use engine.corrections.correct_invoice")
    if action == "reject" and not note:
        raise ValueError("a rejection needs a reason")

    def refused(why: str, status: str | None = None) -> ActionOutcome:
        return ActionOutcome(invoice_id, action, False, status, status, why)

    state = store.documents.invoice_state(invoice_id)
    if state is None:
        return refused("no such invoice")
    if not actor.may_act_for(state.org_id):
        return refused(actor.not_their_org(), state.status)
    allowed = ACTION_FROM[action]
    if state.status not in allowed:
        return refused(
            f"it is {state.status}; {action} applies to {' or '.join(allowed)} invoices", state.status
        )
    outcome = decide_under_lock(
        store,
        invoice_id,
        f"review {action}",
        actor,
        state.status,
        expect_version,
        lambda lease: _apply(store, action, lease, actor, note, correction),
        refused,
    )
    if action == "approve" and outcome.done:
        # Approved (as read, or as corrected): its vendor's layout learns from it (issues 23, 37).
        learn_quietly(store, invoice_id, actor.name)
    elif action == "reject" and outcome.done:
        # Rejected: whatever the invoice taught is undone (issue 37).
        unlearn_quietly(store, invoice_id, actor.name, note or "")
    return outcome


def decide_under_lock(
    store: InvoiceStore,
    invoice_id: UUID,
    what: str,
    actor: Actor,
    status: str,
    expect_version: str | None,
    write: Callable[[Lease], ActionOutcome],
    refused: Callable[[str, str | None], ActionOutcome],
) -> ActionOutcome:
    """`write` under the invoice's processing lock, the one path of every person's decision.

    Busy (a run or another reviewer holds the lock), decided meanwhile (the invoice is not the
    version the person saw) and a lock lost before writing are refusals with nothing changed; an
    error rolls back and releases the lock now rather than leaving it to the sweep.
    """
    lease = store.review.take_review_lock(invoice_id, actor.owner)
    if lease is None:
        holder = store.claims.current_holder(invoice_id)
        who = holder.describe() if holder else "a holder that finished just now"
        return refused(f"busy: held by {who}; try again when it is released", status)
    try:
        if expect_version is not None and store.review_pages.review_version(invoice_id) != expect_version:
            store.claims.finish(lease.job_id, "succeeded", f"{what} refused: {DECIDED_MEANWHILE}")
            return refused(DECIDED_MEANWHILE, status)
        return write(lease)
    except LeaseLost as exc:
        # Swept before the write (the action stalled past the lock TTL): nothing was written.
        return refused(f"the lock was lost before writing, nothing changed: {exc}", status)
    except BaseException as exc:
        store.claims.finish(lease.job_id, "failed", f"{what} failed: {describe_error(exc)}")
        raise


def _apply(
    store: InvoiceStore,
    action: Action,
    lease: Lease,
    actor: Actor,
    note: str | None,
    correction: CorrectionChoice | None = None,
) -> ActionOutcome:
    if correction is not None and action != "approve":
        raise ValueError("replace or reverse is an approval's choice")
    if action == "approve":
        return store.review.review_approve(lease, actor.name, note, correction)
    if action == "reject":
        assert note is not None
        return store.review.review_reject(lease, actor.name, note)
    if action == "confirm_duplicate":
        return store.review.review_confirm_duplicate(lease, actor.name, note)
    if action == "not_duplicate":
        return store.review.review_not_duplicate(lease, actor.name, note, match_outcome)
    if action == "requeue":
        return store.review.requeue(lease, actor.name, note)
    raise ValueError(f"unknown action {action!r}")


def act_on(
    store: InvoiceStore,
    action: Action,
    flt: TargetFilter,
    actor: Actor,
    note: str | None = None,
    *,
    on_outcome: Callable[[ActionOutcome], None] | None = None,
    correction: CorrectionChoice | None = None,
) -> list[ActionOutcome]:
    """An action on the invoices given by id, or on every invoice the filter selects.

    Each invoice is acted on by itself, under its own lock: one busy or moved invoice is
    refused and reported, the others go ahead. Ids with no other filter are each tried and
    each refusal reported; with a filter, only what matches is tried.
    """
    if flt.has_filter:
        ids = [t.invoice_id for t in select_targets(store, action, flt)]
    else:
        ids = list(dict.fromkeys(flt.invoice_ids))
    outcomes = []
    for invoice_id in ids:
        outcome = act(store, action, invoice_id, actor, note, correction=correction)
        outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
    return outcomes
