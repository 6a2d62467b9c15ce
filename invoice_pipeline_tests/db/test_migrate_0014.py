"""sql/0014: invoices an older release quarantined because a legible page's number, total or
seller was not read go back into the pipeline (issue 37), where they are now held for a person;
an unusable file, or a structured e-invoice with wrong data, stays quarantined."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg

from invoice_pipeline.db.migrate import migrate
from invoice_pipeline.domain.review import FIELD_UNREAD, reason_code
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples.render import render_invoice
from invoice_pipeline_tests.db.test_migrate import _migrate_before
from invoice_pipeline_tests.engine.review.helpers import run_batch, sample
from pipeline_support.factories import json_invoice


def _quarantined(url: str, content: bytes, name: str, fmt: str, code: str) -> uuid.UUID:
    """An invoice as the old release left it: its text stored, then quarantined with `code`."""
    store = InvoiceStore(url, max_size=1)
    try:
        invoice_id = store.documents.store_document(content, "acme", name).invoice_id
    finally:
        store.close()
    with psycopg.connect(url, autocommit=True) as conn:
        job = conn.execute(
            "INSERT INTO processing_jobs (invoice_id, status, owner, attempt, finished_at) "
            "VALUES (%s, 'failed', 'old-release', 1, now()) RETURNING id",
            (invoice_id,),
        ).fetchone()
        assert job is not None
        conn.execute(
            "INSERT INTO extracted_texts (invoice_id, job_id, format, method, text) VALUES (%s, %s, %s, 'old', '')",
            (invoice_id, job[0], fmt),
        )
        conn.execute(
            "UPDATE invoices SET status = 'quarantined', quarantine_code = %s, quarantine_reason = 'old', "
            "attempts = 1 WHERE id = %s",
            (code, invoice_id),
        )
    return invoice_id


def test_quarantined_page_reads_are_due_again_and_held_for_review(
    empty_database_url: str, tmp_path: Path
) -> None:
    url = empty_database_url
    _migrate_before(url, tmp_path, "0014")
    pdf = render_invoice(sample("INV-1400"), "pdf")
    page = _quarantined(url, pdf, "page.pdf", "pdf", "missing_total")
    structured = _quarantined(url, json_invoice("INV-1401"), "data.json", "json", "missing_total")
    broken = _quarantined(url, b"%PDF-1.4 broken", "broken.pdf", "pdf", "corrupt_pdf")

    migrate(url)
    with psycopg.connect(url, autocommit=True) as conn:
        state = {
            row[0]: row[1:]
            for row in conn.execute("SELECT id, status, quarantine_code, redrives, attempts FROM invoices")
        }
    assert state[page] == ("pending", None, 1, 0), state[page]
    assert state[structured][:2] == ("quarantined", "missing_total")
    assert state[broken][:2] == ("quarantined", "corrupt_pdf")

    # Processed again (its stored text is read anew, the old empty one being what it kept), the
    # page is held for a person or posted: never quarantined for what a person can type.
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM extracted_texts WHERE invoice_id = %s", (page,))
    assert run_batch(url, [page]).success
    with psycopg.connect(url, autocommit=True) as conn:
        status, reasons = conn.execute(
            "SELECT status, coalesce(review_reasons, '{}') FROM invoices WHERE id = %s", (page,)
        ).fetchone()  # type: ignore[misc]
    assert status == "needs_review", status
    assert all(reason_code(r) != FIELD_UNREAD or "payable_total" not in r for r in reasons)
