"""Vendor layouts through the real pipeline and the real review functions, on PostgreSQL.

A person corrects the first invoice of a vendor (`engine.corrections.correct_invoice`); its
layout is learnt for that organisation; the vendor's later invoices (lines moved) are read with
it by the extract_fields stage and posted; another organisation's copies of the same pages are
not; a correction contradicting the layout makes a new version; export and import (issue 23).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from decimal import Decimal
from uuid import UUID

import pytest

from invoice_pipeline.config import DEFAULT_MAX_DOCUMENT_BYTES
from invoice_pipeline.domain.identity import Identifier, normalise
from invoice_pipeline.domain.review import DEFAULT_POLICY
from invoice_pipeline.engine.chunk_loop import claim_chunk, process_chunk
from invoice_pipeline.engine.corrections import correct_invoice
from invoice_pipeline.engine.layouts import export_layouts, import_layouts, teach_layout
from invoice_pipeline.engine.review import Actor, act
from invoice_pipeline.engine.stages import StageEnv
from invoice_pipeline.engine.store import InvoiceStore, VendorImportRow
from invoice_pipeline.orchestration.resources import DocumentReader
from invoice_pipeline.samples.vendor_series import SeriesInvoice, due_date_of, vendor_series

ALICE = Actor("os-user:alice", "review:alice@test:1")
KEYS = ("invoice_number", "issue_date", "payable_total", "currency", "seller_name", "seller_vat_id")


def house_vendor() -> tuple[SeriesInvoice, ...]:
    return next(v.invoices for v in vendor_series(11, 8, 4) if v.house_labels)


def run(store: InvoiceStore, org: str, invoices: list[SeriesInvoice]) -> list[UUID]:
    """The invoices worked through every stage as one chunk, their sellers in the org's vendor
    registry first (as its vendor master would have them): what these tests teach is layouts,
    not who is paid (engine/test_vendors.py)."""
    register_sellers(store, org, invoices)
    return run_documents(store, org, [(inv.pdf(), f"{inv.case.name}.pdf") for inv in invoices])


def register_sellers(store: InvoiceStore, org: str, invoices: list[SeriesInvoice]) -> None:
    rows = {
        inv.case.seller_vat_id: VendorImportRow(
            inv.case.seller_name,
            (Identifier("vat", normalise("vat", inv.case.seller_vat_id), inv.case.seller_vat_id),),
        )
        for inv in invoices
        if inv.case.seller_vat_id
    }
    store.vendors.import_vendors(org, list(rows.values()), "test: vendor master")


def run_documents(store: InvoiceStore, org: str, documents: list[tuple[bytes, str]]) -> list[UUID]:
    """Each (content, file name) stored and worked through every stage, as one chunk."""
    ids = [store.documents.store_document(content, org, name).invoice_id for content, name in documents]
    env = StageEnv(
        store, DocumentReader(isolate=False), DEFAULT_MAX_DOCUMENT_BYTES, 120, 3, timedelta(minutes=1)
    )
    chunk = claim_chunk(store, [(i, None) for i in ids], "layout-test")
    process_chunk(env, chunk)
    return ids


def corrections(inv: SeriesInvoice) -> dict[str, str]:
    c = inv.case
    return {
        "invoice_number": c.invoice_number,
        "issue_date": c.issue_date.isoformat(),
        "due_date": due_date_of(c).isoformat(),
        "net_total": str(c.net),
        "tax_total": str(c.tax),
        "payable_total": str(c.amount_due),
        "seller_name": c.seller_name,
        "seller_vat_id": c.seller_vat_id,
        "currency": c.currency,
    }


def right(store: InvoiceStore, invoice_id: UUID, inv: SeriesInvoice) -> bool:
    fields = store.documents.load_fields(invoice_id)
    assert fields is not None
    c = inv.case
    want = (c.invoice_number, c.issue_date, c.amount_due, c.currency, c.seller_name, c.seller_vat_id)
    return tuple(getattr(fields, k) for k in KEYS) == want


def teach(store: InvoiceStore, org: str, first: SeriesInvoice) -> UUID:
    [first_id] = run(store, org, [first])
    assert store.documents.invoice_state(first_id).status == "needs_review"  # type: ignore[union-attr]
    outcome = correct_invoice(store, first_id, corrections(first), ALICE)
    assert outcome.done, outcome.message
    # Saving a correction teaches nothing; the approval of what was typed does (issue 37).
    assert store.layouts.list_layouts(org, include_disabled=True) == []
    assert act(store, "approve", first_id, ALICE).done
    return first_id


def activate(store: InvoiceStore, org: str, inv: SeriesInvoice) -> UUID:
    """The vendor's next invoice, read with its new layout in shadow: held (the layout and the page
    reader disagree), a person puts it right and approves it; the layout read it as approved, so
    it becomes active (issue 37)."""
    [invoice_id] = run(store, org, [inv])
    assert store.documents.invoice_state(invoice_id).status == "needs_review"  # type: ignore[union-attr]
    assert any(r.startswith("layout_disagrees") for r in store.documents.review_reasons(invoice_id) or ())
    assert correct_invoice(store, invoice_id, corrections(inv), ALICE).done
    assert act(store, "approve", invoice_id, ALICE).done
    assert [r.state for r in store.layouts.list_layouts(org)] == ["active"]
    return invoice_id


def test_an_approved_correction_teaches_at_once_and_later_invoices_are_read_and_posted(
    store: InvoiceStore,
) -> None:
    """Issue 54: the layout learnt from a person's approval of a corrected invoice is active at
    once, so the vendor's very next invoice is read with it (no second approval in shadow)."""
    first, *later = house_vendor()
    first_id = teach(store, "acme", first)
    [row] = store.layouts.list_layouts("acme")
    assert (row.learnt_from, row.taught_by, row.version, row.state) == (first_id, ALICE.name, 1, "active")
    ids = run(store, "acme", later)
    for invoice_id, inv in zip(ids, later, strict=True):
        fields = store.documents.load_fields(invoice_id)
        assert fields is not None
        assert right(store, invoice_id, inv), fields
        assert fields.sources["invoice_number"].source.startswith(f"layout:{row.id}:")
        assert fields.amount_check is not None and fields.amount_check.confirmed
        assert store.documents.invoice_state(invoice_id).status == "processed"  # type: ignore[union-attr]


