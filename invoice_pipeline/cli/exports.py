"""`invoice-pipeline export target add|list|disable|enable`, `export status`, `export run [--once]`,
`export requeue`: delivering postings to the books (issue 56; docs/exports.md)."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from invoice_pipeline.cli.arguments import checked_org, positive_int
from invoice_pipeline.cli.exit_codes import EXIT_OK, EXIT_USAGE
from invoice_pipeline.cli.store import COMMAND_POOL
from invoice_pipeline.config import ConfigError, Settings
from invoice_pipeline.engine.store import InvoiceStore, open_store
from invoice_pipeline.terminal import printable

# `export run` (without --once) looks for due rows this often.
DEFAULT_POLL_SECONDS = 5.0


def _datev_settings(args: argparse.Namespace) -> dict[str, Any]:
    start = args.fiscal_year_start
    if (
        len(start) != 4
        or not start.isdigit()
        or not (1 <= int(start[:2]) <= 12)
        or not (1 <= int(start[2:]) <= 31)
    ):
        raise ConfigError(f"--fiscal-year-start is MMDD (0101 for the calendar year), got {start!r}")
    return {
        "dir": str(Path(args.dir).resolve()),
        "consultant": args.consultant,
        "client": args.client,
        "fiscal_year_start": start,
        "account_length": args.account_length,
        "expense_account": args.expense_account,
        "creditor_account": args.creditor_account,
    }


def _webhook_settings(args: argparse.Namespace) -> dict[str, Any]:
    from invoice_pipeline.engine.exports.webhook import check_url, read_secret

    secret_file = Path(args.secret_file).resolve()
    try:
        read_secret(secret_file)
    except OSError as exc:
        raise ConfigError(f"--secret-file: cannot read {secret_file}: {exc.strerror}") from None
    # Only the file's name is stored: the secret is read at each delivery, never kept in the database.
    return {"url": check_url(args.url), "secret_file": str(secret_file), "timeout_s": args.timeout}


def cmd_target_add(args: argparse.Namespace, settings: Settings) -> int:
    org = checked_org(args.org)
    target_settings = _datev_settings(args) if args.kind == "datev" else _webhook_settings(args)
    store = open_store(settings, COMMAND_POOL)
    try:
        target = store.exports.add_target(
            org,
            args.name or args.kind,
            args.kind,
            target_settings,
            batch_size=args.batch_size,
            max_attempts=args.max_attempts,
            retry_base=timedelta(seconds=args.retry_base_seconds),
        )
    finally:
        store.close()
    print(
        f"org {printable(org)}: target {printable(target.name)} ({target.kind}) added; "
        "every posting from now on is exported to it"
    )
    return EXIT_OK


def cmd_target_list(args: argparse.Namespace, settings: Settings) -> int:
    store = open_store(settings, COMMAND_POOL)
    try:
        targets = store.exports.targets(checked_org(args.org) if args.org else None)
    finally:
        store.close()
    if not targets:
        print("no export targets (invoice-pipeline export target add --org ORG datev --dir DIR)")
    for t in targets:
        where = t.settings.get("dir") or t.settings.get("url")
        state = "" if t.enabled else " (disabled)"
        print(printable(f"{t.org_id}  {t.name}  {t.kind}  {where}{state}"))
    return EXIT_OK


def cmd_target_enable(args: argparse.Namespace, settings: Settings) -> int:
    store = open_store(settings, COMMAND_POOL)
    try:
        found = store.exports.set_enabled(checked_org(args.org), args.name, args.target_command == "enable")
    finally:
        store.close()
    if not found:
        print(f"no target {printable(args.name)} in org {printable(args.org)}", file=sys.stderr)
        return EXIT_USAGE
    print(f"target {printable(args.name)} {args.target_command}d")
    return EXIT_OK


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    store = open_store(settings, COMMAND_POOL)
    try:
        rows = store.exports.status(checked_org(args.org) if args.org else None)
        dead = store.exports.dead_letters(checked_org(args.org) if args.org else None)
    finally:
        store.close()
    if not rows:
        print("no export targets (invoice-pipeline export target add --org ORG datev --dir DIR)")
        return EXIT_OK
    print(f"{'org':<20} {'target':<12} {'kind':<8} {'due':>6} {'in flight':>9} {'delivered':>9} {'dead':>6}")
    for r in rows:
        name = r.name + ("" if r.enabled else " (off)")
        print(
            printable(
                f"{r.org_id:<20} {name:<12} {r.kind:<8} {r.due:>6} {r.in_flight:>9} {r.delivered:>9} {r.dead:>6}"
            )
        )
    for d in dead[:20]:
        print(
            printable(
                f"dead: {d.export_id} invoice {d.invoice_id} to {d.target} after {d.attempts}: {d.answer}"
            )
        )
    if dead:
        print(
            f"{len(dead)} dead-lettered; redrive: invoice-pipeline export requeue [--org ORG] [--target NAME]"
        )
    return EXIT_OK


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    from invoice_pipeline.engine.exports.delivery import deliver
    from invoice_pipeline.engine.store import default_owner

    store = open_store(settings, COMMAND_POOL)
    owner = f"export:{default_owner()}"
    try:
        while True:
            report = deliver(store, owner)
            if report.batches or args.once:
                print(
                    f"{report.batches} batch(es): {report.delivered} delivered, {report.retried} to retry, "
                    f"{report.dead} dead-lettered, {report.lost} lost to the sweep; {report.swept} stale lease(s) swept"
                )
            if args.once:
                return EXIT_OK
            time.sleep(args.poll_seconds)
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        store.close()


def cmd_requeue(args: argparse.Namespace, settings: Settings) -> int:
    store = open_store(settings, COMMAND_POOL)
    try:
        count = store.exports.requeue(
            checked_org(args.org) if args.org else None, args.target, args.export_ids or None
        )
    finally:
        store.close()
    print(f"{count} dead-lettered export(s) due again")
    return EXIT_OK


@contextmanager
def demo_targets(store: InvoiceStore, settings: Settings, org: str) -> Iterator[Callable[[], None]]:
    """What `make demo` shows of exports: a DATEV folder in the home and a webhook to a loopback
    receiver started here (it books each posting once by key), both added to the demo's org
    before its invoices post. Yields what delivers the postings and says where they went."""
    from invoice_pipeline.samples.receiver import WebhookReceiver

    folder = settings.home / "exports" / org
    folder.mkdir(parents=True, exist_ok=True)
    secret_file = folder / "webhook.secret"
    secret = secrets.token_hex(32).encode()
    fd = os.open(secret_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(secret)
    with WebhookReceiver(secret) as receiver:
        store.exports.add_target(org, "datev", "datev", {"dir": str(folder / "datev")})
        store.exports.add_target(
            org, "erp", "webhook", {"url": receiver.url, "secret_file": str(secret_file)}
        )

        def deliver_and_tell() -> None:
            from invoice_pipeline.engine.exports.delivery import deliver
            from invoice_pipeline.engine.store import default_owner

            report = deliver(store, f"export:{default_owner()}")
            files = sorted((folder / "datev").glob("EXTF_Buchungsstapel_*.csv"))
            booked = receiver.booked()
            print(
                f"\nexports (invoice-pipeline export status): {report.delivered} delivered, {report.dead} dead-lettered"
            )
            print(f"  DATEV: {len(files)} Buchungsstapel file(s) in {folder / 'datev'}")
            print(
                f"  webhook: {len(receiver.requests)} signed request(s) to {receiver.url}, "
                f"{len(booked)} posting(s) booked, each once by its Idempotency-Key"
            )

        yield deliver_and_tell


def _add_target_commands(export: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    target = export.add_parser("target", help="an org's export targets: add, list, disable, enable")
    actions = target.add_subparsers(dest="target_command", required=True)
    add = actions.add_parser(
        "add", help="export every posting of the org from now on to a DATEV folder or a webhook"
    )
    add.add_argument("--org", required=True)
    add.add_argument("--name", help="the target's name in the org (default: its kind)")
    add.add_argument("--batch-size", type=positive_int, default=100, help="postings per batch (default 100)")
    add.add_argument("--max-attempts", type=positive_int, default=8, help="then dead-lettered (default 8)")
    add.add_argument(
        "--retry-base-seconds", type=float, default=30.0, help="backoff base, doubled per attempt"
    )
    kinds = add.add_subparsers(dest="kind", required=True)
    datev = kinds.add_parser("datev", help="DATEV EXTF Buchungsstapel files, one per batch")
    datev.add_argument("--dir", required=True, help="the folder the files are written to")
    datev.add_argument("--consultant", type=positive_int, default=1001, help="Beraternummer")
    datev.add_argument("--client", type=positive_int, default=1, help="Mandantennummer")
    datev.add_argument("--fiscal-year-start", default="0101", help="MMDD (default 0101)")
    datev.add_argument("--account-length", type=positive_int, default=4, help="Sachkontenlänge (default 4)")
    datev.add_argument("--expense-account", type=positive_int, default=3400, help="Gegenkonto (default 3400)")
    datev.add_argument(
        "--creditor-account",
        type=positive_int,
        default=70000,
        help="Konto: this plus the vendor's id (default 70000)",
    )
    webhook = kinds.add_parser("webhook", help="a JSON POST per posting, signed, with an Idempotency-Key")
    webhook.add_argument("--url", required=True, help="https://..., or http:// to a loopback host")
    webhook.add_argument("--secret-file", required=True, help="the HMAC-SHA256 secret, read at each delivery")
    webhook.add_argument("--timeout", type=float, default=10.0, help="seconds per request (default 10)")
    add.set_defaults(func=cmd_target_add)
    listing = actions.add_parser("list", help="the export targets")
    listing.add_argument("--org")
    listing.set_defaults(func=cmd_target_list)
    for action in ("disable", "enable"):
        switch = actions.add_parser(
            action, help=f"{action} a target (a disabled one gets no new export rows)"
        )
        switch.add_argument("--org", required=True)
        switch.add_argument("name")
        switch.set_defaults(func=cmd_target_enable)


def add_export_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    export = sub.add_parser("export", help="deliver postings to the books: targets, status, run, requeue")
    actions = export.add_subparsers(dest="export_command", required=True)
    _add_target_commands(actions)
    status = actions.add_parser("status", help="due, in flight, delivered and dead-lettered rows per target")
    status.add_argument("--org")
    status.set_defaults(func=cmd_status)
    run = actions.add_parser("run", help="deliver what is due (for ever, or --once)")
    run.add_argument("--once", action="store_true", help="deliver what is due now, then exit")
    run.add_argument("--poll-seconds", type=float, default=DEFAULT_POLL_SECONDS)
    run.set_defaults(func=cmd_run)
    requeue = actions.add_parser(
        "requeue", help="redrive dead-lettered exports (attempts from zero, same batch)"
    )
    requeue.add_argument("--org")
    requeue.add_argument("--target", help="only this target's")
    requeue.add_argument("export_ids", nargs="*", help="only these export rows")
    requeue.set_defaults(func=cmd_requeue)
