"""`invoice-pipeline`: the database, ingest, headless processing through Dagster, status, the UI, the demo."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from invoice_pipeline.cli_layouts import add_layout_commands
from invoice_pipeline.cli_store import open_store
from invoice_pipeline.cli_vendors import add_vendor_commands
from invoice_pipeline.config import ConfigError, Settings
from invoice_pipeline.db.connection import database_url, embedded_server, prepare_database
from invoice_pipeline.db.migrate import MigrationError, migrate
from invoice_pipeline.domain.review import reason_code
from invoice_pipeline.domain.validation import is_known_currency
from invoice_pipeline.engine.records import TERMINAL_STATUSES
from invoice_pipeline.engine.review import (
    REQUEUE_STATUSES,
    REVIEW_STATUSES,
    Actor,
    TargetFilter,
    act_on,
    check_reason_code,
    parse_age,
    statuses_for,
)
from invoice_pipeline.engine.review_records import Action, ActionOutcome, ReviewTarget
from invoice_pipeline.engine.runs import InvoiceRef, RunShape, batch_run_config, run_id_of
from invoice_pipeline.engine.store import InvoiceStore, dumps
from invoice_pipeline.forked import run_forked, usable_cores
from invoice_pipeline.terminal import printable

# Exit codes (docs/cli.md lists them).
EXIT_OK = 0
EXIT_INVOICES_FAILED = 1  # `process`: some invoices it ran were quarantined, failed or need attention
EXIT_USAGE = 2  # bad arguments or settings, refused before any SQL runs
EXIT_DATABASE = 3  # the database server cannot be reached, or the database does not exist
# (`db status` also exits 3: the embedded server is not running.)

# How `process` ends for the invoices it ran: these make it exit EXIT_INVOICES_FAILED.
BAD_OUTCOMES = ("quarantined", "failed", "needs_attention")


_store = open_store


def one_line(exc: BaseException) -> str:
    """An error as one line: libpq's messages carry newlines and tabbed hints."""
    return printable(" ".join(str(exc).split()) or type(exc).__name__)


# -- argument types: refused by argparse (exit 2) before anything runs -----------------------------


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def port_number(text: str) -> int:
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port (1-65535), got {value}")
    return value


def invoice_id_arg(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invoice_id must be a UUID, got {text!r}") from None


def progress(done: int, total: int, label: str) -> None:
    """A one-line progress bar on stderr, redrawn in place."""
    width = 30
    filled = width * done // max(total, 1)
    end = "\n" if done >= total else ""
    print(
        f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}",
        end=end,
        file=sys.stderr,
        flush=True,
    )