def test_no_leak_to_another_organisation(store: InvoiceStore) -> None:
    first, *later = house_vendor()
    teach(store, "acme", first)
    assert store.layouts.enabled_layouts(["globex"]) == {"globex": []}
    ids = run(store, "globex", later)
    for invoice_id in ids:
        fields = store.documents.load_fields(invoice_id)
        assert fields is not None
        assert not any(s.source.startswith("layout:") for s in fields.sources.values())
        assert store.documents.invoice_state(invoice_id).status == "needs_review"  # type: ignore[union-attr]


def test_another_vendors_similar_page_is_read_template_free(store: InvoiceStore) -> None:
    """Two vendors of the org send the same template (same layout, same wording): the first one's
    layout, active, never reads the second one's page, which the registry confirms as the second
    vendor's (issue 54); the first vendor's own next page is read with it."""
    first, second, third, *_ = house_vendor()
    teach(store, "acme", first)
    case = dataclasses.replace(second.case, seller_name="Twin Trading Ltd", seller_vat_id="GB700000041")
    [other] = run(store, "acme", [dataclasses.replace(second, case=case)])  # registers the twin too
    assert any(v.has("vat", "GB700000041") for v in store.vendors.list_vendors("acme"))
    fields = store.documents.load_fields(other)
    assert fields is not None
    assert not any(s.source.startswith("layout:") for s in fields.sources.values())
    assert store.documents.invoice_state(other).status == "needs_review"  # type: ignore[union-attr]
    [own] = run(store, "acme", [third])
    fields = store.documents.load_fields(own)
    assert fields is not None and fields.sources["invoice_number"].source.startswith("layout:")


def corrected_to_a_number_not_printed(store: InvoiceStore, org: str, inv: SeriesInvoice) -> UUID:
    """`inv` held (the org's policy holds everything) and corrected to a number its page does not
    print: a decision that contradicts the vendor's layout."""
    store.review.set_review_policy(
        org, dataclasses.replace(DEFAULT_POLICY, auto_approve_limit=Decimal("0.01")), "t"
    )
    [invoice_id] = run(store, org, [inv])
    assert store.documents.invoice_state(invoice_id).status == "needs_review"  # type: ignore[union-attr]
    assert correct_invoice(store, invoice_id, {"invoice_number": "NOT-PRINTED-1"}, ALICE).done
    return invoice_id


def test_a_contradicting_correction_makes_a_new_version(store: InvoiceStore) -> None:
    first, second, *_ = house_vendor()
    teach(store, "acme", first)
    [v1] = store.layouts.list_layouts("acme")
    second_id = corrected_to_a_number_not_printed(store, "acme", second)
    assert act(store, "approve", second_id, ALICE).done
    rows = store.layouts.list_layouts("acme", include_disabled=True)
    assert [(r.version, r.enabled) for r in rows] == [(1, False), (2, True)]
    assert rows[0].superseded_by == rows[1].id and "invoice_number" in (rows[0].disabled_reason or "")
    assert rows[1].learnt_from == second_id and rows[0].id == v1.id


