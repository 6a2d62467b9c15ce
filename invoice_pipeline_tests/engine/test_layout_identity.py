"""A vendor layout never says who the seller is (issue 37): an imported layout that carries another
vendor's name and VAT id, applied to its vendor's page, leaves the seller the page reader read,
so a re-sent copy of a posted invoice is still caught as a duplicate, not paid twice."""

from __future__ import annotations

import dataclasses

from invoice_pipeline.documents import extract_text
from invoice_pipeline.documents.reading import layouts as L
from invoice_pipeline.engine.layouts import export_layouts, import_layouts, teach_layout
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples.vendor_series import vendor_series
from invoice_pipeline_tests.documents.test_vendor_layouts import truth
from invoice_pipeline_tests.engine.test_vendor_layouts_store import run


def test_a_layout_carrying_another_vendors_identity_cannot_hide_a_resent_copy(store: InvoiceStore) -> None:
    plain = next(
        v.invoices
        for v in vendor_series(11, 8, 4)
        if not v.house_labels and not any(i.case.prepaid for i in v.invoices)
    )
    first = plain[0]
    [posted] = run(store, "acme", [first])
    assert store.documents.invoice_state(posted).status == "processed"  # type: ignore[union-attr]
    assert store.documents.load_ledger_posting(posted) is not None

    # The vendor's real layout, as an export would carry it, but naming someone else.
    text = extract_text(plain[1].pdf())
    boxes, _ = L.page_of(text)
    layout = L.learn_layout(text.text, boxes, truth(plain[1].case), org_id="elsewhere")
    assert layout is not None and layout.vendor_key == f"vat:{L.norm_id(first.case.seller_vat_id)}"
    forged = dataclasses.replace(layout, seller_name="Contoso Ltd", seller_vat_id="GB123456782")
    export = export_layouts(store, "nobody") | {"layouts": [forged.to_json()]}
    [row] = import_layouts(store, export, "acme", "os-user:mallory")
    assert row.state == "shadow"
    # Made active the way a person does: vouching for a posted invoice it reads as posted (it
    # places every field right; only the identity it carries is another vendor's).
    [vouched] = run(store, "acme", [plain[2]])
    assert teach_layout(store, vouched, "os-user:alice").outcome == "confirmed"
    assert [r.state for r in store.layouts.list_layouts("acme")] == ["active"]

    # The same invoice sent again (one more address line: other bytes, same invoice).
    [copy] = run(store, "acme", [dataclasses.replace(first, grow=first.grow + 1)])
    fields = store.documents.load_fields(copy)
    assert fields is not None
    assert any(s.source.startswith(f"layout:{row.id}:") for s in fields.sources.values()), fields.sources
    assert (fields.seller_name, fields.seller_vat_id) == (first.case.seller_name, first.case.seller_vat_id)
    assert not fields.sources["seller_vat_id"].source.startswith("layout:")
    # Caught as a copy of the posted invoice (an exact duplicate is rejected, never posted).
    decision = store.dedupe.load_duplicate_decision(copy)
    assert decision is not None and decision.status in ("duplicate", "suspected"), decision
    assert decision.original_id == posted
    assert store.documents.load_ledger_posting(copy) is None
