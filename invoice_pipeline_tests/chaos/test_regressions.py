"""Deterministic regression tests for the two product bugs the chaos scenarios found."""

from __future__ import annotations

from decimal import Decimal

from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.engine.dedupe import decide_duplicate
from invoice_pipeline.engine.store import InvoiceStore
from pipeline_support.factories import json_invoice


def test_acquire_never_reopens_a_finished_invoice(store: InvoiceStore) -> None:
    """Redelivery storm: a request that saw "processing" took the lock right after the holder
    completed, flipped the invoice back to processing and ran it a second time."""
    inv = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    lease = store.claims.acquire(inv, 1)
    assert lease is not None
    store.claims.complete(lease)
    assert store.claims.acquire(inv, 2) is None
    state = store.documents.invoice_state(inv)
    assert state is not None and state.status == "processed" and state.attempts == 1
    assert [j.status for j in store.claims.job_history(inv)] == ["succeeded"], (
        "the refused acquire left no job row"
    )


def _fields(total: str, vat: str | None, seller: str) -> InvoiceFields:
    return InvoiceFields(
        invoice_number="INV-00042",
        currency="EUR",
        payable_total=Decimal(total),
        seller_name=seller,
        seller_vat_id=vat,
    )


def test_fuzzy_copy_a_cent_off_without_vat_id_is_a_suspected_duplicate(store: InvoiceStore) -> None:
    """Property test: the candidate query showed the matcher only originals with the same key,
    vendor key or exact amount, so this copy (other vendor key, total within tolerance) was
    accepted as a second original although the matching rules call it a copy. It needed
    tolerance (a cent, and the seller by name only), so it is suspected: held, not rejected."""
    first = store.documents.store_document(b"original", "acme").invoice_id
    copy = store.documents.store_document(b"copy", "acme").invoice_id
    original_fields = _fields("100.00", "DE123456789", "Acme Supplies GmbH")
    copy_fields = _fields("100.01", None, "ACME Supplies")
    lease = store.claims.acquire(first, 1)
    assert lease is not None
    store.documents.save_fields(lease, original_fields)
    assert decide_duplicate(store, lease, "acme", original_fields).status == "original"
    lease2 = store.claims.acquire(copy, 1)
    assert lease2 is not None
    store.documents.save_fields(lease2, copy_fields)
    decision = decide_duplicate(store, lease2, "acme", copy_fields)
    assert decision.status == "suspected" and decision.original_id == first and decision.how == "fuzzy"
