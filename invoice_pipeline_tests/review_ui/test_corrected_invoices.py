"""A corrected invoice on the review page (issue 58): a plain "Approve" is not offered, the two
approvals that are say what they book, and choosing one books only the difference."""

from __future__ import annotations

from decimal import Decimal

from invoice_pipeline_tests.engine.review.helpers import process_documents, run_ok, sql
from invoice_pipeline_tests.review_ui.conftest import Client, ReviewServer, hidden
from pipeline_support.einvoices import EInvoice, cii, corrected_invoice


def test_a_corrected_invoice_is_approved_as_replacing_its_original(review_server: ReviewServer) -> None:
    url = review_server.database_url
    original, correction = process_documents(
        url,
        review_server.store,
        "acme",
        [
            (cii(EInvoice(number="INV-2001")), "original.xml"),
            (corrected_invoice("K-5512", "INV-2001", "1249.50"), "correction.xml"),
        ],
    )
    reviewer = Client(review_server.base_url)
    status, page = reviewer.get(f"/invoice/{correction}")
    assert status == 200
    assert 'value="approve_replace"' in page and 'value="approve_reverse"' in page
    assert 'name="action" value="approve"' not in page
    # A plain approval posted by hand is refused, as the engine refuses it.
    form = {"csrf": hidden(page, "csrf"), "version": hidden(page, "version")}
    status, body = reviewer.post(f"/invoice/{correction}/action", {**form, "action": "approve"})
    assert status == 200 and "approve it as replacing the invoice it corrects" in body
    _, page = reviewer.get(f"/invoice/{correction}")
    form = {"csrf": hidden(page, "csrf"), "version": hidden(page, "version")}
    status, body = reviewer.post(f"/invoice/{correction}/action", {**form, "action": "approve_replace"})
    assert status == 200 and "approved: it replaces the invoice it corrects" in body, body
    run_ok(url, [correction])
    assert sql(
        url,
        "SELECT amount, correction_choice, corrects_invoice_id FROM ledger_postings WHERE invoice_id = %s",
        (correction,),
    ) == [(Decimal("59.50"), "replace", original)]