def test_export_import_and_disable(store: InvoiceStore) -> None:
    first, second, *_ = house_vendor()
    teach(store, "acme", first)
    data = export_layouts(store, "acme")
    assert data["format"] == "invoice-pipeline/vendor-layouts" and len(data["layouts"]) == 1
    [imported] = import_layouts(store, data, "globex", "os-user:bob")
    assert (imported.org_id, imported.learnt_from, imported.state) == ("globex", None, "shadow")
    activate(store, "globex", second)
    assert store.layouts.disable_layout(imported.id, "test", org_id="acme") is False  # not acme's
    assert store.layouts.disable_layout(imported.id, "test", org_id="globex") is True
    assert store.layouts.enabled_layouts(["globex"]) == {"globex": []}


def test_a_posted_invoice_a_person_vouches_for_teaches_its_layout(store: InvoiceStore) -> None:
    """`review layouts learn`: the pipeline posted it, a person says it was read right."""
    # A vendor that prints no prepayment: each invoice teaches what the first did.
    plain = next(
        v.invoices
        for v in vendor_series(11, 8, 4)
        if not v.house_labels and not any(i.case.prepaid for i in v.invoices)
    )
    first, second, *_ = plain
    assert len(plain) >= 3
    [first_id] = run(store, "acme", [first])
    assert store.documents.invoice_state(first_id).status == "processed"  # type: ignore[union-attr]
    learnt = teach_layout(store, first_id, ALICE.name)
    assert learnt.outcome == "learnt", learnt.detail
    [row] = store.layouts.list_layouts("acme")
    assert (row.learnt_from, row.taught_by) == (first_id, ALICE.name)
    # In shadow, the page reader's values stand; this vendor's page reads the same both ways, so
    # it is posted, and vouching for it makes the layout active.
    [second_id] = run(store, "acme", [second])
    fields = store.documents.load_fields(second_id)
    assert fields is not None and right(store, second_id, second)
    assert "in shadow: reads the same" in fields.sources["invoice_number"].source
    vouched = teach_layout(store, second_id, ALICE.name)
    assert vouched.outcome == "confirmed", vouched.detail
    [third_id] = run(store, "acme", [plain[2]])
    fields = store.documents.load_fields(third_id)
    assert fields is not None and right(store, third_id, plain[2])
    assert fields.sources["invoice_number"].source.startswith(f"layout:{row.id}:")
    # Held invoices are corrected or approved instead; an unknown one is refused.
    [held] = run(store, "acme", [house_vendor()[0]])
    assert teach_layout(store, held, ALICE.name).outcome == "skipped"
    assert teach_layout(store, UUID(int=7), ALICE.name).outcome == "skipped"
    assert len(store.layouts.list_layouts("acme")) == 1


def test_a_row_seen_once_is_read_the_next_time(store: InvoiceStore) -> None:
    """Learnt from an invoice with nothing prepaid, the layout holds the vendor's first invoice
    with a prepayment (it prints rows the layout never saw). Its correction makes a new version
    that reads the next prepayment, and still reads the invoices without one."""
    vendor = next(
        v.invoices
        for v in vendor_series(2031, 18, 6)
        if v.house_labels and sum(1 for i in v.invoices if i.case.prepaid) >= 2
    )
    plain = [i for i in vendor if not i.case.prepaid]
    prepaid = [i for i in vendor if i.case.prepaid]
    teach(store, "acme", plain[0])
    [held] = run(store, "acme", [prepaid[0]])
    assert store.documents.invoice_state(held).status == "needs_review"  # type: ignore[union-attr]
    assert correct_invoice(store, held, corrections(prepaid[0]), ALICE).done
    assert act(store, "approve", held, ALICE).done
    rows = store.layouts.list_layouts("acme", include_disabled=True)
    assert [(r.version, r.enabled, r.state) for r in rows] == [(1, False, "active"), (2, True, "active")]
    for inv in (plain[1], prepaid[1], plain[2]):
        [invoice_id] = run(store, "acme", [inv])
        assert right(store, invoice_id, inv), store.documents.load_fields(invoice_id)
        assert store.documents.invoice_state(invoice_id).status == "processed"  # type: ignore[union-attr]


def test_an_import_the_database_refuses_part_way_stores_none_of_it(store: InvoiceStore) -> None:
    """Two layouts; the database refuses the second (PostgreSQL's jsonb stores no NUL
    character): the first, already inserted, goes too, and the reason is a ValueError."""
    first, *_ = house_vendor()
    teach(store, "acme", first)
    data = export_layouts(store, "acme")
    [good] = data["layouts"]
    bad = dict(good, vendor_key=good["vendor_key"] + "9", seller_name="Vendor\x00 Ltd")
    assert bad["vendor_key"] > good["vendor_key"]  # inserted second: vendors go in key order
    data["layouts"] = [bad, good]
    with pytest.raises(ValueError, match="the database refused a layout"):
        import_layouts(store, data, "globex", "os-user:bob")
    assert store.layouts.list_layouts("globex", include_disabled=True) == []
    [imported] = import_layouts(store, dict(data, layouts=[good]), "globex", "os-user:bob")
    assert store.layouts.list_layouts("globex") == [imported]
