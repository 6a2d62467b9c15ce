"""Every five minutes: sweep stale locks (invoices and export rows), reconcile dead runs, schedule retries or give up."""

from dagster import DefaultScheduleStatus, ScheduleEvaluationContext, SkipReason, schedule

from invoice_pipeline.orchestration.jobs import process_invoice_batch
from invoice_pipeline.orchestration.maintenance import run_maintenance
from invoice_pipeline.orchestration.resources import InvoiceDatabase


# The work happens in the evaluation itself, by the daemon: it must keep running even when
# launching runs does not (a broken code location, a full run queue). The retries it schedules
# are launched by new_invoices_sensor when they fall due, so this schedule requests no run.
@schedule(
    name="sweep_stale_locks",
    cron_schedule="*/5 * * * *",
    job=process_invoice_batch,
    default_status=DefaultScheduleStatus.RUNNING,
    description="Sweep stale locks and export leases, mark dead runs failed, schedule retries with backoff, dead-letter after max attempts.",
)
def sweep_stale_locks_schedule(context: ScheduleEvaluationContext, invoice_db: InvoiceDatabase) -> SkipReason:
    report = run_maintenance(invoice_db, context.instance)
    context.log.info(report.summary())
    return SkipReason(report.summary())
