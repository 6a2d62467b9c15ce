"""A correction's fields are computed once, from the fields the engine read before taking the
invoice's processing lock (engine/corrections.py, store.Correction); the store saves them only if
the invoice's fields are still those (store.corrections, issue 57).

The interleaving is made real, not mocked: between the engine's read and its taking the lock,
another reviewer's whole correction runs through the same function and commits. The first
correction, made on fields that are no longer the invoice's, must then write nothing: saving it
would silently undo the other reviewer's change.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from uuid import UUID

import pytest

from invoice_pipeline.engine.corrections import correct_invoice
from invoice_pipeline.engine.records import Lease
from invoice_pipeline.engine.review import Actor
from invoice_pipeline.engine.store import InvoiceStore, Review
from invoice_pipeline_tests.engine.review.helpers import decided_invoice, key_fields, sql

ALICE = Actor("os-user:alice", "review:alice@read-once:1")
BOB = Actor("os-user:bob", "review:bob@read-once:1")
VALID_VAT_ID = "DE136695976"  # its check digits hold: no other reason to hold it


class BobCorrectsFirst(Review):
    """The real review part, except that the first lock asked for is preceded by Bob's own
    correction of the invoice's number, whole and committed (it takes the lock itself)."""

    def __init__(self, store: InvoiceStore) -> None:
        self.__dict__.update(store.review.__dict__)
        self.store = store
        self.bob_done = False

    def take_review_lock(self, invoice_id: UUID | str, owner: str) -> Lease | None:
        if not self.bob_done:
            self.bob_done = True
            outcome = correct_invoice(self.store, invoice_id, ["invoice_number=INV-BOB-1"], BOB)
            assert outcome.done, outcome.message
        return super().take_review_lock(invoice_id, owner)


def test_a_correction_made_on_fields_changed_before_its_lock_writes_nothing(
    database_url: str, store: InvoiceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields = dataclasses.replace(key_fields("INV-READ-ONCE", "-50.00"), seller_vat_id=VALID_VAT_ID)
    invoice_id = decided_invoice(
        store, "acme", fields, "INV-READ-ONCE", ["negative_total: payable -50.00 EUR"]
    )

    monkeypatch.setattr(store, "review", BobCorrectsFirst(store))
    outcome = correct_invoice(store, invoice_id, ["payable_total=50.00"], ALICE, "sign typo")
    assert not outcome.done, outcome.message
    assert "changed since they were read" in outcome.message
    saved = store.documents.load_fields(invoice_id)
    assert saved is not None
    # Bob's number stands, and Alice's stale copy of the other fields did not overwrite it.
    assert (saved.invoice_number, saved.payable_total) == ("INV-BOB-1", Decimal("-50.00"))
    actors = sql(database_url, "SELECT actor FROM review_actions WHERE invoice_id = %s", (invoice_id,))
    assert actors == [(BOB.name,)]
    running = sql(
        database_url,
        "SELECT id FROM processing_jobs WHERE invoice_id = %s AND status = 'running'",
        (invoice_id,),
    )
    assert running == [], "the refused correction released its lock"

    # Alice looks again: the same correction, read now, goes through and keeps Bob's number.
    monkeypatch.undo()
    outcome = correct_invoice(store, invoice_id, ["payable_total=50.00"], ALICE, "sign typo")
    assert outcome.done, outcome.message
    saved = store.documents.load_fields(invoice_id)
    assert saved is not None
    assert (saved.invoice_number, saved.payable_total) == ("INV-BOB-1", Decimal("50.00"))
