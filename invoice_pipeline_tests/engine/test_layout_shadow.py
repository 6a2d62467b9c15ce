"""Shadow mode (issue 37): an imported or newly learnt layout is read beside the page reader but
its values are never used until a person approved one invoice read with it. Meanwhile a
disagreement holds the invoice with both readings; the approval makes it active, recorded."""

from __future__ import annotations

from invoice_pipeline.documents import extract_text
from invoice_pipeline.documents.reading import layouts as L
from invoice_pipeline.domain.review import SHADOW_SOURCE
from invoice_pipeline.engine.corrections import correct_invoice
from invoice_pipeline.engine.layouts import export_layouts, import_layouts, teach_layout
from invoice_pipeline.engine.review import act
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples.vendor_series import vendor_series
from invoice_pipeline_tests.documents.test_vendor_layouts import truth
from invoice_pipeline_tests.engine.test_vendor_layouts_store import (
    ALICE,
    corrections,
    house_vendor,
    right,
    run,
)


def test_an_imported_layout_runs_in_shadow_until_a_person_approves_an_invoice_read_with_it(
    store: InvoiceStore,
) -> None:
    first, second, third, *_ = house_vendor()
    text = extract_text(first.pdf())
    boxes, _ = L.page_of(text)
    layout = L.learn_layout(text.text, boxes, truth(first.case), org_id="elsewhere")
    assert layout is not None
    [row] = import_layouts(store, export_layouts(store, "x") | {"layouts": [layout.to_json()]}, "acme", "bob")
    assert row.state == "shadow"

    # In shadow: the page reader's values stand, and where the layout reads otherwise (the house
    # wording's net, tax and due date, which the page reader does not find) the invoice is held,
    # both readings shown.
    [held] = run(store, "acme", [second])
    assert store.documents.invoice_state(held).status == "needs_review"  # type: ignore[union-attr]
    fields = store.documents.load_fields(held)
    assert fields is not None
    read_with = {
        k for k, s in fields.sources.items() if s.source.startswith("layout:") and k != SHADOW_SOURCE
    }
    assert read_with == set(), fields.sources
    [why] = [r for r in store.documents.review_reasons(held) or () if r.startswith("layout_disagrees")]
    assert f"layout:{row.id} v1 in shadow" in why
    assert f"net_total {second.case.net} (layout) / None (page reader)" in why, why
    assert store.layouts.layout_events("acme") == []

    # A person puts it right and approves: the layout read it as approved, so it is active now.
    assert correct_invoice(store, held, corrections(second), ALICE).done
    assert act(store, "approve", held, ALICE).done
    [active] = store.layouts.list_layouts("acme")
    assert (active.id, active.state) == (row.id, "active")
    [event] = store.layouts.layout_events("acme")
    assert (event.layout_id, event.event, event.invoice_id, event.actor) == (
        row.id,
        "activated",
        held,
        ALICE.name,
    )

    # Active: the vendor's next invoice is read with it and posted.
    [later] = run(store, "acme", [third])
    fields = store.documents.load_fields(later)
    assert fields is not None and right(store, later, third)
    assert fields.sources["invoice_number"].source.startswith(f"layout:{row.id}:")
    assert store.documents.invoice_state(later).status == "processed"  # type: ignore[union-attr]


def test_vouching_twice_for_the_invoice_a_layout_was_learnt_from_leaves_it_in_shadow(
    store: InvoiceStore,
) -> None:
    """Issue 59: `review layouts learn` run twice on one invoice stored a layout in shadow, then
    activated it. Only a person's approval of another invoice read with it ends shadow mode."""
    plain = next(
        v.invoices
        for v in vendor_series(11, 8, 4)
        if not v.house_labels and not any(i.case.prepaid for i in v.invoices)
    )
    first, second, *_ = plain
    [first_id] = run(store, "acme", [first])
    assert teach_layout(store, first_id, ALICE.name).outcome == "learnt"

    again = teach_layout(store, first_id, ALICE.name)
    assert again.outcome == "skipped", again.detail
    assert "stays in shadow" in again.detail
    [row] = store.layouts.list_layouts("acme")
    assert (row.state, row.confirmations) == ("shadow", 0)
    assert store.layouts.layout_events("acme") == []
    # The store refuses it too, whoever calls it.
    assert store.layouts.confirm_layout("acme", row.id, invoice_id=first_id, actor=ALICE.name) is False
    assert store.layouts.list_layouts("acme")[0].state == "shadow"

    # Another invoice read with it, vouched for by a person: active.
    [second_id] = run(store, "acme", [second])
    assert teach_layout(store, second_id, ALICE.name).outcome == "confirmed"
    [active] = store.layouts.list_layouts("acme")
    assert (active.id, active.state, active.confirmations) == (row.id, "active", 1)
    [event] = store.layouts.layout_events("acme")
    assert (event.event, event.invoice_id) == ("activated", second_id)
