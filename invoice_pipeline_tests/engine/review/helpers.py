"""Builders for review tests: sample documents, the real jobs, held invoices."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal
from typing import Any
from uuid import UUID

import psycopg
from dagster import DagsterInstance, ExecuteInProcessResult

from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.review import reason_code
from invoice_pipeline.engine.dedupe import decide_duplicate
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.jobs import make_jobs
from invoice_pipeline.samples.render import Line, Party, SampleInvoice, render_invoice
from invoice_pipeline_tests.factories import pipeline_resources
from pipeline_support.factories import json_invoice

INSTANCE = DagsterInstance.ephemeral()

SELLER_FR = Party("Atelier Lumière SARL", "FR12345678901", "8 rue des Tanneurs", "69002", "Lyon", "FR")
SELLER_DE = Party("Nordwind Logistik GmbH", "DE811907980", "Hafenstraße 12", "20457", "Hamburg", "DE")
BUYER = Party("Maison Verte Paysage", None, "12 avenue Foch", "75016", "Paris", "FR")


def sample(
    number: str,
    *,
    seller: Party = SELLER_DE,
    lines: tuple[Line, ...] | None = None,
    issue: dt.date = dt.date(2026, 11, 2),
    due: dt.date | None = dt.date(2026, 12, 2),
    po: str | None = None,
) -> SampleInvoice:
    return SampleInvoice(
        invoice_number=number,
        document_type="invoice",
        issue_date=issue,
        due_date=due,
        currency="EUR",
        seller=seller,
        buyer=BUYER,
        lines=lines or (Line("Consulting hours", Decimal(2), Decimal("50.00"), Decimal(19)),),
        po_number=po,
    )


def render(inv: SampleInvoice, fmt: str) -> bytes:
    return render_invoice(inv, fmt)


def run_invoice(database_url: str, invoice_id: object, **db: Any) -> ExecuteInProcessResult:
    """The real process_invoice job, in process, with the real resource."""
    job, _ = make_jobs(pipeline_resources(database_url, **db))
    return job.execute_in_process(
        run_config={"ops": {"start": {"config": {"invoice_id": str(invoice_id)}}}},
        raise_on_error=False,
        instance=INSTANCE,
    )


def run_batch(database_url: str, invoice_ids: list[UUID], **db: Any) -> ExecuteInProcessResult:
    _, job = make_jobs(pipeline_resources(database_url, **db))
    return job.execute_in_process(
        run_config={"ops": {"fan_out": {"config": {"invoice_ids": [str(i) for i in invoice_ids]}}}},
        raise_on_error=False,
        instance=INSTANCE,
    )


def failure_messages(result: ExecuteInProcessResult) -> str:
    """The run's log as a person reads it, with each failed step's error message."""
    errors = [
        str(getattr(getattr(e.event_specific_data, "error", None), "message", ""))
        for e in result.all_events
        if e.is_step_failure
    ]
    return "\n".join([*(e.message or "" for e in INSTANCE.all_logs(result.run_id)), *errors])


def sql(
    database_url: str, statement: str, params: tuple[object, ...] | dict[str, Any] = ()
) -> list[tuple[Any, ...]]:
    """A test's own look at (or push to) the database, beside the product's queries."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def status_and_reasons(database_url: str, invoice_id: UUID) -> tuple[str, list[str]]:
    """The invoice's status and the codes of the reasons it is held for."""
    status, reasons = sql(
        database_url,
        "SELECT status, coalesce(review_reasons, '{}') FROM invoices WHERE id = %s",
        (invoice_id,),
    )[0]
    return status, [reason_code(r) for r in reasons]


def postings(database_url: str, invoice_id: UUID) -> int:
    return int(
        sql(database_url, "SELECT count(*) FROM ledger_postings WHERE invoice_id = %s", (invoice_id,))[0][0]
    )


def make_dead_letter(database_url: str, invoice_id: UUID) -> ExecuteInProcessResult:
    """A real dead letter: the ledger is down and max_attempts is 1, so the failed attempt's
    hook sends the invoice to needs_attention."""
    sql(database_url, "ALTER TABLE ledger_postings RENAME TO ledger_postings_down")
    try:
        result = run_invoice(database_url, invoice_id, max_attempts=1)
    finally:
        sql(database_url, "ALTER TABLE ledger_postings_down RENAME TO ledger_postings")
    return result


def key_fields(number: str, total: str, po: str | None = None) -> InvoiceFields:
    return InvoiceFields(
        invoice_number=number,
        issue_date=None,
        currency="EUR",
        payable_total=Decimal(total),
        seller_name="Acme Supplies GmbH",
        seller_vat_id="DE123456789",
        po_number=po,
    )


def held_invoice(
    store: InvoiceStore, org: str, number: str, reasons: list[str], document: tuple[bytes, str] | None = None
) -> UUID:
    """An invoice the way the pipeline leaves a business exception: decided original, held.
    `document`: its file (content, extension) instead of a JSON invoice of the fields."""
    return decided_invoice(store, org, key_fields(number, "-50.00"), number, reasons, document)


def decided_invoice(
    store: InvoiceStore,
    org: str,
    fields: InvoiceFields,
    name: str,
    reasons: list[str] | None,
    document: tuple[bytes, str] | None = None,
) -> UUID:
    extra = {"po_number": fields.po_number} if fields.po_number else {}
    content, suffix = document or (
        json_invoice(fields.invoice_number or "", total=str(fields.payable_total), **extra),
        "json",
    )
    invoice_id = store.documents.store_document(content, org, f"{name}.{suffix}").invoice_id
    lease = store.claims.acquire(invoice_id, 1, "test-setup")
    assert lease is not None
    store.documents.save_fields(lease, fields)
    decision = decide_duplicate(store, lease, org, fields)
    if decision.status == "suspected":
        reasons = [
            f"suspected_duplicate of {decision.original_id}: {'; '.join(decision.reasons)}",
            *(reasons or []),
        ]
    if reasons:
        store.documents.hold_for_review(lease, reasons)
    store.claims.complete(lease)
    return invoice_id


def import_vendor_master(store: InvoiceStore, org: str, csv_text: str) -> None:
    """The org's vendor master, as `invoice-pipeline vendors import` reads it; every row taken."""
    from invoice_pipeline.engine.vendors import read_vendor_csv

    result = store.vendors.import_vendors(org, read_vendor_csv(csv_text), "test")
    assert not result.refused, result.refused


def run_ok(database_url: str, invoice_ids: list[UUID]) -> None:
    """The real batch job over these invoices, in process; the run itself must succeed."""
    result = run_batch(database_url, invoice_ids)
    assert result.success, failure_messages(result)


def process_documents(
    database_url: str, store: InvoiceStore, org: str, documents: Sequence[tuple[bytes, str]]
) -> list[UUID]:
    """Ingest the documents in this order and process them as one batch (one chunk, arrival order)."""
    ids = [store.documents.store_document(content, org, name).invoice_id for content, name in documents]
    run_ok(database_url, ids)
    return ids
