"""`invoice-pipeline ingest`, `process` and `sweep`: files in, due invoices run headlessly
through the Dagster batch job, stale locks and dead runs swept. `process_due` is also the
demo's processing."""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from invoice_pipeline.cli.arguments import add_batch_size_argument, checked_org, positive_int
from invoice_pipeline.cli.exit_codes import EXIT_INVOICES_FAILED, EXIT_OK
from invoice_pipeline.cli.output import progress
from invoice_pipeline.cli.store import COMMAND_POOL
from invoice_pipeline.config import Settings
from invoice_pipeline.db.connection import prepare_database
from invoice_pipeline.engine.runs import InvoiceRef, RunShape
from invoice_pipeline.engine.store import InvoiceStore, open_store
from invoice_pipeline.forked import run_forked, usable_cores
from invoice_pipeline.orchestration.run_requests import batch_run_config
from invoice_pipeline.terminal import printable

# The org of invoices ingested without --org (said on stderr when it is used).
DEFAULT_ORG = "default"
# How `process` ends for the invoices it ran: these make it exit EXIT_INVOICES_FAILED.
BAD_OUTCOMES = ("quarantined", "failed", "needs_attention")


def cmd_ingest(args: argparse.Namespace, settings: Settings) -> int:
    from invoice_pipeline.engine.ingest import collect_files, ingest_files

    org = checked_org(DEFAULT_ORG if args.org is None else args.org)
    # Every argument is checked before the first file is stored: a bad one stores nothing.
    paths = collect_files([Path(p) for p in args.paths])
    store = open_store(settings, COMMAND_POOL)
    try:
        files = ingest_files(store, paths, org)
    finally:
        store.close()
    new = sum(1 for f in files if f.result.created)
    for f in files:
        print(f"{'new ' if f.result.created else 'same'}  {f.result.invoice_id}  {printable(f.path)}")
    print(
        f"ingested {len(files)} file(s) into org {printable(org)}: {new} new invoice(s), "
        f"{len(files) - new} already known"
    )
    if args.org is None:
        print(
            f"no --org given: stored in org {DEFAULT_ORG} (`invoice-pipeline status` lists every org)",
            file=sys.stderr,
        )
    return 0


@dataclass
class ProcessOutcome:
    runs: int = 0
    failed_runs: int = 0
    # How the invoices this command requested stand at the end, by status.
    by_status: dict[str, int] = field(default_factory=dict)

    @property
    def bad(self) -> int:
        return sum(self.by_status.get(s, 0) for s in BAD_OUTCOMES)


@dataclass(frozen=True)
class RunDone:
    """One batch run `process` executed: what it was asked to do, and whether every branch ran."""

    invoice_ids: list[uuid.UUID]
    success: bool


def process_due(
    settings: Settings,
    *,
    batch_size: int | None = None,
    workers: int | None = None,
    label: str = "processing",
) -> ProcessOutcome:
    """Run every due invoice through the Dagster batch job on the project's Dagster instance.

    Shaped like the sensor's runs (`RunShape`): up to `batch_size` (default: the setting
    INVOICE_PIPELINE_BATCH_SIZE) invoices per run, in chunks; a backlog of several chunks is
    cut evenly over one worker process per core (`RunShape.workers`), each executing its runs
    in turn (`workers` overrides the core count).
    """
    # Imported before any worker forks: each child starts warm.
    from invoice_pipeline.orchestration.dagster_home import import_instance_classes, prepare_dagster_home
    from invoice_pipeline.orchestration.definitions import batch_job_for_cli  # noqa: F401

    import_instance_classes()
    with _closing_store(settings) as store:
        url = store.database_url
        summary = store.reporting.status_summary()
    prepare_dagster_home(settings, url)
    shape = RunShape(batch_size or settings.batch_size)
    total = summary.by_status.get("pending", 0) + summary.by_status.get("failed", 0)
    processes = shape.workers(total, workers or usable_cores())
    claim = shape.claim_size(total, processes)

    def work(_index: int, send: Callable[[RunDone], None]) -> None:
        for run in execute_due_runs(settings, shape, claim):
            send(run)

    outcome = ProcessOutcome()
    requested: set[uuid.UUID] = set()
    done = 0
    progress(done, total, label)
    # One worker works in this process: forking only pays when there are cores to fill.
    runs = execute_due_runs(settings, shape, claim) if processes == 1 else run_forked(processes, work)
    for run in runs:
        requested.update(run.invoice_ids)
        outcome.runs += 1
        outcome.failed_runs += 0 if run.success else 1
        done = min(total, done + len(run.invoice_ids))
        progress(done, max(total, done), label)
    with _closing_store(settings) as store:
        outcome.by_status = store.reporting.status_counts_of(sorted(requested))
    return outcome


