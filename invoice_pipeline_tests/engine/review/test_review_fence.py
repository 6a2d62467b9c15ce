"""A person's decision whose processing lock was swept before it wrote writes nothing (issue 53).

A review action (engine.review.act) and a correction (engine.corrections.correct_invoice) take
the invoice's processing lock, then write fenced (Database.fenced): if the action stalled past
the lock's TTL and the sweep released the lock meanwhile, someone else may hold it now, so the
write must find its lease gone and change nothing. The stall is made real, not mocked: the
store's review part takes the lock as always, then its heartbeat is back-dated and the real
sweep (store.maintenance.release_stale_locks) releases it, before the action goes on to write.
Each case is then repeated with a live lock, to show the same write does go through.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any
from uuid import UUID

import pytest

from invoice_pipeline.engine.corrections import correct_invoice
from invoice_pipeline.engine.records import Lease
from invoice_pipeline.engine.review import Actor, act
from invoice_pipeline.engine.review_records import ActionOutcome
from invoice_pipeline.engine.store import InvoiceStore, Review
from invoice_pipeline_tests.engine.review.helpers import decided_invoice, key_fields, sql

ALICE = Actor("os-user:alice", "review:alice@fence-test:1")
HELD = ["negative_total: payable -50.00 EUR"]
VALID_VAT_ID = "DE136695976"  # its check digits hold: no other reason to hold it


class SweptAfterTaking(Review):
    """The real review part, except that right after taking the lock the action 'stalls' past
    the lock's TTL: the heartbeat is back-dated an hour and the sweep releases the lock."""

    def __init__(self, store: InvoiceStore, database_url: str) -> None:
        # The store's own review part's collaborators, whatever they are: only the lock differs.
        self.__dict__.update(store.review.__dict__)
        self.store = store
        self.database_url = database_url
        self.swept = 0

    def take_review_lock(self, invoice_id: UUID | str, owner: str) -> Lease | None:
        lease = super().take_review_lock(invoice_id, owner)
        assert lease is not None, "nobody else holds the lock in this test"
        sql(
            self.database_url,
            "UPDATE processing_jobs SET heartbeat_at = heartbeat_at - interval '1 hour' WHERE id = %s",
            (lease.job_id,),
        )
        self.swept += self.store.maintenance.release_stale_locks(invoice_id)
        return lease


def snapshot(database_url: str, invoice_id: UUID) -> dict[str, Any]:
    """Everything a decision or a correction writes about the invoice."""
    ((status, reasons, fields),) = sql(
        database_url, "SELECT status, review_reasons, fields FROM invoices WHERE id = %s", (invoice_id,)
    )
    return {
        "status": status,
        "review_reasons": reasons,
        "fields": fields,
        "approvals": sql(database_url, "SELECT decision FROM approvals WHERE invoice_id = %s", (invoice_id,)),
        "review_actions": sql(
            database_url, "SELECT action FROM review_actions WHERE invoice_id = %s", (invoice_id,)
        ),
        "running_jobs": sql(
            database_url,
            "SELECT id FROM processing_jobs WHERE invoice_id = %s AND status = 'running'",
            (invoice_id,),
        ),
    }


def approve(store: InvoiceStore, invoice_id: UUID) -> ActionOutcome:
    outcome = act(store, "approve", invoice_id, ALICE)
    if not outcome.done and "look at the invoice again" in outcome.message.lower():
        # Refused for reasons found since the invoice was held (shown to the person now, issue
        # 52): the person looks again and approves what they see. Nothing here is the fence's.
        outcome = act(store, "approve", invoice_id, ALICE)
    return outcome


DECISIONS: dict[str, Callable[[InvoiceStore, UUID], ActionOutcome]] = {
    "approve": approve,
    "reject": lambda store, inv: act(store, "reject", inv, ALICE, "not ours"),
    "correct": lambda store, inv: correct_invoice(store, inv, ["payable_total=50.00"], ALICE, "sign typo"),
}


@pytest.mark.parametrize("decision", sorted(DECISIONS))
def test_a_decision_whose_lock_was_swept_before_it_wrote_writes_nothing(
    database_url: str, store: InvoiceStore, monkeypatch: pytest.MonkeyPatch, decision: str
) -> None:
    decide = DECISIONS[decision]
    fields = dataclasses.replace(key_fields(f"INV-FENCE-{decision}", "-50.00"), seller_vat_id=VALID_VAT_ID)
    invoice_id = decided_invoice(store, "acme", fields, f"INV-FENCE-{decision}", HELD)
    before = snapshot(database_url, invoice_id)
    assert before["status"] == "needs_review" and before["approvals"] == [] and before["review_actions"] == []

    stalling = SweptAfterTaking(store, database_url)
    monkeypatch.setattr(store, "review", stalling)
    outcome = decide(store, invoice_id)
    assert stalling.swept == 1, "the sweep did not release the action's lock"
    assert not outcome.done, outcome.message
    assert "the lock was lost before writing, nothing changed" in outcome.message
    assert "swept" in outcome.message
    assert snapshot(database_url, invoice_id) == before

    # The same decision with a lock nobody swept goes through: the refusal above was the fence's.
    monkeypatch.undo()
    outcome = decide(store, invoice_id)
    assert outcome.done, outcome.message
    after = snapshot(database_url, invoice_id)
    assert after["review_actions"] == [(decision,)]
    assert after != before