# -- db ------------------------------------------------------------------------------------------


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to file descriptor 1 (ours and our children's) to stderr.

    `db url` is meant for `$(invoice-pipeline db url)`: only the URL may reach stdout, not a
    note from starting the server or from a tool it runs.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def cmd_db(args: argparse.Namespace, settings: Settings) -> int:
    if not settings.uses_embedded_postgres:
        # A note, not output: stdout stays clean for `db url`.
        print(
            f"using the external database from INVOICE_PIPELINE_DATABASE_URL; nothing embedded to {args.action}",
            file=sys.stderr,
        )
        if args.action == "url":
            print(settings.database_url)
        return 0
    if args.action == "url":
        with stdout_to_stderr():
            url = database_url(settings)
        print(url)
        return 0
    server = embedded_server(settings)
    if args.action == "start":
        status = server.start()
        print(
            f"embedded PostgreSQL running (pid {status.pid}) on 127.0.0.1:{status.port}, data in {status.pgdata}"
        )
    elif args.action == "stop":
        print("stopped" if server.stop() else "was not running")
    elif args.action == "status":
        status = server.status()
        print(f"running, pid {status.pid}, port {status.port}" if status.running else "not running")
        return 0 if status.running else 3
    return 0


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    result = migrate(database_url(settings))
    for name in result.applied:
        print(f"applied {name}")
    print(f"up to date ({len(result.applied)} applied, {len(result.already_applied)} already applied)")
    return 0


# -- ingest and process --------------------------------------------------------------------------


def cmd_ingest(args: argparse.Namespace, settings: Settings) -> int:
    from invoice_pipeline.engine.ingest import collect_files, ingest_files, org_problem

    problem = org_problem(args.org)
    if problem is not None:
        raise ConfigError(f"--org: {problem}")
    # Every argument is checked before the first file is stored: a bad one stores nothing.
    paths = collect_files([Path(p) for p in args.paths])
    store = _store(settings)
    try:
        files = ingest_files(store, paths, args.org)
    finally:
        store.close()
    new = sum(1 for f in files if f.result.created)
    for f in files:
        print(f"{'new ' if f.result.created else 'same'}  {f.result.invoice_id}  {printable(f.path)}")
    print(f"ingested {len(files)} file(s): {new} new invoice(s), {len(files) - new} already known")
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
    url = prepare_database(settings)
    prepare_dagster_home(settings, url)
    shape = RunShape(batch_size or settings.batch_size)
    with _closing_store(url, settings) as store:
        summary = store.reporting.status_summary()
    total = summary.by_status.get("pending", 0) + summary.by_status.get("failed", 0)
    processes = shape.workers(total, workers or usable_cores())
    claim = shape.claim_size(total, processes)

    def work(_index: int, send: Callable[[RunDone], None]) -> None:
        for run in execute_due_runs(url, settings, shape, claim):
            send(run)

    outcome = ProcessOutcome()
    requested: set[uuid.UUID] = set()
    done = 0
    progress(done, total, label)
    # One worker works in this process: forking only pays when there are cores to fill.
    runs = execute_due_runs(url, settings, shape, claim) if processes == 1 else run_forked(processes, work)
    for run in runs:
        requested.update(run.invoice_ids)
        outcome.runs += 1
        outcome.failed_runs += 0 if run.success else 1
        done = min(total, done + len(run.invoice_ids))
        progress(done, max(total, done), label)
    with _closing_store(url, settings) as store:
        outcome.by_status = store.reporting.status_counts_of(sorted(requested))
    return outcome


@contextmanager
def _closing_store(url: str, settings: Settings) -> Iterator[InvoiceStore]:
    store = InvoiceStore(url, max_size=2, lock_ttl=settings.lock_ttl)
    try:
        yield store
    finally:
        store.close()


def execute_due_runs(url: str, settings: Settings, shape: RunShape, claim: int) -> Iterator[RunDone]:
    """Claim up to `claim` due invoices and execute a batch run on them, until none is due.

    Each batch's requests are recorded as owned by the run about to execute them (a tag on
    that run), so if this process is killed before the run claims them, the sweep releases
    them as soon as it finds the run dead, instead of after the request timeout.
    """
    from dagster import DagsterInstance, execute_job, reconstructable

    from invoice_pipeline.engine.request_owner import REQUEST_TAG, RequestOwner
    from invoice_pipeline.orchestration.definitions import batch_job_for_cli
    from invoice_pipeline.orchestration.request_owner import instance_scope

    with _closing_store(url, settings) as store, DagsterInstance.get() as instance:
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


# -- reading -------------------------------------------------------------------------------------


def cmd_metrics(args: argparse.Namespace, settings: Settings) -> int:
    """Prometheus metrics read from the database: printed once (--once), or served on
    http://HOST:PORT/metrics until stopped (loopback unless told otherwise)."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client import make_wsgi_app

    from invoice_pipeline.engine.metrics import exposition, registry_for

    store = _store(settings)
    try:
        registry = registry_for(store)
        if args.once:
            sys.stdout.write(exposition(registry).decode())
            return 0

        class Quiet(WSGIRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                """A line per scrape is noise: a failing scrape answers 500 and logs its traceback."""

        with make_server(args.host, args.port, make_wsgi_app(registry), handler_class=Quiet) as server:
            print(f"metrics on http://{args.host}:{server.server_port}/metrics", flush=True)
            server.serve_forever()
    finally:
        store.close()
    return 0


# How many of the longest waiting held invoices `status` names (the rest are counted).
STATUS_OLDEST_HELD = 5


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    store = _store(settings)
    try:
        summary = store.reporting.status_summary()
        queue = store.review.review_queue_summary()
        oldest_held = store.review.review_targets(REVIEW_STATUSES, limit=STATUS_OLDEST_HELD)
    finally:
        store.close()
    if args.json:
        review_queue = [
            {
                "org_id": q.org_id,
                "reason": q.reason,
                "invoices": q.invoices,
                "oldest_seconds": q.oldest.total_seconds(),
            }
            for q in queue
        ]
        print(dumps(asdict(summary) | {"review_queue": review_queue}))
        return 0
    print("invoices by status:  " + (", ".join(f"{k} {v}" for k, v in summary.by_status.items()) or "none"))
    if summary.by_stage:
        print("unfinished by stage: " + ", ".join(f"{k} {v}" for k, v in summary.by_stage.items()))
    print(f"locks held:          {summary.locks_held}", end="")
    if summary.oldest_lock_started_at:
        print(
            f" (oldest since {summary.oldest_lock_started_at:%Y-%m-%d %H:%M:%S}, stalest heartbeat {summary.stalest_heartbeat_age})",
            end="",
        )
    print()
    print(
        f"duplicates:          {summary.duplicates} in {summary.duplicate_groups} group(s); {summary.originals} originals; "
        f"{summary.suspected_duplicates} suspected (held for review)"
    )
    held = summary.by_status.get("needs_review", 0)
    print(f"review queue:        {held} invoice(s) held for a person", end="")
    if queue:
        # A summary, whatever the queue's size: counts per reason code, then the oldest few.
        print(f" (longest waiting {_days(max(q.oldest for q in queue))})")
        by_reason: dict[str, tuple[int, timedelta]] = {}
        for q in queue:
            count, oldest = by_reason.get(q.reason, (0, timedelta(0)))
            by_reason[q.reason] = (count + q.invoices, max(oldest, q.oldest))
        orgs = len({q.org_id for q in queue})
        print(f"  by reason ({orgs} org(s); an invoice held for two reasons counts under both):")
        for reason, (count, oldest) in sorted(by_reason.items(), key=lambda kv: -kv[1][0]):
            print(f"    {printable(reason):<28} {count:>7}   oldest {_days(oldest)}")
        print(f"  the {len(oldest_held)} longest waiting:")
        for t in oldest_held:
            amount = f"{t.payable_total} {printable(t.currency)}" if t.payable_total is not None else "-"
            codes = ", ".join(sorted({reason_code(r) for r in t.review_reasons}))
            print(
                f"    {t.invoice_id}  {printable(t.org_id):<14} waiting {_days(t.age):>6}  {amount:<16} {printable(codes)}"
            )
        print(
            "  next: the review page (`invoice-pipeline review-ui`, started by `make dev`), or "
            "`invoice-pipeline review list --reason CODE` (--org, --older-than, --offset)"
        )
    else:
        print()
    for item in summary.attention:
        print(
            f"  {printable(item.status):<16} {item.invoice_id}  {printable(item.filename):<30} "
            f"{printable(item.code)}: {printable(item.reason)}"
        )
    return 0


def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    store = _store(settings)
    try:
        overview = store.reporting.invoice_overview(args.invoice_id)
        if overview is None:
            print(f"no invoice {printable(args.invoice_id)}", file=sys.stderr)
            return 1
        jobs = store.claims.job_history(args.invoice_id)
        decision = store.dedupe.load_duplicate_decision(args.invoice_id)
        posting = store.documents.load_ledger_posting(args.invoice_id)
        reviews = store.review.review_history(args.invoice_id)
    finally:
        store.close()
    record: dict[str, Any] = {
        "invoice": asdict(overview),
        "attempts": [asdict(j) for j in jobs],
        "duplicate": asdict(decision) if decision else None,
        "ledger_posting": asdict(posting) if posting else None,
        "review_actions": [asdict(r) for r in reviews],
    }
    if args.json:
        print(dumps(record))
        return 0
    o = overview
    # Every value below may come from the document or its sender: printed through `printable`.
    print(f"invoice {o.invoice_id}  org {printable(o.org_id)}  file {printable(o.filename)}")
    print(f"status {o.status}  stage {printable(o.processing_stage)}  attempts {o.attempts}")
    if o.quarantine_reason or o.last_error:
        print(f"problem: {printable(o.quarantine_code)} {printable(o.quarantine_reason or o.last_error)}")
    for reason in o.review_reasons or []:
        print(f"held for review: {printable(reason)}")
    for name, value in (o.fields or {}).items():
        if name != "sources":
            print(f"  {printable(name):<15} {printable(value)}")
    if decision:
        print(
            f"duplicate status: {decision.status}"
            + (f" of {decision.original_id} ({printable(decision.how)})" if decision.original_id else "")
        )
        for reason in decision.reasons:
            print(f"  - {printable(reason)}")
    if posting:
        print(
            f"posted {posting.amount} {printable(posting.currency)} at {posting.posted_at:%Y-%m-%d %H:%M:%S}"
            f" to vendor #{posting.vendor_id} {printable(posting.vendor_name)}, invoice "
            f"{printable(posting.invoice_number)}, issued {posting.issue_date}, due {posting.due_date}, "
            f"IBAN {printable(posting.iban) if posting.iban else 'none recorded'}"
        )
    print("attempts:")
    for j in jobs:
        print(
            f"  #{j.attempt} {j.status:<9} {printable(j.owner):<50} {j.started_at:%H:%M:%S} → "
            f"{j.finished_at and f'{j.finished_at:%H:%M:%S}'} {printable(j.error)}"
        )
        run_id = run_id_of(j.owner)
        if run_id:
            print(f"      Dagster run {run_id}: {args.ui_url.rstrip('/')}/runs/{run_id}")
    if reviews:
        print("review actions:")
    for r in reviews:
        print(
            f"  {r.at:%Y-%m-%d %H:%M:%S} {r.action:<17} by {printable(r.actor)}: "
            f"{r.from_status} -> {r.to_status}; {printable(r.detail)}"
            + (f" ({printable(r.note)})" if r.note else "")
        )
        for reason in r.review_reasons:
            print(f"      was held for: {printable(reason)}")
    return 0


# -- review and redrive --------------------------------------------------------------------------

# The CLI's action names, and the actions they are.
REVIEW_COMMANDS: dict[str, Action] = {
    "approve": "approve",
    "reject": "reject",
    "not-duplicate": "not_duplicate",
    "confirm-duplicate": "confirm_duplicate",
}


def age_arg(text: str) -> timedelta:
    try:
        return parse_age(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def reason_code_arg(text: str) -> str:
    try:
        return check_reason_code(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def amount_or_none(text: str) -> Decimal | None:
    if text.strip().lower() == "none":
        return None
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(
            f"must be an amount such as 5000.00, or none, got {text!r}"
        ) from None
    if not value.is_finite() or value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative amount, or none, got {text!r}")
    return value


def currency_or_none(text: str) -> str | None:
    if text.strip().lower() == "none":
        return None
    if not is_known_currency(text):
        raise argparse.ArgumentTypeError(f"must be an ISO 4217 code such as EUR, or none, got {text!r}")
    return text


def yes_or_no(text: str) -> bool:
    answer = text.strip().lower()
    if answer not in ("yes", "no"):
        raise argparse.ArgumentTypeError(f"must be yes or no, got {text!r}")
    return answer == "yes"


def days_or_none(text: str) -> int | None:
    return None if text.strip().lower() == "none" else positive_int(text)


def target_filter(args: argparse.Namespace, action: Action) -> TargetFilter:
    """Ids and filters from the arguments; refused (exit 2) when they select nothing on purpose."""
    flt = TargetFilter(
        invoice_ids=tuple(uuid.UUID(i) for i in args.invoice_ids),
        org_id=args.org,
        status=getattr(args, "status", None),
        reason=args.reason_code,
        older_than=args.older_than,
    )
    if flt.status is not None:
        statuses_for(action, flt.status)  # ValueError: exit 2 before any SQL
    if not flt.invoice_ids and not flt.has_filter and not args.all:
        raise ConfigError(
            "give invoice ids, or a filter (--org, --reason, --older-than"
            + (", --status" if action == "requeue" else "")
            + "), or --all"
        )
    return flt


def print_outcomes(outcomes: Sequence[ActionOutcome]) -> int:
    for o in outcomes:
        mark = "done   " if o.done else "refused"
        move = f"{o.from_status} -> {o.to_status}" if o.done else (o.from_status or "")
        print(f"{mark} {o.invoice_id}  {move:<28} {printable(o.message)}")
    done = sum(1 for o in outcomes if o.done)
    refused = len(outcomes) - done
    print(f"{done} done, {refused} refused" if outcomes else "no invoice matches")
    return EXIT_INVOICES_FAILED if refused else EXIT_OK


def cmd_review_action(args: argparse.Namespace, settings: Settings) -> int:
    action: Action = "requeue" if args.command == "requeue" else REVIEW_COMMANDS[args.action]
    flt = target_filter(args, action)
    note = args.reason if action == "reject" else args.note
    store = _store(settings)
    try:
        outcomes = act_on(store, action, flt, Actor.os_user(), note)
    finally:
        store.close()
    code = print_outcomes(outcomes)
    if any(o.done and o.to_status == "pending" for o in outcomes):
        print("due now: the sensor under `invoice-pipeline dev` runs them, or run `invoice-pipeline process`")
    return code


def cmd_review_correct(args: argparse.Namespace, settings: Settings) -> int:
    from invoice_pipeline.domain.corrections import parse_changes
    from invoice_pipeline.engine.corrections import correct_invoice

    parse_changes(args.assignments)  # a CorrectionError (ValueError) exits 2 before any SQL
    store = _store(settings)
    try:
        outcome = correct_invoice(store, args.invoice_id, args.assignments, Actor.os_user(), args.note)
    finally:
        store.close()
    code = print_outcomes([outcome])
    if outcome.done:
        print("still held: approve it (`invoice-pipeline review approve ID`) to post the corrected invoice")
    return code


def cmd_review_list(args: argparse.Namespace, settings: Settings) -> int:
    statuses = (args.status,) if args.status else REVIEW_STATUSES
    store = _store(settings)
    try:
        # One more than a page: whether another page follows.
        targets = store.review.review_targets(
            statuses,
            org_id=args.org,
            reason=args.reason_code,
            older_than=args.older_than,
            limit=args.offset + args.limit + 1,
        )[args.offset :]
    finally:
        store.close()
    more = len(targets) > args.limit
    targets = targets[: args.limit]
    if args.json:
        print(dumps([asdict(t) for t in targets]))
        return EXIT_OK
    for t in targets:
        amount = f"{t.payable_total} {printable(t.currency)}" if t.payable_total is not None else "-"
        print(
            f"{t.invoice_id}  {printable(t.org_id):<14} {t.status:<15} waiting {_days(t.age):>6}  "
            f"{printable(t.seller_name):<28} {printable(t.invoice_number):<14} {amount}"
        )
        for reason in t.review_reasons or [f"{t.quarantine_code or 'error'}: {t.last_error or ''}"]:
            print(f"    - {printable(reason)}")
    shown = f"{args.offset + 1}-{args.offset + len(targets)}" if targets else "none"
    print(f"{len(targets)} invoice(s) shown ({shown}, the longest waiting first)")
    if more:
        print(
            f"more follow: --offset {args.offset + args.limit}; or open the review page (`invoice-pipeline review-ui`)"
        )
    return EXIT_OK


def _days(age: timedelta) -> str:
    return f"{age.total_seconds() / 86400:.1f}d"


def cmd_review_policy(args: argparse.Namespace, settings: Settings) -> int:
    from invoice_pipeline.engine.ingest import org_problem

    problem = org_problem(args.org)
    if problem is not None:
        raise ConfigError(f"--org: {problem}")
    changes = {
        k: getattr(args, k)
        for k in (
            "auto_approve_limit",
            "home_currency",
            "stale_after_days",
            "default_currency",
            "register_einvoice_vendors",
        )
        if k in args
    }
    store = _store(settings)
    try:
        policy = store.review.review_policies([args.org])[args.org]
        if changes:
            policy = replace(policy, **changes)
            store.review.set_review_policy(args.org, policy, Actor.os_user().name)
    finally:
        store.close()
    print(
        f"org {printable(args.org)}: auto-approve limit {policy.auto_approve_limit or 'none'}, "
        f"home currency {policy.home_currency or 'any'}, stale after {policy.stale_after_days or 'never'}"
        + (" days" if policy.stale_after_days else "")
        + f", default currency {policy.default_currency or 'none (held as currency_unknown)'}"
        + ", a vendor's first e-invoice "
        + ("registers it" if policy.register_einvoice_vendors else "is held as vendor_unconfirmed")
    )
    return EXIT_OK


def add_target_arguments(parser: argparse.ArgumentParser, *, with_status: bool, reason_filter: bool) -> None:
    """Ids and the bulk filters. `--reason` filters by reason code, except on reject, where it
    is the rejection's reason and the filter is only `--reason-code`."""
    parser.add_argument("invoice_ids", nargs="*", type=invoice_id_arg, metavar="INVOICE_ID")
    parser.add_argument("--org", help="only this org's invoices")
    if with_status:
        parser.add_argument("--status", choices=REQUEUE_STATUSES, help="only invoices in this status")
    parser.add_argument(
        *(("--reason", "--reason-code") if reason_filter else ("--reason-code",)),
        dest="reason_code",
        type=reason_code_arg,
        help="only invoices held for this reason code (or quarantined with this code)",
    )
    parser.add_argument("--older-than", type=age_arg, help="only invoices waiting longer: 7d, 12h, 30m")
    parser.add_argument("--all", action="store_true", help="every invoice the action applies to")


def add_review_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    review = sub.add_parser("review", help="the review queue: list, approve, reject, duplicates, policy")
    actions = review.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="invoices waiting for a person, the longest waiting first")
    listing.add_argument("--org")
    listing.add_argument(
        "--status", choices=(*REVIEW_STATUSES, *REQUEUE_STATUSES), help="default: needs_review"
    )
    listing.add_argument("--reason", "--reason-code", dest="reason_code", type=reason_code_arg)
    listing.add_argument("--older-than", type=age_arg)
    listing.add_argument("--limit", type=positive_int, default=50, help="invoices per page (default 50)")
    listing.add_argument("--offset", type=int, default=0, help="skip this many (the next page)")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=cmd_review_list)
    helps = {
        "approve": "approve held invoices: the pipeline posts them",
        "reject": "reject held invoices, with a reason: never posted",
        "not-duplicate": "release suspected duplicates as originals",
        "confirm-duplicate": "confirm suspected duplicates: rejected, never posted",
    }
    for name, help_text in helps.items():
        p = actions.add_parser(name, help=help_text)
        add_target_arguments(p, with_status=False, reason_filter=name != "reject")
        if name == "reject":
            p.add_argument("--reason", required=True, help="why (recorded in the audit trail)")
        else:
            p.add_argument("--note", help="free text for the audit trail")
        p.set_defaults(func=cmd_review_action)
    correct = actions.add_parser(
        "correct", help="correct fields of a held invoice: validated and checked for duplicates again"
    )
    correct.add_argument("invoice_id", type=invoice_id_arg, metavar="INVOICE_ID")
    correct.add_argument(
        "--set",
        dest="assignments",
        action="append",
        required=True,
        metavar="FIELD=VALUE",
        help="e.g. --set payable_total=29.99 --set issue_date=2015-07-02 (repeatable)",
    )
    correct.add_argument("--note", help="free text for the audit trail")
    correct.set_defaults(func=cmd_review_correct)
    policy = actions.add_parser("policy", help="show or set an org's review policy")
    policy.add_argument("--org", required=True)
    policy.add_argument(
        "--auto-approve-limit",
        type=amount_or_none,
        default=argparse.SUPPRESS,
        help="hold invoices above this amount (none: no limit)",
    )
    policy.add_argument(
        "--home-currency",
        type=currency_or_none,
        default=argparse.SUPPRESS,
        help="hold invoices in any other currency (none: any)",
    )
    policy.add_argument(
        "--stale-after-days",
        type=days_or_none,
        default=argparse.SUPPRESS,
        help="hold invoices issued longer ago (none: never)",
    )
    policy.add_argument(
        "--default-currency",
        type=currency_or_none,
        default=argparse.SUPPRESS,
        help="the currency of documents that name none (none: hold them as currency_unknown)",
    )
    policy.add_argument(
        "--register-einvoice-vendors",
        type=yes_or_no,
        default=argparse.SUPPRESS,
        help="yes (default): a vendor's first structured e-invoice registers the vendor; no: hold it",
    )
    policy.set_defaults(func=cmd_review_policy)
    add_layout_commands(actions)

    requeue = sub.add_parser(
        "requeue", help="redrive dead letters (needs_attention), failed or fixed quarantined invoices"
    )
    add_target_arguments(requeue, with_status=True, reason_filter=True)
    requeue.add_argument("--note", help="free text for the audit trail")
    requeue.set_defaults(func=cmd_review_action)