# `process` reads the status before and after its runs, and each worker claims its due
# invoices, one query at a time; the runs open their own stores (their resource's).
PROCESS_POOL = 2


@contextmanager
def _closing_store(settings: Settings) -> Iterator[InvoiceStore]:
    """The store, closed before any worker forks (a child must not share the pool's sockets)."""
    store = open_store(settings, PROCESS_POOL)
    try:
        yield store
    finally:
        store.close()


def execute_due_runs(settings: Settings, shape: RunShape, claim: int) -> Iterator[RunDone]:
    """Claim up to `claim` due invoices and execute a batch run on them, until none is due.

    Each batch's requests are recorded as owned by the run about to execute them (a tag on
    that run), so if this process is killed before the run claims them, the sweep releases
    them as soon as it finds the run dead, instead of after the request timeout.
    """
    from dagster import DagsterInstance, execute_job, reconstructable

    from invoice_pipeline.orchestration.definitions import batch_job_for_cli
    from invoice_pipeline.orchestration.request_owner import REQUEST_TAG, RequestOwner, instance_scope

    with _closing_store(settings) as store, DagsterInstance.get() as instance:
        scope = instance_scope(instance)
        while True:
            token = uuid.uuid4().hex
            due = store.claims.claim_due_invoices(claim, requested_by=RequestOwner.tagged(scope, token).text)
            if not due:
                return
            result = execute_job(
                reconstructable(batch_job_for_cli),
                instance=instance,
                run_config={
                    # The events go to the instance (and the UI); the terminal gets a progress bar.
                    "loggers": {"console": {"config": {"log_level": "CRITICAL"}}},
                    **batch_run_config(
                        [InvoiceRef(str(d.invoice_id), d.attempt) for d in due], shape.chunk_size
                    ),
                },
                tags={
                    "invoice_count": str(len(due)),
                    "launched_by": "invoice-pipeline process",
                    REQUEST_TAG: token,
                },
            )
            yield RunDone([d.invoice_id for d in due], result.success)


def cmd_process(args: argparse.Namespace, settings: Settings) -> int:
    outcome = process_due(settings, batch_size=args.batch_size, workers=args.workers)
    counts = (
        ", ".join(f"{status} {n}" for status, n in sorted(outcome.by_status.items())) or "nothing was due"
    )
    print(f"done: {counts}; {outcome.runs} run(s), {outcome.failed_runs} with a failing branch")
    if outcome.bad:
        print(
            f"{outcome.bad} invoice(s) were quarantined, failed or need attention: see `invoice-pipeline status`",
            file=sys.stderr,
        )
        return EXIT_INVOICES_FAILED
    return EXIT_OK


def cmd_sweep(args: argparse.Namespace, settings: Settings) -> int:
    from dagster import DagsterInstance

    from invoice_pipeline.orchestration.dagster_home import prepare_dagster_home
    from invoice_pipeline.orchestration.maintenance import run_maintenance
    from invoice_pipeline.orchestration.resources import InvoiceDatabase

    url = prepare_database(settings)
    prepare_dagster_home(settings, url)
    db = InvoiceDatabase.from_settings(settings)
    with DagsterInstance.get() as instance:
        print(run_maintenance(db, instance).summary())
    return 0


def add_process_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ingest = sub.add_parser("ingest", help="store files (or folders) as invoices")
    ingest.add_argument("paths", nargs="+")
    ingest.add_argument(
        "--org", default=None, help=f"the organisation the invoices belong to (default: {DEFAULT_ORG})"
    )
    ingest.set_defaults(func=cmd_ingest)
    process = sub.add_parser("process", help="process every due invoice through the Dagster jobs, headlessly")
    add_batch_size_argument(process)
    process.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="processes working a backlog at once (default: one per core, at most 4)",
    )
    process.set_defaults(func=cmd_process)
    sub.add_parser(
        "sweep", help="sweep stale locks and export leases, reconcile dead runs, schedule retries"
    ).set_defaults(func=cmd_sweep)
