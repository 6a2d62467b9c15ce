"""The sweep with Dagster's runs: engine/maintenance.py's pass, told the truth about the runs by
the Dagster instance, and telling Dagster the truth about the runs whose worker died."""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property

from dagster import DagsterInstance, DagsterRun, DagsterRunStatus, RunsFilter

from invoice_pipeline.engine.maintenance import MaintenanceReport, OwnerRuns, RunSeen, SweepSettings, sweep
from invoice_pipeline.orchestration.export_jobs import DELIVER_EXPORTS
from invoice_pipeline.orchestration.request_owner import RequestOwner, instance_scope, runs_filter
from invoice_pipeline.orchestration.run_requests import (
    PROCESS_INVOICE,
    PROCESS_INVOICE_BATCH,
    invoice_ids_of,
    run_owner,
)

IN_FLIGHT = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]
ENDED = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
# A run past the queue: its worker was started (or was to be) and may have died. A worker
# killed between creating its run and starting it leaves NOT_STARTED or STARTING for ever, and
# a run that is not ended keeps its requests (release_abandoned_requests).
LAUNCHED = [DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED]


def _seconds_since_last_event(instance: DagsterInstance, run_id: str) -> float:
    records = instance.get_records_for_run(run_id, limit=1, ascending=False).records
    if records:
        last = records[0].event_log_entry.timestamp
    else:
        record = instance.get_run_record_by_id(run_id)
        last = record.create_timestamp.timestamp() if record else time.time()
    return time.time() - last


@dataclass(frozen=True)
class RunLease:
    """A lease a run took (on an invoice or an export row), as the reconciler judges the run by it."""

    status: str
    error: str | None
    described: str
    # A delivery run's lease: seconds since it was last finished or heartbeated (database clock).
    idle_seconds: float | None = None


def leases_of_run(db: SweepSettings, run: DagsterRun) -> list[RunLease] | None:
    """The leases of one of our lease-taking runs; None for the other jobs."""
    owner = run_owner(run.run_id)
    if run.job_name in (PROCESS_INVOICE, PROCESS_INVOICE_BATCH):
        return [
            RunLease(j.status, j.error, f"invoice {j.invoice_id} (job {j.job_id})")
            for j in db.store.claims.jobs_of_owner(owner)
        ]
    if run.job_name == DELIVER_EXPORTS:
        return [
            RunLease(j.status, j.error, f"export row {j.export_id} (job {j.job_id})", j.idle_seconds)
            for j in db.store.exports.jobs_of_owner(owner)
        ]
    return None


def reconcile_dead_runs(db: SweepSettings, instance: DagsterInstance) -> list[str]:
    """Mark failed the runs that still say STARTED (or NOT_STARTED, STARTING) but whose
    worker is gone.

    The default run launcher cannot notice a SIGKILLed run worker, so without this the UI
    would show such a run as in progress forever, the invoices it was asked to process
    would stay requested by it, and exports_due_sensor would wait for the delivery run in
    flight for ever. A run is presumed dead when it holds no running lease and either a lease
    of it was swept, or it has logged nothing for longer than the lease TTL (it died before
    claiming, or after releasing): a live run holds its leases while it works and logs every
    step. A live delivery run logs nothing between its first and last batch, and holds no lease
    for the moment between two batches: its silence counts from its last lease's finish too.
    """
    reconciled = []
    for run in instance.get_runs(filters=RunsFilter(statuses=LAUNCHED)):
        # Not the celery job's runs: one that holds no lease and logs nothing may only be
        # waiting for a worker to take its next task. Their deadline bounds them instead
        # (celery_definitions.py).
        leases = leases_of_run(db, run)
        if leases is None or any(lease.status == "running" for lease in leases):
            continue
        swept = [lease for lease in leases if (lease.error or "").startswith("swept:")]
        if swept:
            reason = f"its lease on {swept[0].described} was swept — {swept[0].error}"
        else:
            since_lease = [lease.idle_seconds for lease in leases if lease.idle_seconds is not None]
            idle = min([_seconds_since_last_event(instance, run.run_id), *since_lease])
            if idle <= db.store.lock_ttl.total_seconds():
                continue
            reason = (
                f"it holds no lease and has logged nothing for {idle:.0f} s (lock TTL {db.store.lock_ttl})"
            )
        instance.report_run_failed(run, message=f"run worker presumed dead: {reason}")
        reconciled.append(run.run_id)
    return reconciled


def invoices_in_flight(instance: DagsterInstance) -> set[str]:
    """Invoice ids named by runs of our jobs that are queued or running: their request is not lost."""
    names: set[str] = set()
    for run in instance.get_runs(filters=RunsFilter(statuses=IN_FLIGHT)):
        names.update(invoice_ids_of(run.run_config))
    return names


class DagsterRuns:
    """The sweep's view of the runs (engine.maintenance.RunsView), read from a Dagster instance."""

    def __init__(self, instance: DagsterInstance) -> None:
        self.instance = instance

    def reconcile_dead_runs(self, db: SweepSettings) -> list[str]:
        return reconcile_dead_runs(db, self.instance)

    def invoices_in_flight(self) -> set[str]:
        return invoices_in_flight(self.instance)

    @cached_property
    def scope(self) -> str:
        """The run storage this view sees; asked once per sweep, it costs a query."""
        return instance_scope(self.instance)

    def runs_of(self, owner: str) -> OwnerRuns | None:
        parsed = RequestOwner.parse(owner)
        if parsed is None or parsed.instance_id != self.scope:
            return None
        seen = [
            RunSeen(run.run_id, run.status.value, run.status in ENDED)
            for run in self.instance.get_runs(filters=runs_filter(parsed))
        ]
        return OwnerRuns(seen, parsed.burns_a_run_key, f"{parsed.tag}={parsed.value}")


def run_maintenance(db: SweepSettings, instance: DagsterInstance | None) -> MaintenanceReport:
    """The sweep (engine/maintenance.py); with an instance, also reconciling its runs."""
    return sweep(db, None if instance is None else DagsterRuns(instance))