# -- running the product -------------------------------------------------------------------------


# How long `dev` lets dagster dev and its children shut down after SIGTERM/SIGINT before it
# SIGKILLs whatever is left of the group (dagster dev itself would wait 60 s per child).
DEV_STOP_GRACE_SECONDS = 20.0


class _StopRequested(Exception):
    pass


def cmd_dev(args: argparse.Namespace, settings: Settings) -> int:
    """Postgres, migrations, dagster.yaml, then `dagster dev` in its own process group."""
    import invoice_pipeline
    from invoice_pipeline.child_python import child_environment, python_command
    from invoice_pipeline.orchestration.dagster_home import prepare_dagster_home

    url = prepare_database(settings)
    home = prepare_dagster_home(settings, url)
    settings.inbox.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parents[1]
    workspace = root / "workspace.yaml"
    command = python_command("-m", "dagster", "dev", "-h", args.host, "-p", str(args.port))
    if workspace.exists():
        command += ["-w", str(workspace)]
    else:
        # Installed from a wheel: without -d the code server would add the current folder to its
        # sys.path, and import whatever `invoice_pipeline` lies there. Load the package this
        # process runs instead.
        package_parent = Path(invoice_pipeline.__file__).resolve().parents[1]
        command += ["-m", "invoice_pipeline.orchestration.definitions", "-d", str(package_parent)]
    print(
        f"Dagster UI on http://{args.host}:{args.port}  (DAGSTER_HOME={home}; inbox {settings.inbox})",
        flush=True,
    )
    # The review page beside it (review_ui/), on loopback, in its own process group. Started with
    # SIGINT handled here, so that exec gives it (and the workers it starts before its server
    # installs handlers: the login pool, the page sandbox) the default action, not an ignored
    # SIGINT a script's `invoice-pipeline dev &` handed this process (see run_process_group).
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        review_ui = subprocess.Popen(
            python_command("-m", "invoice_pipeline.cli", "review-ui", "--port", str(args.review_port)),
            env=child_environment(),
            start_new_session=True,
        )
    finally:
        signal.signal(signal.SIGINT, inherited)
    print(f"Review page on http://127.0.0.1:{args.review_port}  (invoices held for a person)", flush=True)
    try:
        return run_process_group(
            command,
            cwd=root if workspace.exists() else None,
            env=child_environment(),
            grace_seconds=DEV_STOP_GRACE_SECONDS,
        )
    finally:
        _stop_group(review_ui, signal.SIGTERM, 5.0)


