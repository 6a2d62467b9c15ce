"""A person corrects an invoice's fields: one function behind the CLI, the review page and the
Launchpad (`invoice-pipeline review correct`, review_ui, the `correct_invoice` job).

Like every review action (engine/review.py) it is refused at once when the invoice is in no
state for it, takes the invoice's processing lock, and writes fenced, with its audit row
(values before and after) and the lock's release, in one transaction. In that transaction the
corrected fields are validated and the duplicate question is decided again, under the same
advisory locks as the pipeline's dedupe stage (a corrected number or seller can make it a
copy). The invoice stays held (`needs_review`, reason `corrected`): a person approves what was
typed, and only then does the pipeline post it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from uuid import UUID

from invoice_pipeline.domain.corrections import CORRECTED, apply_changes, describe, parse_changes
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.payment import payee_reasons
from invoice_pipeline.domain.review import ReviewPolicy
from invoice_pipeline.engine.dedupe import match_outcome
from invoice_pipeline.engine.records import MatchOutcome
from invoice_pipeline.engine.review import Actor, decide_under_lock
from invoice_pipeline.engine.review_records import ActionOutcome
from invoice_pipeline.engine.stages import payment_facts, verdict_for
from invoice_pipeline.engine.store import InvoiceStore, as_uuid
from invoice_pipeline.engine.store.review_pages import Correction, HeldFor


def refusal_for_status(store: InvoiceStore, invoice_id: UUID, status: str) -> str:
    """Why an invoice in `status` cannot be corrected, and what to do instead."""
    if status == "processed":
        posting = store.documents.load_ledger_posting(invoice_id)
        if posting is not None:
            return (
                f"it was posted to the ledger ({posting.amount} {posting.currency} on {posting.posted_at:%Y-%m-%d}): "
                "a posted invoice is never changed; book a credit note against it (or ask the seller for one) "
                "and ingest the corrected invoice as a new document"
            )
        return (
            "it is finished without posting (rejected, or a confirmed duplicate): "
            "ingest a corrected copy of the document as a new invoice instead"
        )
    if status == "quarantined":
        return "it is quarantined (the file is unusable): ingest a corrected file, or requeue it after a fix"
    if status == "needs_attention":
        return "it is a dead letter: requeue it; if the pipeline then holds it for review, correct it there"
    return (
        f"it is {status}: the pipeline is working on it; correct it once it is held for review (needs_review)"
    )


def correct_invoice(
    store: InvoiceStore,
    invoice_id: UUID | str,
    changes: Mapping[str, str] | Iterable[str],
    actor: Actor,
    note: str | None = None,
    *,
    expect_version: str | None = None,
) -> ActionOutcome:
    """Correct fields of a held invoice: `{"payable_total": "29.99"}` or `["payable_total=29.99"]`.

    Raises ValueError (CorrectionError) for a correction that cannot be read, before anything
    is taken; every other refusal is an outcome that says why, with nothing changed.
    """
    invoice_id = as_uuid(invoice_id)
    parsed: dict[str, Any] = parse_changes(changes)
    note = note.strip() if note and note.strip() else None

    def refused(why: str, status: str | None = None) -> ActionOutcome:
        return ActionOutcome(invoice_id, "correct", False, status, status, why)

    state = store.documents.invoice_state(invoice_id)
    if state is None:
        return refused("no such invoice")
    if not actor.may_act_for(state.org_id):
        return refused(actor.not_their_org(), state.status)
    if state.status != "needs_review":
        return refused(refusal_for_status(store, invoice_id, state.status), state.status)
    policy = store.review.review_policies([state.org_id])[state.org_id]
    # Who is paid, for the fields as corrected: read before the lock (the registry is not the
    # invoice's; only this lock's holder changes the fields, so they are what the lock will see).
    current = store.documents.load_fields(invoice_id)
    who_is_paid: list[str] = []
    if current is not None:
        corrected, _, _ = apply_changes(current, parsed, actor.name, note)
        facts = payment_facts(store, {invoice_id: (state.org_id, corrected)}, {state.org_id: policy})
        who_is_paid = [r.text for r in payee_reasons(facts[invoice_id])]
    outcome = decide_under_lock(
        store,
        invoice_id,
        "review correct",
        actor,
        state.status,
        expect_version,
        lambda lease: store.review_pages.review_correct(
            lease,
            Correction(parsed, actor.name, note),
            held_for(policy, actor.name, who_is_paid),
            match_outcome,
        ),
        refused,
    )
    # A correction teaches no layout: the approval that follows does, from the approved values
    # (a second reviewer may still reject what was typed; issue 37).
    return outcome


def held_for(policy: ReviewPolicy, reviewer: str, who_is_paid: Sequence[str] = ()) -> HeldFor:
    """The reasons a corrected invoice stays held: the pipeline's own (verdict_for, as the approve
    stage computes them, a match being at most a suspicion: a person confirms it, and the vendor
    registry's word on who is paid), then `corrected`."""

    def reasons(fields: InvoiceFields, outcome: MatchOutcome | None) -> list[str]:
        if outcome is None:
            verdict = verdict_for(fields, "original", None, (), policy, who_is_paid)
        else:
            verdict = verdict_for(
                fields, "suspected", outcome.original_id, outcome.reasons, policy, who_is_paid
            )
        corrected = [name for name, source in fields.sources.items() if source.source.startswith("review:")]
        return [
            *verdict.reasons,
            f"{CORRECTED}: {', '.join(sorted(corrected))} given by {reviewer}; "
            "approve to post it as corrected, or reject it",
        ]

    return reasons


__all__ = ["correct_invoice", "describe", "refusal_for_status"]
