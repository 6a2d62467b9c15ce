"""Delivering postings to the books in Dagster (issue 56; docs/exports.md): the `deliver_exports`
job, launched by `exports_due_sensor` when export rows are due, and the `export_batches` asset
downstream of `ledger_postings` in the lineage.

Thin: the op calls the engine's delivery loop (engine/exports/delivery.py), the same one
`invoice-pipeline export run --once` calls, under leases owned by the run. A run killed
mid-batch leaves its leases to the sweep at the next delivery; its retry, or the next run the
sensor launches, delivers the batch again under the same keys and file names.
"""

from dagster import (
    AssetMaterialization,
    AssetSpec,
    DagsterRunStatus,
    DefaultSensorStatus,
    MetadataValue,
    OpExecutionContext,
    RetryPolicy,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SkipReason,
    in_process_executor,
    job,
    op,
    sensor,
)

from invoice_pipeline.engine.exports.delivery import deliver
from invoice_pipeline.orchestration.assets.lineage import ASSET_LEDGER, GROUP
from invoice_pipeline.orchestration.resources import InvoiceDatabase
from invoice_pipeline.orchestration.run_requests import run_owner

DELIVER_EXPORTS = "deliver_exports"
ASSET_EXPORTS = "export_batches"
ACTIVE = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]

export_assets = [
    AssetSpec(
        ASSET_EXPORTS,
        description="Postings delivered to the books: DATEV files and webhook requests, a batch at a time, "
        "each posting accepted once by its key.",
        deps=[ASSET_LEDGER],
        group_name=GROUP,
        kinds={"postgres"},
    )
]


@op(retry_policy=RetryPolicy(max_retries=3, delay=5))
def deliver_due_exports(context: OpExecutionContext, invoice_db: InvoiceDatabase) -> None:
    """Every batch due now, target by target; the outcome counts materialize export_batches."""
    report = deliver(invoice_db.store, run_owner(context.run_id))
    context.log.info(
        f"{report.batches} batch(es): {report.delivered} delivered, {report.retried} to retry, "
        f"{report.dead} dead-lettered, {report.lost} lost to the sweep, {report.swept} stale lease(s) swept"
    )
    if report.batches:
        context.log_event(
            AssetMaterialization(
                ASSET_EXPORTS,
                metadata={
                    "batches": report.batches,
                    "delivered": report.delivered,
                    "retried": report.retried,
                    "dead_lettered": report.dead,
                    "delivered_by_target": MetadataValue.json(report.by_target),
                },
            )
        )


@job(name=DELIVER_EXPORTS, executor_def=in_process_executor, description="Deliver due postings to the books.")
def deliver_exports() -> None:
    deliver_due_exports()


@sensor(job=deliver_exports, minimum_interval_seconds=15, default_status=DefaultSensorStatus.RUNNING)
def exports_due_sensor(
    context: SensorEvaluationContext, invoice_db: InvoiceDatabase
) -> SkipReason | RunRequest:
    """A delivery run when rows are due and none is running already (one is enough: it takes
    every due batch; a second would only bounce off its leases)."""
    due = invoice_db.store.exports.targets_due()
    if not due:
        return SkipReason("no export rows due")
    if context.instance.get_runs_count(RunsFilter(job_name=DELIVER_EXPORTS, statuses=ACTIVE)):
        return SkipReason("a delivery run is in flight")
    return RunRequest(tags={"export_targets": ",".join(f"{t.org_id}/{t.name}" for t in due)[:200]})