def run_process_group(
    command: list[str], *, cwd: Path | None, env: dict[str, str], grace_seconds: float
) -> int:
    """Run `command` as the leader of a new session until it exits or this process gets SIGINT
    or SIGTERM; then stop its whole process group and return the leader's exit status.

    Its own session: dagster dev ignores signals sent only to itself, and its children
    (webserver, daemon, code servers, run workers) would outlive it. Stopping sends the signal
    received (SIGTERM if the leader exited by itself) to the group, and SIGKILL to whatever is
    left of it after `grace_seconds`; a second signal while stopping SIGKILLs at once.

    The handlers are installed *before* the child starts, for two reasons: a signal that
    arrives while it is being started is not lost, and exec resets a handled signal to its
    default action but keeps an ignored one ignored. A script's `invoice-pipeline dev &` starts
    this process with SIGINT ignored; dagster dev maps SIGTERM onto whatever SIGINT does, so a
    child that inherited SIG_IGN would ignore both (issue 26).
    """
    proc: subprocess.Popen[bytes] | None = None
    stopping = False
    received: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        received.append(signum)
        if proc is None:
            return  # still starting: seen right after Popen returns
        if stopping:
            _signal_group(proc.pid, signal.SIGKILL)  # asked twice: no more patience
            return
        stopping = True
        raise _StopRequested

    stop_signals = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, on_signal) for sig in stop_signals}
    try:
        proc = subprocess.Popen(command, cwd=cwd, env=env, start_new_session=True)
        try:
            try:
                if not received:
                    proc.wait()
            finally:
                stopping = True
        except _StopRequested:
            pass
        status = _stop_group(proc, received[0] if received else signal.SIGTERM, grace_seconds)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - status if status < 0 else status


