"""Turn invoices that need processing into runs, without ever losing one.

No cursor decides which invoices to request. A sequence or timestamp cursor loses an invoice
whose INSERT commits after a later one was already seen; instead the sensor asks the database
for every invoice that is due (new, or failed with its retry due) and not yet requested, and
marks what it requests, with the run key it is requested under (its owner: see
request_owner.py). Dagster skips a run key it has already seen (failures included), so the key
carries the attempt: a retry is a new key, a redelivered request for the same attempt is not.

The sensor's cursor holds only what the last inbox scan saw of the files it did not take yet
(size and mtime): a file is taken when it is unchanged in two scans. That observation belongs
with the sensor: losing it (a reset cursor) only delays each waiting file by one tick, and a
table would cost a write per waiting file per tick for nothing more.
"""

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from uuid import UUID

from dagster import (
    DefaultSensorStatus,
    JobDefinition,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from invoice_pipeline.engine.ingest import FileState, InboxPass, display_name, ingest_inbox
from invoice_pipeline.engine.records import DueInvoice
from invoice_pipeline.engine.runs import InvoiceRef, RunShape
from invoice_pipeline.orchestration.jobs import process_invoice, process_invoice_batch
from invoice_pipeline.orchestration.maintenance import run_maintenance
from invoice_pipeline.orchestration.request_owner import RequestOwner, instance_scope
from invoice_pipeline.orchestration.resources import InvoiceDatabase
from invoice_pipeline.orchestration.run_requests import (
    PROCESS_INVOICE,
    PROCESS_INVOICE_BATCH,
    batch_run_config,
    batch_run_key,
    invoice_ids_of,
    invoice_run_key,
    single_run_config,
)

CURSOR_VERSION = 1
SENSOR_INTERVAL_SECONDS = 5


@dataclass(frozen=True)
class RunTargets:
    """The jobs a sensor's requests launch, and tags every request carries."""

    batch_job: str = PROCESS_INVOICE_BATCH
    # None: a lone invoice goes as a batch of one (the celery location: every invoice on a
    # worker host, none in the run's own process).
    single_job: str | None = PROCESS_INVOICE
    tags: Mapping[str, str] = field(default_factory=dict)


IN_PROCESS = RunTargets()


def plan_run_requests(
    due: list[DueInvoice], shape: RunShape, targets: RunTargets = IN_PROCESS
) -> Iterator[RunRequest]:
    """Whatever is due in a tick shares runs: one batched run (worked in chunks) per `batch_size`.

    A tick with one invoice due gets the one-invoice job: the same work, and its run key names
    the invoice and attempt, which the UI shows and a redrive bumps.
    """
    if len(due) == 1 and targets.single_job is not None:
        (item,) = due
        ref = InvoiceRef(str(item.invoice_id), item.attempt, item.redrive)
        yield RunRequest(
            run_key=invoice_run_key(ref),
            job_name=targets.single_job,
            run_config=single_run_config(ref),
            tags={
                **targets.tags,
                "invoice_id": ref.invoice_id,
                "org_id": item.org_id,
                "attempt": str(ref.attempt),
            },
        )
        return
    for batch in shape.batches(due):
        refs = [InvoiceRef(str(d.invoice_id), d.attempt, d.redrive) for d in batch]
        yield RunRequest(
            run_key=batch_run_key(refs),
            job_name=targets.batch_job,
            run_config=batch_run_config(refs, shape.chunk_size),
            tags={
                **targets.tags,
                "invoice_count": str(len(refs)),
                "org_ids": ",".join(sorted({d.org_id for d in batch})),
            },
        )


def load_cursor(cursor: str | None) -> dict[str, FileState]:
    """The files the last scan saw; a missing or unreadable cursor is an empty one (costs one tick)."""
    try:
        data = json.loads(cursor or "{}")
        if data.get("v") != CURSOR_VERSION:
            return {}
        return {str(k): FileState(int(v[0]), int(v[1])) for k, v in data.get("inbox", {}).items()}
    except (ValueError, TypeError, AttributeError, IndexError, KeyError):
        return {}


def dump_cursor(waiting: Mapping[str, FileState]) -> str:
    # ensure_ascii keeps a name with undecodable bytes (lone surrogates) as a \udcXX escape.
    return json.dumps(
        {"v": CURSOR_VERSION, "inbox": {k: [s.size, s.mtime_ns] for k, s in sorted(waiting.items())}},
        ensure_ascii=True,
    )


def _log_pass(context: SensorEvaluationContext, done: InboxPass) -> None:
    if done.ingested:
        context.log.info(f"ingested {len(done.ingested)} file(s) from the inbox")
    for r in done.rejected:
        where = f"moved to {display_name(str(r.moved_to))}" if r.moved_to else "left where it is"
        context.log.warning(f"inbox: rejected {display_name(str(r.path))} ({where}): {r.reason}")
    for s in done.skipped:
        context.log.warning(f"inbox: skipped {display_name(str(s.path))}: {s.reason}")
    if done.error:
        context.log.error(f"inbox: intake stopped early: {done.error}")


def make_new_invoices_sensor(
    name: str, jobs: Sequence[JobDefinition], targets: RunTargets
) -> SensorDefinition:
    """The sensor of a code location: the same intake, sweep and planning, its own jobs."""

    @sensor(
        name=name,
        jobs=list(jobs),
        default_status=DefaultSensorStatus.RUNNING,
        # Every 5 s: a new file is ingested once nobody has written it for 5 s (ingest.QUIET_SECONDS),
        # at the first tick after that; a run's latency is mostly this wait.
        minimum_interval_seconds=SENSOR_INTERVAL_SECONDS,
        description="Ingest the inbox, then request runs for new invoices and for failed ones whose retry is due.",
    )
    def new_invoices(
        context: SensorEvaluationContext, invoice_db: InvoiceDatabase
    ) -> Iterator[RunRequest | SkipReason]:
        yield from _tick(context, invoice_db, targets)

    return new_invoices


def _tick(
    context: SensorEvaluationContext, invoice_db: InvoiceDatabase, targets: RunTargets
) -> Iterator[RunRequest | SkipReason]:
    store = invoice_db.store
    inbox = invoice_db.inbox_path
    try:
        # The inbox comes from the resource, configured once when the code location loaded.
        done = ingest_inbox(store, inbox, load_cursor(context.cursor)) if inbox else None
    except Exception as exc:  # intake trouble must never stop the planning below
        context.log.error(f"inbox: intake failed this tick, planning goes on: {type(exc).__name__}: {exc}")
    else:
        if done is not None:
            _log_pass(context, done)
            context.update_cursor(dump_cursor(done.waiting))

    try:
        # Recovery by default: a dead holder's lease is swept within a tick of its TTL, not at
        # the next five-minute schedule, and its invoice is planned in this same tick. Only the
        # database part (no instance): a fraction of a millisecond. Reconciling dead Dagster runs
        # and releasing their requests reads the run storage; the schedule does that.
        report = run_maintenance(invoice_db, None)
        if report.changed_anything:
            context.log.info(report.summary())
    except Exception as exc:  # the sweep schedule is the backstop; planning goes on
        context.log.error(f"maintenance failed this tick, planning goes on: {type(exc).__name__}: {exc}")

    planned: list[RunRequest] = []
    scope = instance_scope(context.instance)
    shape = RunShape(invoice_db.batch_size)

    def owners(due: list[DueInvoice]) -> dict[UUID, str]:
        # Planned inside the claiming transaction, so each request is recorded with its run key.
        planned.extend(plan_run_requests(due, shape, targets))
        return {
            UUID(invoice_id): RequestOwner.run_key(scope, str(request.run_key)).text
            for request in planned
            for invoice_id in invoice_ids_of(request.run_config)
        }

    store.claims.claim_due_invoices(limit=shape.batch_size * shape.concurrent_runs, requested_by=owners)
    if not planned:
        yield SkipReason("no invoices due")
        return
    yield from planned


new_invoices_sensor = make_new_invoices_sensor(
    "new_invoices_sensor", [process_invoice, process_invoice_batch], IN_PROCESS
)
