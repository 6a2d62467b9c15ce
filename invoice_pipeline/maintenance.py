"""The sweep: free dead holders' locks, tell Dagster the truth about their runs, schedule retries."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from invoice_pipeline.records import Rescheduled
from invoice_pipeline.request_owner import RequestOwner, instance_scope
from invoice_pipeline.resources import InvoiceDatabase
from invoice_pipeline.runs import PROCESS_INVOICE, PROCESS_INVOICE_BATCH, invoice_ids_of, run_owner

IN_FLIGHT = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]
ENDED = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}


@dataclass(frozen=True)
class MaintenanceReport:
    swept: int
    reconciled_runs: list[str] = field(default_factory=list)
    rescheduled: list[Rescheduled] = field(default_factory=list)
    expired_requests: int = 0
    released_requests: list[Rescheduled] = field(default_factory=list)

    @property
    def changed_anything(self) -> bool:
        return bool(
            self.swept
            or self.reconciled_runs
            or self.rescheduled
            or self.expired_requests
            or self.released_requests
        )

    @property
    def retried(self) -> int:
        return sum(1 for r in self.rescheduled if r.status == "failed")

    @property
    def dead_lettered(self) -> int:
        return sum(1 for r in self.rescheduled if r.status == "needs_attention")

    def summary(self) -> str:
        return (
            f"swept {self.swept} stale lock(s); marked {len(self.reconciled_runs)} dead run(s) failed; "
            f"scheduled {self.retried} retry(ies); {self.dead_lettered} invoice(s) need attention; "
            f"released {len(self.released_requests)} request(s) of ended or dead runs; "
            f"{self.expired_requests} unclaimed request(s) expired"
        )


def _seconds_since_last_event(instance: DagsterInstance, run_id: str) -> float:
    records = instance.get_records_for_run(run_id, limit=1, ascending=False).records
    if records:
        last = records[0].event_log_entry.timestamp
    else:
        record = instance.get_run_record_by_id(run_id)
        last = record.create_timestamp.timestamp() if record else time.time()
    return time.time() - last


def reconcile_dead_runs(db: InvoiceDatabase, instance: DagsterInstance) -> list[str]:
    """Mark failed the runs that still say STARTED but whose worker is gone.

    The default run launcher cannot notice a SIGKILLed run worker, so without this the UI
    would show such a run as in progress forever. A run is presumed dead when it holds no
    running lease and either a lease of it was swept, or it has logged nothing for longer than
    the lease TTL (it died before claiming, or after releasing): a live run holds its leases
    while it works and logs every step.
    """
    reconciled = []
    for run in instance.get_runs(filters=RunsFilter(statuses=[DagsterRunStatus.STARTED])):
        if run.job_name not in (PROCESS_INVOICE, PROCESS_INVOICE_BATCH):
            continue
        jobs = db.store.jobs_of_owner(run_owner(run.run_id))
        if any(j.status == "running" for j in jobs):
            continue
        swept = [j for j in jobs if (j.error or "").startswith("swept:")]
        if swept:
            reason = f"its lease on invoice {swept[0].invoice_id} (job {swept[0].job_id}) was swept — {swept[0].error}"
        else:
            idle = _seconds_since_last_event(instance, run.run_id)
            if idle <= db.lock_ttl.total_seconds():
                continue
            reason = f"it holds no lease and has logged nothing for {idle:.0f} s (lock TTL {db.lock_ttl})"
        instance.report_run_failed(run, message=f"run worker presumed dead: {reason}")
        reconciled.append(run.run_id)
    return reconciled


def invoices_in_flight(instance: DagsterInstance) -> set[str]:
    """Invoice ids named by runs of our jobs that are queued or running: their request is not lost."""
    names: set[str] = set()
    for run in instance.get_runs(filters=RunsFilter(statuses=IN_FLIGHT)):
        names.update(invoice_ids_of(run.run_config))
    return names


def expire_lost_requests(db: InvoiceDatabase, instance: DagsterInstance) -> list[Rescheduled]:
    """A request whose run never claimed the invoice (its launch was lost, or the run failed
    before claiming) would otherwise stay requested forever: Dagster skips its run key again,
    failures included. Counting it as a failed attempt gives the retry the next attempt's key."""
    stale = db.store.stale_requests(db.request_timeout)
    if not stale:
        return []
    in_flight = invoices_in_flight(instance)
    lost = [invoice_id for invoice_id in stale if str(invoice_id) not in in_flight]
    return db.store.expire_requests(
        lost, db.request_timeout, max_attempts=db.max_attempts, retry_base=db.retry_base
    )


def release_abandoned_requests(db: InvoiceDatabase, instance: DagsterInstance) -> list[Rescheduled]:
    """Release at once the requests whose run ended or died without claiming the invoice.

    Runs after reconcile_dead_runs, so a run found dead in this sweep (swept, or silent past the
    lease TTL) already reads FAILURE here. An owner with no run at all may be a request whose
    run is about to be created (the daemon launches a tick's runs after the evaluation, and
    `invoice-pipeline process` right after claiming); it is released once older than the lease
    TTL, the same silence after which a run is presumed dead. Requests of another Dagster
    instance, or with no recorded owner, are left to that instance's sweep and to the request
    timeout (expire_lost_requests).
    """
    scope = instance_scope(instance)
    released: list[Rescheduled] = []
    for open_requests in db.store.open_request_owners():
        owner = RequestOwner.parse(open_requests.owner)
        if owner is None or owner.instance_id != scope:
            continue
        runs = instance.get_runs(filters=owner.runs_filter())
        if any(run.status not in ENDED for run in runs):
            continue
        if runs:
            ended = ", ".join(f"{run.run_id} ({run.status.value})" for run in runs)
            reason = f"released: the run that was to process it ended without claiming it: {ended}"
            min_age = timedelta(0)
        else:
            reason = (
                f"released: no run for the request appeared within the lock TTL ({db.lock_ttl}); "
                f"the requester died before launching it ({owner.tag}={owner.value})"
            )
            min_age = db.lock_ttl
        released += db.store.release_requests(
            owner.text,
            reason,
            count_attempt=owner.burns_a_run_key,
            min_age=min_age,
            max_attempts=db.max_attempts,
            retry_base=db.retry_base,
        )
    return released


def run_maintenance(db: InvoiceDatabase, instance: DagsterInstance | None) -> MaintenanceReport:
    swept = db.store.release_stale_locks(stale_after=db.lock_ttl)
    reconciled = reconcile_dead_runs(db, instance) if instance is not None else []
    # A holder that died left no error to back off from: its invoice is due again at once.
    # (A step that failed is rescheduled with backoff by its op on its last try, not here.)
    rescheduled = db.store.reschedule_orphans(max_attempts=db.max_attempts, retry_base=timedelta(0))
    released = release_abandoned_requests(db, instance) if instance is not None else []
    expired = expire_lost_requests(db, instance) if instance is not None else []
    return MaintenanceReport(swept, reconciled, rescheduled + expired, len(expired), released)