def _signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to a process group; False when nothing is left in it."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def _stop_group(proc: subprocess.Popen[bytes], sig: int, grace_seconds: float) -> int:
    """`sig` to the leader's whole group, SIGKILL to what is left after the grace period."""
    deadline = time.monotonic() + grace_seconds
    _signal_group(proc.pid, sig)
    try:
        proc.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        pass
    # The leader may go first: its children are no children of ours, so no wait() tells when
    # they are gone; the group's emptiness does.
    while time.monotonic() < deadline and _signal_group(proc.pid, 0):
        time.sleep(0.1)
    _signal_group(proc.pid, signal.SIGKILL)
    return proc.wait()


def cmd_samples(args: argparse.Namespace, settings: Settings) -> int:
    from invoice_pipeline.samples import generate_samples

    sample_set = generate_samples(Path(args.out), count=args.count, seed=args.seed)
    print(f"wrote {len(sample_set.files)} files to {args.out}")
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from invoice_pipeline.engine.ingest import ingest_paths
    from invoice_pipeline.samples import generate_samples

    started = time.monotonic()
    org = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    out = settings.home / "demo-samples" / org
    # The demo includes two scans (OCR): a scanned copy of an XML invoice and a photo (PNG).
    samples = generate_samples(out, count=args.count, seed=args.seed, scans=True)
    print(f"generated {len(samples.files)} sample files in {out}")
    store = _store(settings)
    try:
        # A team starts from its ERP's vendor master: page-read invoices of these sellers are
        # confirmed by the VAT id they print; any other seller's are held (vendor_unconfirmed).
        from invoice_pipeline.engine.vendors import read_vendor_csv

        master = out / "vendor-master.csv"
        master.write_text(samples.vendor_master_csv())
        imported = store.vendors.import_vendors(
            org, read_vendor_csv(master.read_text()), Actor.os_user().name
        )
        print(f"imported {imported.created} vendors from {master} (invoice-pipeline vendors import)")
        files = [f.path for f in samples.files]
        for i in range(len(files)):
            ingest_paths(store, [files[i]], org)
            progress(i + 1, len(files), "ingesting ")
        process_due(settings, batch_size=args.batch_size, label="processing")
        outcomes = store.reporting.outcomes_of_org(org)
        held = store.review.review_targets(REVIEW_STATUSES, org_id=org)
    finally:
        store.close()
    print_demo_summary(outcomes, time.monotonic() - started, review_queue_counts(held))
    return 0


