"""`invoice-pipeline`: the database, ingest, headless processing through Dagster, status, the UI, the demo."""

# The docstring above is the command's own description (`invoice-pipeline --help`).

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

import psycopg
from psycopg_pool import PoolTimeout

from invoice_pipeline.cli.database import add_database_commands
from invoice_pipeline.cli.dev import add_dev_commands
from invoice_pipeline.cli.exit_codes import EXIT_DATABASE, EXIT_OK, EXIT_USAGE
from invoice_pipeline.cli.exports import add_export_commands
from invoice_pipeline.cli.mail import add_mail_commands
from invoice_pipeline.cli.process import add_process_commands
from invoice_pipeline.cli.review import add_review_commands
from invoice_pipeline.cli.status import add_status_commands
from invoice_pipeline.cli.vendors import add_vendor_commands
from invoice_pipeline.config import ConfigError, Settings
from invoice_pipeline.db.migrate import MigrationError
from invoice_pipeline.terminal import printable


def one_line(exc: BaseException) -> str:
    """An error as one line: libpq's messages carry newlines and tabbed hints."""
    return printable(" ".join(str(exc).split()) or type(exc).__name__)


def build_parser() -> argparse.ArgumentParser:
    """Every command, in the order `--help` lists them; each module adds the commands it runs."""
    parser = argparse.ArgumentParser(prog="invoice-pipeline", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add_database_commands(sub)
    add_vendor_commands(sub)
    add_process_commands(sub)
    add_status_commands(sub)
    add_dev_commands(sub)
    add_review_commands(sub)
    add_mail_commands(sub)
    add_export_commands(sub)
    from invoice_pipeline.review_ui.cli import add_commands as add_review_ui_commands

    add_review_ui_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.from_env()
        return int(args.func(args, settings))
    except BrokenPipeError:
        # The reader stopped reading (`status | head`), as it meant to: no traceback. What is
        # left to write goes nowhere, so the final flush cannot fail a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
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
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            pass  # the reader stopped reading (`status | head`): see main
    os._exit(code)
