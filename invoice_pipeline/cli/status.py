"""`invoice-pipeline status`, `show` and `metrics`: what the database says about the invoices."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import asdict
from datetime import timedelta
from typing import Any

from invoice_pipeline.cli.arguments import invoice_id_arg
from invoice_pipeline.cli.output import in_days
from invoice_pipeline.cli.store import COMMAND_POOL
from invoice_pipeline.config import Settings
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.review import einvoice_warnings, reason_code
from invoice_pipeline.engine.records import JobRecord
from invoice_pipeline.engine.review import REVIEW_OWNER_PREFIX, REVIEW_STATUSES
from invoice_pipeline.engine.store import dumps, open_store
from invoice_pipeline.orchestration.run_requests import run_id_of
from invoice_pipeline.terminal import printable


def cmd_metrics(args: argparse.Namespace, settings: Settings) -> int:
    """Prometheus metrics read from the database: printed once (--once), or served on
    http://HOST:PORT/metrics until stopped (loopback unless told otherwise)."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client import make_wsgi_app

    from invoice_pipeline.engine.metrics import exposition, registry_for

    store = open_store(settings, COMMAND_POOL)
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
# How many orgs `status` names, the one ingested into last first (`--json` lists every one).
STATUS_ORGS = 8


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    store = open_store(settings, COMMAND_POOL)
    try:
        summary = store.reporting.status_summary()
        queue = store.review.review_queue_summary()
        oldest_held = store.review.review_targets(REVIEW_STATUSES, limit=STATUS_OLDEST_HELD)
        orgs = store.reporting.orgs()
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
        print(dumps(asdict(summary) | {"review_queue": review_queue, "orgs": [asdict(o) for o in orgs]}))
        return 0
    print("invoices by status:  " + (", ".join(f"{k} {v}" for k, v in summary.by_status.items()) or "none"))
    if orgs:
        named = ", ".join(f"{printable(o.org_id)} {o.invoices} ({o.held} held)" for o in orgs[:STATUS_ORGS])
        more = f", and {len(orgs) - STATUS_ORGS} more (--json lists them)" if len(orgs) > STATUS_ORGS else ""
        print(f"orgs (--org):        {named}{more}")
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
        print(f" (longest waiting {in_days(max(q.oldest for q in queue))})")
        by_reason: dict[str, tuple[int, timedelta]] = {}
        for q in queue:
            count, oldest = by_reason.get(q.reason, (0, timedelta(0)))
            by_reason[q.reason] = (count + q.invoices, max(oldest, q.oldest))
        held_orgs = len({q.org_id for q in queue})
        print(f"  by reason ({held_orgs} org(s); an invoice held for two reasons counts under both):")
        for reason, (count, oldest) in sorted(by_reason.items(), key=lambda kv: -kv[1][0]):
            print(f"    {printable(reason):<28} {count:>7}   oldest {in_days(oldest)}")
        print(f"  the {len(oldest_held)} longest waiting:")
        for t in oldest_held:
            amount = f"{t.payable_total} {printable(t.currency)}" if t.payable_total is not None else "-"
            codes = ", ".join(sorted({reason_code(r) for r in t.review_reasons}))
            print(
                f"    {t.invoice_id}  {printable(t.org_id):<14} waiting {in_days(t.age):>6}  {amount:<16} {printable(codes)}"
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
    store = open_store(settings, COMMAND_POOL)
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
    for line in field_lines(o.fields or {}):
        print(line)
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
            + (f", {printable(posting.payment_means)}" if posting.payment_means else "")
        )
        print(
            f"  paid as the registry's {printable(posting.registered_name)} "
            f"({printable(posting.registered_vat_id) if posting.registered_vat_id else 'no VAT id'}); "
            f"the document printed {printable(posting.printed_seller_name)} "
            f"({printable(posting.printed_seller_vat_id) if posting.printed_seller_vat_id else 'no VAT id'})"
        )
    print("attempts (each time the invoice's lock was taken, oldest first):")
    for j in jobs:
        ended = f"{j.finished_at:%H:%M:%S}" if j.finished_at else "(holding)"
        print(f"  {j.started_at:%Y-%m-%d %H:%M:%S} → {ended}  {lock_use(j)}")
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


