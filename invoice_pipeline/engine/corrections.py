"""A person corrects an invoice's fields: one function behind the CLI, the review page and the
Launchpad (`invoice-pipeline review correct`, review_ui, the `correct_invoice` job).

Like every review action (engine/review.py) it is refused at once when the invoice is in no
state for it, takes the invoice's processing lock, and writes fenced, with its audit row
(values before and after) and the lock's release, in one transaction. In that transaction the
corrected fields are validated and the duplicate question is decided again, under the same
advisory locks as the pipeline's dedupe stage (a corrected number or seller can make it a
copy). The invoice stays held (`needs_review`, reason `corrected`): a person approves what was
typed, and only then does the pipeline post it.

The corrected fields are computed once (`store.Correction.of`), from the fields read before the
lock; the store saves them only if the invoice's fields are still those (store.corrections). Why
the invoice stays held is the approval stage's own rule (engine/verdicts.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from uuid import UUID

from invoice_pipeline.domain.corrections import describe, parse_changes
from invoice_pipeline.engine.dedupe import match_outcome
from invoice_pipeline.engine.review import Actor, decide_under_lock
from invoice_pipeline.engine.review_records import ActionOutcome
from invoice_pipeline.engine.store import Correction, InvoiceStore, as_uuid
from invoice_pipeline.engine.verdicts import held_after_correction, payment_facts, who_is_paid


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
    current = store.documents.load_fields(invoice_id)
    if current is None:
        return refused("it has no fields to correct", state.status)
    # The corrected fields, computed once, from the fields as they are before the lock: only the
    # lock's holder changes them, and the store saves the correction only if they are still these.
    correction = Correction.of(state.org_id, current, parsed, actor.name, note)
    policy = store.review.review_policies([state.org_id])[state.org_id]
    # Who is paid, for the fields as corrected (the registry is not the invoice's: read now).
    facts = payment_facts(store, {invoice_id: (state.org_id, correction.new)}, {state.org_id: policy})
    paid = who_is_paid(facts[invoice_id])
    # A correction teaches no layout: the approval that follows does, from the approved values
    # (a second reviewer may still reject what was typed; issue 37).
    return decide_under_lock(
        store,
        invoice_id,
        "review correct",
        actor,
        state.status,
        expect_version,
        lambda lease: store.corrections.correct(
            lease, correction, held_after_correction(policy, actor.name, paid), match_outcome
        ),
        refused,
    )


__all__ = ["correct_invoice", "describe", "refusal_for_status"]
