"""The code location: jobs, sensor, schedule, resources."""

from __future__ import annotations

from dagster import Definitions, JobDefinition

from invoice_pipeline.config import Settings
from invoice_pipeline.jobs import process_invoice, process_invoice_batch
from invoice_pipeline.resources import DocumentReader, InvoiceDatabase
from invoice_pipeline.schedules import sweep_stale_locks_schedule
from invoice_pipeline.sensors import new_invoices_sensor


def make_resources(settings: Settings | None = None) -> dict[str, object]:
    return {
        "invoice_db": InvoiceDatabase.from_settings(settings or Settings.from_env()),
        "document_reader": DocumentReader(),
    }


defs = Definitions(
    jobs=[process_invoice, process_invoice_batch],
    sensors=[new_invoices_sensor],
    schedules=[sweep_stale_locks_schedule],
    resources=make_resources(),
)


def batch_job_for_cli() -> JobDefinition:
    """The batch job with the code location's resources bound, for `invoice-pipeline process`."""
    return defs.get_job_def("process_invoice_batch")