def field_lines(fields: dict[str, Any]) -> list[str]:
    """The stored fields as `show` prints them: each value with where it was read (or why it was
    not), then the page's arithmetic on the payable total. Fields neither read nor explained
    (a structured format's extras on a page-read invoice) are left out."""
    sources: dict[str, dict[str, Any]] = fields.get("sources") or {}
    lines = ["fields (value; where it was read, or why not):"]
    # The record's own order (jsonb keeps its keys in another), then anything it does not know.
    order = [f.name for f in dataclasses.fields(InvoiceFields)]
    for name in sorted(fields, key=lambda n: order.index(n) if n in order else len(order)):
        value = fields[name]
        source = sources.get(name)
        if name in ("sources", "amount_check", *EINVOICE_KEYS) or (value is None and source is None):
            continue
        where: list[str] = []
        if source is not None:
            text = str(source.get("source") or "")
            where += [text] if text else []
            if source.get("page") is not None and f"page {source['page']}" not in text:
                where.append(f"page {source['page']}")
            if source.get("confidence", 1.0) != 1.0:
                where.append(f"confidence {float(source['confidence']):.2f}")
        reason = f"; {source['reason']}" if source is not None and source.get("reason") else ""
        shown = "-" if value is None else str(value)
        lines.append(printable(f"  {name:<20} {shown:<28} {', '.join(where)}{reason}").rstrip())
    check = fields.get("amount_check")
    if check:
        verdict = "confirmed" if check.get("confirmed") else "NOT confirmed (held for a person)"
        lines.append(f"amount check: {verdict}: {printable(check.get('rule'))}")
        candidates = ", ".join(
            f"{printable(c.get('role'))} {printable(c.get('amount'))}" for c in check.get("candidates") or ()
        )
        if candidates:
            lines.append(f"  amounts on the page: {candidates}")
    return lines + einvoice_lines(fields)


# The fields' entries that `einvoice_lines` prints (domain/einvoice.py), not as fields.
EINVOICE_KEYS = ("einvoice_check", "page_disagreements")


def einvoice_lines(fields: dict[str, Any]) -> list[str]:
    """The e-invoice's own rules and its page (issue 55): the rule set that ran, each failed rule
    (fatal ones hold the invoice; warnings are only shown here and on the review page), and each
    field its page prints differently from its XML."""
    read = InvoiceFields.from_json({key: fields[key] for key in EINVOICE_KEYS if key in fields})
    lines: list[str] = []
    check = read.einvoice_check
    if check is not None and check.rule_set:
        lines.append(
            printable(
                f"e-invoice rules: {check.rule_set} {check.version}, profile {check.profile}: "
                f"{len(check.fatal)} fatal, {len(check.warnings)} warning(s)"
            )
        )
        lines += [printable(f"  fatal {f.rule_id}: {f.text} at {f.location}") for f in check.fatal]
        lines += [printable(f"  warning {w}") for w in einvoice_warnings(read)]
    elif check is not None:
        lines.append(printable(f"e-invoice rules: not run ({check.profile}: {check.skipped})"))
    for d in read.page_disagreements:
        lines.append(
            printable(f"page disagrees: {d.field}: XML {d.xml_value!r}, page {d.page_value!r} ({d.where})")
        )
    return lines


def lock_use(job: JobRecord) -> str:
    """One taking of the invoice's lock: a processing attempt (numbered as the invoice counts its
    attempts) or a person's review action, which holds the same lock and may be refused."""
    owner = printable(job.owner or "unknown")
    if (job.owner or "").startswith(REVIEW_OWNER_PREFIX):
        if job.status == "running":
            return f"a person's action, in progress, by {owner}"
        if job.status == "failed" or (job.error and " refused: " in job.error):
            return f"a person's action by {owner}: {printable(job.error)}"
        return f"a person's action by {owner}: done (see review actions)"
    return f"processing attempt {job.attempt} {job.status} by {owner}" + (
        f": {printable(job.error)}" if job.error else ""
    )


def add_status_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
