"""The sweep: free dead holders' locks, tell Dagster the truth about their runs, schedule retries."""

from __future__ import annotations

from dataclasses import dataclass, field

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from invoice_pipeline.jobs import PROCESS_INVOICE, PROCESS_INVOICE_BATCH
from invoice_pipeline.ops import run_owner
from invoice_pipeline.resources import InvoiceDatabase
from invoice_pipeline.store import Rescheduled


@dataclass(frozen=True)
class MaintenanceReport:
    swept: int
    reconciled_runs: list[str] = field(default_factory=list)
    rescheduled: list[Rescheduled] = field(default_factory=list)

    @property
    def retried(self) -> int:
        return sum(1 for r in self.rescheduled if r.status == "failed")

    @property
    def dead_lettered(self) -> int:
        return sum(1 for r in self.rescheduled if r.status == "needs_attention")

    def summary(self) -> str:
        return (
            f"swept {self.swept} stale lock(s); marked {len(self.reconciled_runs)} dead run(s) failed; "
            f"scheduled {self.retried} retry(ies); {self.dead_lettered} invoice(s) need attention"
        )


def reconcile_dead_runs(db: InvoiceDatabase, instance: DagsterInstance) -> list[str]:
    """Mark failed the runs that still say STARTED but whose every lease was swept.

    The default run launcher cannot notice a SIGKILLed run worker, so without this the UI
    would show such a run as in progress forever.
    """
    reconciled = []
    runs = instance.get_runs(
        filters=RunsFilter(statuses=[DagsterRunStatus.STARTED], job_name=None),
    )
    for run in runs:
        if run.job_name not in (PROCESS_INVOICE, PROCESS_INVOICE_BATCH):
            continue
        jobs = db.store.jobs_of_owner(run_owner(run.run_id))
        if not jobs or any(j.status == "running" for j in jobs):
            continue
        swept = [j for j in jobs if (j.error or "").startswith("swept:")]
        if not swept:
            continue
        instance.report_run_failed(
            run,
            message=(
                f"run worker presumed dead: its lease on invoice {swept[0].invoice_id} (job {swept[0].job_id}) "
                f"was swept — {swept[0].error}"
            ),
        )
        reconciled.append(run.run_id)
    return reconciled


def run_maintenance(db: InvoiceDatabase, instance: DagsterInstance | None) -> MaintenanceReport:
    swept = db.store.release_stale_locks(stale_after=db.lock_ttl)
    reconciled = reconcile_dead_runs(db, instance) if instance is not None else []
    rescheduled = db.store.reschedule_orphans(max_attempts=db.max_attempts, retry_base=db.retry_base)
    return MaintenanceReport(swept, reconciled, rescheduled)