def review_queue_counts(held: Sequence[ReviewTarget]) -> dict[str, int]:
    """Held invoices per review reason code (an invoice held for two reasons counts for both)."""
    counts: dict[str, int] = {}
    for target in held:
        for code in dict.fromkeys(reason_code(r) for r in target.review_reasons):
            counts[code] = counts.get(code, 0) + 1
    return dict(sorted(counts.items()))


def print_demo_summary(
    outcomes: Sequence[Any], seconds: float, review_counts: dict[str, int] | None = None
) -> None:
    processed = [o for o in outcomes if o.status == "processed"]
    originals = [o for o in processed if o.duplicate_status == "original"]
    duplicates = [o for o in processed if o.duplicate_status == "duplicate"]
    approved = [o for o in processed if o.approval == "approved"]
    review = [o for o in outcomes if o.status == "needs_review"]
    quarantined = [o for o in outcomes if o.status == "quarantined"]
    attention = [o for o in outcomes if o.status == "needs_attention"]
    other = [o for o in outcomes if o.status not in TERMINAL_STATUSES]
    print()
    print(f"{'processed':<16}{len(processed):>5}")
    print(f"{'  originals':<16}{len(originals):>5}")
    print(f"{'  duplicates':<16}{len(duplicates):>5}")
    print(
        f"{'  approved':<16}{len(approved):>5}   posted to the ledger: {sum(1 for o in outcomes if o.posted)}"
    )
    print(
        f"{'needs review':<16}{len(review):>5}   (held for a person, not posted; `invoice-pipeline review list`)"
    )
    for code, n in (review_counts or {}).items():
        print(f"{'  ' + code:<24}{n:>5}")
    print(f"{'needs attention':<16}{len(attention):>5}")
    print(f"{'quarantined':<16}{len(quarantined):>5}")
    if other:
        print(f"{'not finished':<16}{len(other):>5}   (retry scheduled; see `invoice-pipeline status`)")
    print(f"{'time taken':<16}{seconds:>5.1f}s")
    if duplicates:
        print("\nduplicates (how matched):")
        for o in duplicates:
            print(f"  {printable(o.filename):<40} = {printable(o.original_filename):<40} {o.match_how}")
    if review:
        print("\nneeds review (why):")
        for o in review:
            print(f"  {printable(o.filename):<40} {printable(o.reason[:110])}")
    if quarantined or attention:
        print("\nquarantined / needs attention (reason):")
        for o in quarantined + attention:
            print(f"  {printable(o.filename):<40} {printable(o.code)}: {printable(o.reason[:110])}")


