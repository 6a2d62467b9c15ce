"""Turn invoices that need processing into runs, without ever losing one.

There is no cursor. A sequence or timestamp cursor loses an invoice whose INSERT commits
after a later one was already seen; instead the sensor asks the database for every invoice
that is due (new, or failed with its retry due) and not yet requested, and marks what it
requests. Dagster skips a run key it has already seen (failures included), so the key carries
the attempt: a retry is a new key, a redelivered request for the same attempt is not.
"""

from collections.abc import Iterator

from dagster import DefaultSensorStatus, RunRequest, SensorEvaluationContext, SkipReason, sensor

from invoice_pipeline.config import Settings
from invoice_pipeline.ingest import ingest_inbox
from invoice_pipeline.jobs import (
    PROCESS_INVOICE,
    PROCESS_INVOICE_BATCH,
    process_invoice,
    process_invoice_batch,
)
from invoice_pipeline.ops import InvoiceRef, batch_run_key
from invoice_pipeline.resources import InvoiceDatabase
from invoice_pipeline.store import DueInvoice


def plan_run_requests(due: list[DueInvoice], batch_threshold: int, batch_size: int) -> Iterator[RunRequest]:
    """One run per invoice for a trickle; batched runs once the backlog reaches the threshold."""
    if len(due) < batch_threshold:
        for item in due:
            yield RunRequest(
                run_key=f"invoice:{item.invoice_id}:attempt:{item.attempt}",
                job_name=PROCESS_INVOICE,
                run_config={
                    "ops": {
                        "start": {"config": {"invoice_id": str(item.invoice_id), "attempt": item.attempt}}
                    }
                },
                tags={
                    "invoice_id": str(item.invoice_id),
                    "org_id": item.org_id,
                    "attempt": str(item.attempt),
                },
            )
        return
    for i in range(0, len(due), batch_size):
        chunk = due[i : i + batch_size]
        refs = [InvoiceRef(str(d.invoice_id), d.attempt) for d in chunk]
        yield RunRequest(
            run_key=batch_run_key(refs),
            job_name=PROCESS_INVOICE_BATCH,
            run_config={
                "ops": {
                    "fan_out": {
                        "config": {
                            "invoice_ids": [r.invoice_id for r in refs],
                            "attempts": [r.attempt for r in refs],
                        }
                    }
                }
            },
            tags={"invoice_count": str(len(refs)), "org_ids": ",".join(sorted({d.org_id for d in chunk}))},
        )


@sensor(
    jobs=[process_invoice, process_invoice_batch],
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=10,
    description="Ingest the inbox, then request runs for new invoices and for failed ones whose retry is due.",
)
def new_invoices_sensor(
    context: SensorEvaluationContext, invoice_db: InvoiceDatabase
) -> Iterator[RunRequest | SkipReason]:
    store = invoice_db.store
    ingested = ingest_inbox(store, Settings.from_env().inbox)
    if ingested:
        context.log.info(f"ingested {len(ingested)} file(s) from the inbox")
    due = store.claim_due_invoices(limit=invoice_db.batch_size * 4)
    if not due:
        yield SkipReason("no invoices due")
        return
    yield from plan_run_requests(due, invoice_db.batch_threshold, invoice_db.batch_size)
