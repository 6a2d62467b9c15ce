"""The sweep: free dead holders' locks (on invoices and on export rows), schedule retries, release
or expire requests no run will claim.

Dagster-free. What the sweep must know about runs (which died, which are in flight, which ended)
it asks a `RunsView`; orchestration/maintenance.py answers it from the Dagster instance. Without
one (the sensor's tick, a test) only the database part runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

from invoice_pipeline.engine.records import Rescheduled
from invoice_pipeline.engine.store import InvoiceStore


class SweepSettings(Protocol):
    """The store (which owns the lease TTL) and the timings the sweep works with (the
    InvoiceDatabase resource has them)."""

    @property
    def store(self) -> InvoiceStore: ...

    @property
    def max_attempts(self) -> int: ...

    @property
    def retry_base(self) -> timedelta: ...

    @property
    def request_timeout(self) -> timedelta: ...


@dataclass(frozen=True)
class RunSeen:
    """A run as the sweep needs it: its id, its status's name, and whether it has ended."""

    run_id: str
    status: str
    ended: bool


@dataclass(frozen=True)
class OwnerRuns:
    """What the orchestrator knows of the runs a request's owner names."""

    runs: list[RunSeen]
    # Releasing the request must count an attempt: the owner's retry cannot be requested under
    # the same name again (a sensor's run key is never run twice, failures included).
    counts_an_attempt: bool
    # The owner as a person reads it in the release reason.
    described: str


class RunsView(Protocol):
    """What the sweep asks the orchestrator about runs."""

    def reconcile_dead_runs(self, db: SweepSettings) -> list[str]:
        """Mark failed the runs whose worker is gone; their ids."""
        ...

    def invoices_in_flight(self) -> set[str]:
        """Invoice ids named by runs that are queued or running."""
        ...

    def runs_of(self, owner: str) -> OwnerRuns | None:
        """The runs a request's `owner` (the opaque string it was recorded with) names; None when
        they are not this view's to judge (another instance's runs, or an owner naming no run)."""
        ...


@dataclass(frozen=True)
class MaintenanceReport:
    swept: int
    reconciled_runs: list[str] = field(default_factory=list)
    rescheduled: list[Rescheduled] = field(default_factory=list)
    expired_requests: int = 0
    released_requests: list[Rescheduled] = field(default_factory=list)
    # Metric counter deltas folded (sql/0018_metrics.sql): bookkeeping, so it is neither in the
    # summary nor a change; folding here bounds the deltas where nothing scrapes the metrics.
    metric_deltas_folded: int = 0
    # Export leases (export_jobs) whose deliverer went silent past the lock TTL: swept here too,
    # so a dead deliverer's batch is freed even when no delivery runs to sweep it at its start.
    export_leases_swept: int = 0

    @property
    def changed_anything(self) -> bool:
        return bool(
            self.swept
            or self.export_leases_swept
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
            f"swept {self.swept} stale lock(s) and {self.export_leases_swept} stale export lease(s); marked {len(self.reconciled_runs)} dead run(s) failed; "
            f"scheduled {self.retried} retry(ies); {self.dead_lettered} invoice(s) need attention; "
            f"released {len(self.released_requests)} request(s) of ended or dead runs; "
            f"{self.expired_requests} unclaimed request(s) expired"
        )


def expire_lost_requests(db: SweepSettings, runs: RunsView) -> list[Rescheduled]:
    """A request whose run never claimed the invoice (its launch was lost, or the run failed
    before claiming) would otherwise stay requested forever: Dagster skips its run key again,
    failures included. Counting it as a failed attempt gives the retry the next attempt's key."""
    stale = db.store.maintenance.stale_requests(db.request_timeout)
    if not stale:
        return []
    in_flight = runs.invoices_in_flight()
    lost = [invoice_id for invoice_id in stale if str(invoice_id) not in in_flight]
    return db.store.maintenance.expire_requests(
        lost, db.request_timeout, max_attempts=db.max_attempts, retry_base=db.retry_base
    )


def release_abandoned_requests(db: SweepSettings, runs: RunsView) -> list[Rescheduled]:
    """Release at once the requests whose run ended or died without claiming the invoice.

    Runs after reconcile_dead_runs, so a run found dead in this sweep (swept, or silent past the
    lease TTL) already reads FAILURE here. An owner with no run at all may be a request whose
    run is about to be created (the daemon launches a tick's runs after the evaluation, and
    `invoice-pipeline process` right after claiming); it is released once older than the lease
    TTL, the same silence after which a run is presumed dead. Requests of another
    orchestrator instance, or with no recorded owner, are left to that instance's sweep and to the request
    timeout (expire_lost_requests).
    """
    released: list[Rescheduled] = []
    for open_requests in db.store.maintenance.open_request_owners():
        known = runs.runs_of(open_requests.owner)
        if known is None or any(not run.ended for run in known.runs):
            continue
        if known.runs:
            ended = ", ".join(f"{run.run_id} ({run.status})" for run in known.runs)
            reason = f"released: the run that was to process it ended without claiming it: {ended}"
            min_age = timedelta(0)
        else:
            reason = (
                f"released: no run for the request appeared within the lock TTL ({db.store.lock_ttl}); "
                f"the requester died before launching it ({known.described})"
            )
            min_age = db.store.lock_ttl
        released += db.store.maintenance.release_requests(
            open_requests.owner,
            reason,
            count_attempt=known.counts_an_attempt,
            min_age=min_age,
            max_attempts=db.max_attempts,
            retry_base=db.retry_base,
        )
    return released


def sweep(db: SweepSettings, runs: RunsView | None) -> MaintenanceReport:
    """One maintenance pass; with `runs`, also the parts that need to know the runs."""
    swept = db.store.maintenance.release_stale_locks()
    export_swept = db.store.exports.release_stale()
    reconciled = runs.reconcile_dead_runs(db) if runs is not None else []
    # A holder that died left no error to back off from: its invoice is due again at once.
    # (A step that failed is rescheduled with backoff by its op on its last try, not here.)
    rescheduled = db.store.maintenance.reschedule_orphans(
        max_attempts=db.max_attempts, retry_base=timedelta(0)
    )
    released = release_abandoned_requests(db, runs) if runs is not None else []
    expired = expire_lost_requests(db, runs) if runs is not None else []
    folded = db.store.metrics.fold_metric_counts()
    return MaintenanceReport(
        swept, reconciled, rescheduled + expired, len(expired), released, folded, export_swept
    )
