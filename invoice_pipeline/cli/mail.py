"""`invoice-pipeline mail fetch|mailbox|messages`: invoices taken from IMAP mailboxes, each message
exactly once (issue 56; docs/mail.md). Passwords are only ever read from a file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from invoice_pipeline.cli.arguments import checked_org, positive_int
from invoice_pipeline.cli.exit_codes import EXIT_OK
from invoice_pipeline.cli.store import COMMAND_POOL
from invoice_pipeline.config import ConfigError, Settings
from invoice_pipeline.engine.store import open_store
from invoice_pipeline.terminal import printable

if TYPE_CHECKING:  # the engine is imported when a command needs it (CLI start-up)
    from invoice_pipeline.engine.mail import MailPass

EXIT_MAILBOX_FAILED = 1


def describe_pass(org_id: str, done: MailPass) -> list[str]:
    lines = [
        f"{printable(done.mailbox)} (org {printable(org_id)}, UIDVALIDITY {done.uidvalidity}): "
        f"{done.on_server} message(s) on the server, {len(done.taken)} taken now, "
        f"{done.invoices_created} new invoice(s)"
    ]
    if done.earlier_uidvalidities:
        lines.append(
            f"  UIDVALIDITY changed (was {', '.join(map(str, done.earlier_uidvalidities))}): every message was "
            "read again; attachments already stored are the same invoices (content dedupe)"
        )
    for taken in done.taken:
        if taken.stored:
            for s in taken.stored:
                state = "new invoice" if s.created else "already an invoice"
                lines.append(
                    f"  UID {taken.key.uid}: {printable(s.filename or '(no name)')} -> {state} {s.invoice_id}"
                )
        else:
            lines.append(f"  UID {taken.key.uid}: skipped: {printable(taken.reason)}")
    if done.taken_elsewhere:
        lines.append(f"  {done.taken_elsewhere} message(s) taken by another pass running at the same time")
    if done.vanished:
        lines.append(f"  {done.vanished} message(s) moved or deleted on the server before they were read")
    return lines


def cmd_mail_fetch(args: argparse.Namespace, settings: Settings) -> int:
    from invoice_pipeline.engine.mail import (
        DEFAULT_MAX_MESSAGE_BYTES,
        MailboxError,
        MailboxUrl,
        fetch_mail,
        poll_mailboxes,
        read_password,
    )

    if (args.imap_url is None) != (args.password_file is None):
        raise ConfigError("--imap-url and --password-file go together (or neither: every configured mailbox)")
    org = checked_org(args.org) if args.org else None
    if args.imap_url is not None:
        if org is None:
            raise ConfigError("--imap-url needs --org: the org the mailbox's invoices belong to")
        url = MailboxUrl.parse(args.imap_url)
        password = read_password(Path(args.password_file))
    store = open_store(settings, COMMAND_POOL)
    try:
        if args.imap_url is None:
            polls = poll_mailboxes(store, org)
            if not polls:
                print(
                    "no mailbox configured (invoice-pipeline mail mailbox add --org ORG URL --password-file F)"
                )
            failed = 0
            for poll in polls:
                if poll.result is not None:
                    print("\n".join(describe_pass(poll.org_id, poll.result)))
                else:
                    failed += 1
                    print(
                        f"{printable(poll.url)} (org {printable(poll.org_id)}): {printable(poll.error or '')}",
                        file=sys.stderr,
                    )
            return EXIT_MAILBOX_FAILED if failed else EXIT_OK
        try:
            done = fetch_mail(
                store,
                org or "",
                url,
                password,
                max_message_bytes=args.max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES,
            )
        except MailboxError as exc:
            print(f"invoice-pipeline: mailbox: {printable(str(exc))}", file=sys.stderr)
            return EXIT_MAILBOX_FAILED
    finally:
        store.close()
    print("\n".join(describe_pass(org or "", done)))
    return EXIT_OK


def cmd_mailbox(args: argparse.Namespace, settings: Settings) -> int:
    from invoice_pipeline.engine.mail import MailboxUrl, read_password
    from invoice_pipeline.engine.review import Actor

    org = checked_org(args.org) if args.org else None
    store = open_store(settings, COMMAND_POOL)
    try:
        if args.mailbox_command == "list":
            boxes = store.mail.mailboxes(org)
            if not boxes:
                print("no mailbox configured")
            for box in boxes:
                polled = box.last_polled_at.isoformat(timespec="seconds") if box.last_polled_at else "never"
                print(
                    f"{printable(box.org_id)}  {printable(box.url)}  password file {printable(box.password_file)}  "
                    f"{box.messages_taken} message(s) taken, last polled {polled}"
                    + (f"  last error: {printable(box.last_error)}" if box.last_error else "")
                )
            return EXIT_OK
        if org is None:
            raise ConfigError(f"mail mailbox {args.mailbox_command} needs --org")
        url = MailboxUrl.parse(args.url)
        if args.mailbox_command == "add":
            password_file = Path(args.password_file).resolve()
            read_password(password_file)  # refused now, not at the sensor's first tick
            created = store.mail.add_mailbox(org, url.identity, str(password_file), Actor.os_user().name)
            print(
                f"{'added' if created else 'updated'}: {printable(url.identity)} for org {printable(org)} (password read from {printable(str(password_file))})"
            )
        else:
            removed = store.mail.remove_mailbox(org, url.identity)
            print(
                f"{'removed' if removed else 'not configured'}: {printable(url.identity)} for org {printable(org)}"
            )
    finally:
        store.close()
    return EXIT_OK


def cmd_mail_messages(args: argparse.Namespace, settings: Settings) -> int:
    store = open_store(settings, COMMAND_POOL)
    try:
        rows = store.mail.recent_messages(checked_org(args.org), args.limit)
    finally:
        store.close()
    for row in rows:
        what = (
            f"{len(row.invoice_ids)} invoice(s) {' '.join(map(str, row.invoice_ids))}"
            if row.invoice_ids
            else f"skipped: {row.reason}"
        )
        print(
            printable(
                f"{row.taken_at.isoformat(timespec='seconds')}  {row.mailbox} UID {row.uid}  from {row.sender}  {row.subject!r}  {what}"
            )
        )
    return EXIT_OK


def add_mail_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mail = sub.add_parser(
        "mail", help="invoices from IMAP mailboxes: fetch, configured mailboxes, messages taken"
    )
    actions = mail.add_subparsers(dest="mail_command", required=True)
    fetch = actions.add_parser(
        "fetch", help="one pass: take every message not yet taken (one mailbox, or every configured one)"
    )
    fetch.add_argument("--org")
    fetch.add_argument("--imap-url", help="imaps://USER@HOST:PORT/FOLDER (imap:// only to a loopback host)")
    fetch.add_argument(
        "--password-file", help="the file holding the mailbox's password (never on the command line)"
    )
    fetch.add_argument("--max-message-bytes", type=positive_int, default=None)
    fetch.set_defaults(func=cmd_mail_fetch)
    box = actions.add_parser("mailbox", help="the mailboxes the sensor polls: add, list, remove")
    box_actions = box.add_subparsers(dest="mailbox_command", required=True)
    add = box_actions.add_parser(
        "add", help="poll a mailbox for an org (stores the URL and the password file's path)"
    )
    add.add_argument("--org", required=True)
    add.add_argument("url")
    add.add_argument("--password-file", required=True)
    listing = box_actions.add_parser(
        "list", help="the configured mailboxes, when each was polled, its last error"
    )
    listing.add_argument("--org")
    remove = box_actions.add_parser("remove", help="stop polling a mailbox (what it brought in stays)")
    remove.add_argument("--org", required=True)
    remove.add_argument("url")
    for parser in (add, listing, remove):
        parser.set_defaults(func=cmd_mailbox)
    messages = actions.add_parser(
        "messages", help="the messages taken for an org, newest first, with their invoices or why none"
    )
    messages.add_argument("--org", required=True)
    messages.add_argument("--limit", type=positive_int, default=50)
    messages.set_defaults(func=cmd_mail_messages)
