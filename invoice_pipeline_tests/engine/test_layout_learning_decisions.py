"""When layouts learn (issue 37): on approval, never when a correction is saved; and a rejection
undoes what the rejected invoice taught, recorded. Through the real pipeline and the real review
functions, on PostgreSQL."""

from __future__ import annotations

import dataclasses

from invoice_pipeline.engine.corrections import correct_invoice
from invoice_pipeline.engine.layouts import learn_from_decision
from invoice_pipeline.engine.review import act
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.engine.test_vendor_layouts_store import (
    ALICE,
    corrected_to_a_number_not_printed,
    corrections,
    house_vendor,
    run,
)

BOB = dataclasses.replace(ALICE, name="os-user:bob", owner="review:bob@test:1")


def test_a_saved_correction_teaches_nothing_and_its_approval_teaches_the_approved_values(
    store: InvoiceStore,
) -> None:
    first, second, *_ = house_vendor()
    [held] = run(store, "acme", [first])
    assert correct_invoice(store, held, corrections(first), ALICE).done
    assert store.layouts.list_layouts("acme", include_disabled=True) == []
    # A second reviewer rejects what was typed: nothing was ever taught.
    assert act(store, "reject", held, BOB, "typed from the wrong page").done
    assert store.layouts.list_layouts("acme", include_disabled=True) == []

    [again] = run(store, "acme", [second])
    assert correct_invoice(store, again, corrections(second), ALICE).done
    assert store.layouts.list_layouts("acme", include_disabled=True) == []
    assert act(store, "approve", again, BOB).done
    [row] = store.layouts.list_layouts("acme", include_disabled=True)
    assert (row.learnt_from, row.taught_by) == (again, BOB.name)
    rule = {r["field"]: r for r in row.layout["rules"]}
    assert "invoice_number" in rule and "amount:net" in rule, row.layout["rules"]


def test_a_rejection_undoes_what_the_invoice_taught_and_restores_what_it_superseded(
    store: InvoiceStore,
) -> None:
    """Version 1 learnt from an approved invoice; version 2 learnt from a held invoice whose
    correction said something else (as a correction taught before issue 37, or any path that
    teaches before the decision is final). Rejecting that invoice disables version 2 and reads
    with version 1 again, both recorded with who rejected it."""
    first, second, *_ = house_vendor()
    [first_id] = run(store, "acme", [first])
    assert correct_invoice(store, first_id, corrections(first), ALICE).done
    assert act(store, "approve", first_id, ALICE).done
    [v1] = store.layouts.list_layouts("acme")
    second_id = corrected_to_a_number_not_printed(store, "acme", second)
    taught = learn_from_decision(store, second_id, ALICE.name)  # what a correction used to do
    assert taught.outcome == "new_version", taught.detail
    assert [(r.version, r.enabled) for r in store.layouts.list_layouts("acme", include_disabled=True)] == [
        (1, False),
        (2, True),
    ]

    assert act(store, "reject", second_id, BOB, "the number was typed wrong").done
    rows = store.layouts.list_layouts("acme", include_disabled=True)
    assert [(r.version, r.enabled) for r in rows] == [(1, True), (2, False)], rows
    assert rows[0].id == v1.id and rows[0].superseded_by is None and rows[0].disabled_reason is None
    assert f"invoice {second_id}" in (rows[1].disabled_reason or "") and "rejected by os-user:bob" in (
        rows[1].disabled_reason or ""
    )
    events = [(e.layout_id, e.event, e.invoice_id, e.actor) for e in store.layouts.layout_events("acme")]
    assert (rows[1].id, "undone", second_id, BOB.name) in events
    assert (v1.id, "restored", second_id, BOB.name) in events
