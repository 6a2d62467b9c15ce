"""Apply `sql/*.sql` in order, once each, refusing edited history."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from invoice_pipeline.db.name_skeletons import reskeleton_names
from invoice_pipeline.db.rekey import rekey_decided_invoices, set_number_keys
from invoice_pipeline.db.sqlfiles import migration_files

# Any fixed 64-bit number: it only has to differ from the keys the application locks on.
MIGRATION_LOCK_ID = 0x1A7E_F00D_0000_0001


# Python that must run right after a SQL file, in its transaction: rows whose derived values
# that file's change makes stale.
DATA_MIGRATIONS: dict[str, Callable[[psycopg.Connection[Any]], object]] = {
    "0003_blocking_keys_and_review.sql": rekey_decided_invoices,
    "0007_page_money_fails_closed.sql": set_number_keys,
    # The blocking key lost its amount bucket (issue 58): every stored block_key changes.
    "0021_block_keys_without_amount.sql": rekey_decided_invoices,
    # Stored names recomputed as identity skeletons (issue 52).
    "0022_name_skeletons.sql": reskeleton_names,
}


class MigrationError(RuntimeError):
    pass


@dataclass(frozen=True)
class MigrationResult:
    applied: list[str]
    already_applied: list[str]


def checksum(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def migrate(database_url: str, directory: Path | None = None) -> MigrationResult:
    """Apply pending migrations in one transaction.

    The transaction-scoped advisory lock makes concurrent migrators queue: the second one
    waits, then finds everything recorded and applies nothing. DDL is transactional in
    PostgreSQL, so a failing file leaves the database as it was.
    """
    files = migration_files(directory)
    with psycopg.connect(database_url) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_ID,))
        conn.execute(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations (
                filename   text PRIMARY KEY,
                checksum   text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )
            """
        )
        recorded: dict[str, str] = dict(
            conn.execute("SELECT filename, checksum FROM schema_migrations").fetchall()
        )
        on_disk = {path.name for path in files}
        missing = sorted(set(recorded) - on_disk)
        if missing:
            raise MigrationError(
                f"the database has migrations this code does not know: {', '.join(missing)}; "
                "it was migrated by a newer version of invoice-pipeline"
            )
        applied, already = [], []
        for path in files:
            digest = checksum(path)
            if path.name in recorded:
                if recorded[path.name] != digest:
                    raise MigrationError(
                        f"sql/{path.name} was edited after it was applied "
                        f"(recorded checksum {recorded[path.name][:12]}, file now {digest[:12]}); "
                        "restore it and put the change in a new migration file"
                    )
                already.append(path.name)
                continue
            conn.execute(path.read_text().encode())  # a trusted file from sql/, run as-is
            if path.name in DATA_MIGRATIONS:
                DATA_MIGRATIONS[path.name](conn)
            conn.execute(
                "INSERT INTO schema_migrations (filename, checksum) VALUES (%s, %s)", (path.name, digest)
            )
            applied.append(path.name)
        return MigrationResult(applied, already)
