"""What the export tests, the chaos scenario and the benchmark share: posted invoices, targets."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg

from invoice_pipeline.config import DEFAULT_MAX_DOCUMENT_BYTES
from invoice_pipeline.engine.chunk_loop import claim_chunk, process_chunk
from invoice_pipeline.engine.export_records import ExportTarget
from invoice_pipeline.engine.stages import StageEnv
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.resources import DocumentReader
from pipeline_support.factories import json_invoice

IBAN = "DE89370400440532013000"
VAT = "DE136695976"  # check digits valid
SECRET = b"a-test-secret-not-a-real-one"


def ingest_invoices(store: InvoiceStore, org: str, count: int, first: int = 1) -> list[UUID]:
    """`count` JSON invoices of one vendor (numbers INV-<first>...), stored as the inbox would."""
    return [
        store.documents.store_document(
            json_invoice(f"INV-{n:05d}", total=f"{100 + n}.00", vat_id=VAT, payee_iban=IBAN), org, f"{n}.json"
        ).invoice_id
        for n in range(first, first + count)
    ]


def process_invoices(store: InvoiceStore, ids: list[UUID], owner: str = "post_invoices") -> None:
    """Claim the invoices as one chunk and take them through every stage, in this process, with
    the real document reader (the chunk loop a run uses, without Dagster)."""
    env = StageEnv(
        store=store,
        parser=DocumentReader(isolate=False),
        max_document_bytes=DEFAULT_MAX_DOCUMENT_BYTES,
        max_stage_seconds=120,
        max_attempts=3,
        retry_base=timedelta(minutes=1),
    )
    process_chunk(env, claim_chunk(store, [(i, None) for i in ids], owner))


def post_invoices(store: InvoiceStore, org: str, count: int, first: int = 1) -> list[UUID]:
    """`count` invoices of one vendor, ingested and posted."""
    ids = ingest_invoices(store, org, count, first)
    process_invoices(store, ids)
    return ids


def webhook_target(
    store: InvoiceStore, org: str, url: str, secret_file: Path, name: str = "erp", **options: Any
) -> ExportTarget:
    secret_file.write_bytes(SECRET)
    timeout = options.pop("timeout_s", 5)
    return store.exports.add_target(
        org, name, "webhook", {"url": url, "secret_file": str(secret_file), "timeout_s": timeout}, **options
    )


def datev_target(
    store: InvoiceStore, org: str, folder: Path, name: str = "datev", **options: Any
) -> ExportTarget:
    return store.exports.add_target(
        org, name, "datev", {"dir": str(folder), "consultant": 1001, "client": 1}, **options
    )


def sql(url: str, statement: str, params: tuple[object, ...] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
    """A test's or a scenario's own look at the database, beside the product's queries."""
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def statuses(url: str, target: ExportTarget) -> dict[str, int]:
    rows = sql(url, "SELECT status, count(*) FROM exports WHERE target_id = %s GROUP BY 1", (target.id,))
    return {str(status): int(n) for status, n in rows}


def age_export_leases(url: str, by: timedelta = timedelta(minutes=10)) -> int:
    """Back-date every running export lease's heartbeat (a dead holder), instead of waiting."""
    rows = sql(
        url,
        "UPDATE export_jobs SET heartbeat_at = heartbeat_at - %s WHERE status = 'running' RETURNING id",
        (by,),
    )
    return len(rows)
