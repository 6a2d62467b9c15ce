"""`invoice-pipeline db start|stop|status|url` and `migrate`: the embedded server and the schema."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from invoice_pipeline.config import Settings
from invoice_pipeline.db.connection import database_url, embedded_server
from invoice_pipeline.db.migrate import migrate


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


def add_database_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    db = sub.add_parser("db", help="manage the embedded PostgreSQL")
    db.add_argument("action", choices=["start", "stop", "status", "url"])
    db.set_defaults(func=cmd_db)
    sub.add_parser("migrate", help="apply sql/*.sql").set_defaults(func=cmd_migrate)