# -- wiring --------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="invoice-pipeline", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    db = sub.add_parser("db", help="manage the embedded PostgreSQL")
    db.add_argument("action", choices=["start", "stop", "status", "url"])
    db.set_defaults(func=cmd_db)
    sub.add_parser("migrate", help="apply sql/*.sql").set_defaults(func=cmd_migrate)
    add_vendor_commands(sub)
    ingest = sub.add_parser("ingest", help="store files (or folders) as invoices")
    ingest.add_argument("paths", nargs="+")
    ingest.add_argument("--org", default="default")
    ingest.set_defaults(func=cmd_ingest)
    process = sub.add_parser("process", help="process every due invoice through the Dagster jobs, headlessly")
    process.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        help="invoices per run (default: INVOICE_PIPELINE_BATCH_SIZE)",
    )
    process.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="processes working a backlog at once (default: one per core, at most 4)",
    )
    process.set_defaults(func=cmd_process)
    sub.add_parser("sweep", help="sweep stale locks, reconcile dead runs, schedule retries").set_defaults(
        func=cmd_sweep
    )
    metrics = sub.add_parser(
        "metrics", help="serve Prometheus metrics read from the database (or print them --once)"
    )
    metrics.add_argument("--host", default="127.0.0.1")
    metrics.add_argument("--port", type=int, default=9464)
    metrics.add_argument("--once", action="store_true", help="print one scrape to stdout and exit")
    metrics.set_defaults(func=cmd_metrics)
    status = sub.add_parser("status", help="counts, locks, duplicates, what needs attention")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)
    show = sub.add_parser("show", help="one invoice: fields, stage, attempts, duplicate group")
    show.add_argument("invoice_id", type=invoice_id_arg)
    show.add_argument("--json", action="store_true")
    show.add_argument(
        "--ui-url",
        default="http://127.0.0.1:3000",
        help="the Dagster UI the run links point at (make dev's default)",
    )
    show.set_defaults(func=cmd_show)
    dev = sub.add_parser("dev", help="run the Dagster UI, daemon, sensor and schedule")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--port", type=port_number, default=3000)
    dev.add_argument("--review-port", type=port_number, default=3100, help="the review page's port")
    dev.set_defaults(func=cmd_dev)
    samples = sub.add_parser("samples", help="write generated sample invoices to a folder")
    samples.add_argument("out")
    samples.add_argument("--count", type=positive_int, default=40)
    samples.add_argument("--seed", type=int, default=0)
    samples.set_defaults(func=cmd_samples)
    demo = sub.add_parser("demo", help="generate samples, ingest, process through Dagster, summarise")
    demo.add_argument("--count", type=positive_int, default=30)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        help="invoices per run (default: INVOICE_PIPELINE_BATCH_SIZE)",
    )
    demo.set_defaults(func=cmd_demo)
    add_review_commands(sub)
    from invoice_pipeline.review_ui.cli import add_commands as add_review_ui_commands

    add_review_ui_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.from_env()
        return int(args.func(args, settings))
    except (ConfigError, MigrationError, ValueError, FileNotFoundError) as exc:
        print(f"invoice-pipeline: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except (psycopg.OperationalError, PoolTimeout) as exc:
        # The server is down or unreachable, the database does not exist, or login failed:
        # not a bug, so one line and no traceback.
        print(f"invoice-pipeline: cannot reach the database: {one_line(exc)}", file=sys.stderr)
        return EXIT_DATABASE


def console() -> None:
    """The `invoice-pipeline` command: `main`, then an exit that skips the interpreter's
    teardown. Unloading Dagster, SQLAlchemy and pandas' module graph took 0.5-0.8 s after
    every command had finished its work (a tenth of `process` on 500 invoices). What teardown
    would still do that matters is done here: the document sandboxes are closed, logs and the
    standard streams flushed."""
    code = main()
    from invoice_pipeline.documents.sandbox import close_shared_sandboxes

    close_shared_sandboxes()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    console()
