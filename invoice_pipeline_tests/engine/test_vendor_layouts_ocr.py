"""Vendor layouts on scanned pages (issue 23): what a text PDF or a scan taught reads a scan.

The pages are the generated house-wording vendor's (its labels are in no dictionary, so
template-free reading holds its invoices), rendered at 200 dpi, degraded as a scanner would, and
OCRed by the real engine through every stage. The layout's fingerprint and anchors are in the
columns of the page's layout text, which OCR's layout text shares with the text layer's, so one
layout serves both.
"""

from __future__ import annotations

import random
from uuid import UUID

import pytest

from invoice_pipeline.engine.corrections import correct_invoice
from invoice_pipeline.engine.review import act
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples.scans import degrade, encode, render_pages
from invoice_pipeline.samples.vendor_series import SeriesInvoice
from invoice_pipeline_tests.engine.test_vendor_layouts_store import (
    ALICE,
    KEYS,
    corrections,
    house_vendor,
    register_sellers,
    run_documents,
    teach,
)


def scanned(inv: SeriesInvoice, degradation: str) -> tuple[bytes, str]:
    """The invoice's first page (its second holds only the footer) as a 200-dpi PNG scan."""
    [page] = render_pages(inv.pdf(), 200)[:1]
    return encode([degrade(page, degradation, random.Random(3))], "png", 200), f"{inv.case.name}.png"


def right_but_the_name(store: InvoiceStore, invoice_id: UUID, inv: SeriesInvoice) -> bool:
    """The key fields right, the seller's name aside: a layout no longer sets it (issue 37), and
    the template-free reader takes the address line for it on these scans (OCR reads "B.V." as
    "B.v."): the vendor registry names a vendor confirmed by its VAT id, not a layout."""
    fields = store.documents.load_fields(invoice_id)
    assert fields is not None
    c = inv.case
    want = (c.invoice_number, c.issue_date, c.amount_due, c.currency, c.seller_vat_id)
    return (
        fields.invoice_number,
        fields.issue_date,
        fields.payable_total,
        fields.currency,
        fields.seller_vat_id,
    ) == want


def sources(store: InvoiceStore, invoice_id: UUID) -> dict[str, str]:
    fields = store.documents.load_fields(invoice_id)
    assert fields is not None
    return {k: fields.sources[k].source for k in KEYS}


@pytest.mark.slow
def test_scans_are_read_with_the_layout_a_text_pdf_or_a_scan_taught(store: InvoiceStore) -> None:
    first, second, third, fourth = house_vendor()

    # Before any layout: the house wording holds every scan for a person.
    for inv in (second, third):
        [held] = run_documents(store, "beta", [scanned(inv, "clean")])
        assert store.documents.invoice_state(held).status == "needs_review"  # type: ignore[union-attr]

    # Taught by a correction of the text PDF, read on scans, degraded too.
    # Learnt from a person's approval, the layout is active at once (issue 54).
    teach(store, "acme", first)
    [row] = store.layouts.list_layouts("acme")
    assert row.state == "active"
    for inv, degradation in ((fourth, "clean"), (second, "clean"), (third, "skewed"), (second, "noisy")):
        [read] = run_documents(store, "acme", [scanned(inv, degradation)])
        state = store.documents.invoice_state(read)
        assert state is not None and state.status == "processed", (degradation, state)
        assert right_but_the_name(store, read, inv), (degradation, sources(store, read))
        got = sources(store, read)
        assert (
            got["invoice_number"].startswith(f"layout:{row.id}:")
            or "read template-free" in got["invoice_number"]
        )
        # Who the seller is comes from the page (and the vendor registry), never from a layout.
        assert got["seller_vat_id"].startswith("ocr:"), got
        # What the layout did not place was read from OCR, and says so: a scan has no text layer.
        assert not any(s.startswith("pdf-text") for s in got.values()), (degradation, got)

    # Taught by a correction of a scan, read on another scan of the vendor (whom globex's vendor
    # master lists: the registry, not the layout, says who is paid).
    register_sellers(store, "globex", [first])
    [scan_id] = run_documents(store, "globex", [scanned(first, "clean")])
    assert store.documents.invoice_state(scan_id).status == "needs_review"  # type: ignore[union-attr]
    assert correct_invoice(store, scan_id, corrections(first), ALICE).done
    assert act(store, "approve", scan_id, ALICE).done
    [learnt] = store.layouts.list_layouts("globex")
    assert (learnt.learnt_from, learnt.state) == (scan_id, "active")
    [read] = run_documents(store, "globex", [scanned(fourth, "greyscale")])
    assert store.documents.invoice_state(read).status == "processed"  # type: ignore[union-attr]
    assert right_but_the_name(store, read, fourth) and sources(store, read)["payable_total"].startswith(
        f"layout:{learnt.id}:"
    )
