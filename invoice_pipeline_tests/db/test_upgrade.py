"""Upgrading from the oldest supported release loses nothing (issue 26).

The oldest supported release is the first one: its schema is `0001_schema.sql` +
`0002_lock_functions.sql` (what `_migrate_before(..., "0003")` builds). Every later schema is
on the way from it, since migrations apply in name order, so an upgrade from any release is a
suffix of the one tested here.

The old release's rows are written as it wrote them, in plain SQL against its schema, for an
invoice in every state it could leave behind. Then the current code migrates (two `migrate`
commands racing), sweeps and processes, the documented upgrade procedure (docs/upgrading.md).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from invoice_pipeline.db.migrate import MIGRATION_LOCK_ID, migrate
from invoice_pipeline.db.sqlfiles import migration_files
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.db.test_migrate import _migrate_before
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import cli_environment, run_cli, wait_for

FIRST_AFTER_OLDEST = "0003"
CONSOLE_SCRIPT = Path(sys.executable).parent / "invoice-pipeline"
ORG = "acme"


# -- what the old release left behind ---------------------------------------------------------------


@dataclass(frozen=True)
class OldInvoice:
    id: uuid.UUID
    total: str | None


def _document(conn: psycopg.Connection[Any], content: bytes) -> str:
    sha = hashlib.sha256(content).hexdigest()
    conn.execute(
        "INSERT INTO documents (sha256, content, size_bytes, received_at)"
        " VALUES (%s, %s, %s, now() - interval '3 days')",
        (sha, content, len(content)),
    )
    return sha


def _invoice(conn: psycopg.Connection[Any], content: bytes, filename: str, **columns: Any) -> uuid.UUID:
    names = ["org_id", "document_sha256", "source_filename", *columns]
    values = [ORG, _document(conn, content), filename, *columns.values()]
    row = conn.execute(
        sql.SQL("INSERT INTO invoices ({}) VALUES ({}) RETURNING id").format(
            sql.SQL(", ").join(map(sql.Identifier, names)), sql.SQL(", ").join(sql.Placeholder() * len(names))
        ),
        values,
    ).fetchone()
    assert row is not None
    return uuid.UUID(str(row[0]))


def _job(
    conn: psycopg.Connection[Any],
    invoice_id: uuid.UUID,
    status: str,
    *,
    attempt: int = 1,
    error: str | None = None,
    age: str = "2 days",
) -> uuid.UUID:
    """A processing job of a Dagster run of the old release; `age` ago, finished unless running."""
    row = conn.execute(
        "INSERT INTO processing_jobs (invoice_id, attempt, status, owner, started_at, heartbeat_at,"
        " finished_at, error) VALUES (%s, %s, %s, %s, now() - %s::interval, now() - %s::interval,"
        " CASE WHEN %s = 'running' THEN NULL ELSE now() - %s::interval END, %s) RETURNING id",
        (invoice_id, attempt, status, f"dagster-run:{uuid.uuid4()}", age, age, status, age, error),
    ).fetchone()
    assert row is not None
    return uuid.UUID(str(row[0]))


def _steps(conn: psycopg.Connection[Any], invoice_id: uuid.UUID, job_id: uuid.UUID, *steps: str) -> None:
    for step in steps:
        conn.execute(
            "INSERT INTO step_events (invoice_id, job_id, step, event, at)"
            " VALUES (%s, %s, %s, 'executed', now() - interval '2 days')",
            (invoice_id, job_id, step),
        )


ALL_STEPS = ("extract_text", "extract_fields", "validate", "detect_duplicates", "approve", "post_to_ledger")


def write_old_release_rows(url: str) -> dict[str, OldInvoice]:
    """One invoice per state the first release could leave behind, as it wrote them."""
    invoices: dict[str, OldInvoice] = {}
    doc = json_invoice("INV-500", total="595.00")
    fields = json.loads(doc)
    # The first release's keys: the VAT id with its country prefix, no blocking key (0003 rekeys).
    old_key = f"{ORG}\x1fvat:DE123456788\x1fINV500\x1finvoice"
    decided = {
        "fields": json.dumps(fields),
        "invoice_number": "INV-500",
        "document_type": "invoice",
        "currency": "EUR",
        "payable_total": "595.00",
        "issue_date": "2026-11-02",
        "seller_name": "Acme Supplies GmbH",
        "seller_vat_id": "DE123456788",
        "vendor_key": "vat:DE123456788",
        "business_key": old_key,
        "business_key_hash": 4242,
        "attempts": 1,
        "processing_stage": "post_to_ledger",
    }
    with psycopg.connect(url) as conn:
        # Processed and posted: the original.
        original = _invoice(
            conn, doc, "inv-500.json", status="processed", duplicate_status="original", **decided
        )
        job = _job(conn, original, "succeeded")
        conn.execute(
            "INSERT INTO extracted_texts (invoice_id, job_id, format, method, text) VALUES (%s, %s, 'json', 'text', %s)",
            (original, job, doc.decode()),
        )
        group = conn.execute(
            "INSERT INTO duplicate_groups (org_id, business_key, original_invoice_id) VALUES (%s, %s, %s) RETURNING id",
            (ORG, old_key, original),
        ).fetchone()
        assert group is not None
        conn.execute("UPDATE invoices SET duplicate_group_id = %s WHERE id = %s", (group[0], original))
        conn.execute(
            "INSERT INTO approvals (invoice_id, job_id, decision, rule) VALUES (%s, %s, 'approved', %s)",
            (original, job, "auto-approved: valid, not a duplicate"),
        )
        conn.execute(
            "INSERT INTO ledger_postings (invoice_id, job_id, org_id, amount, currency, posted_at)"
            " VALUES (%s, %s, %s, 595.00, 'EUR', now() - interval '2 days')",
            (original, job, ORG),
        )
        _steps(conn, original, job, *ALL_STEPS)
        invoices["original"] = OldInvoice(original, "595.00")

        # Its exact duplicate (the same invoice sent again as another file): rejected, not posted.
        copy_doc = json.dumps(fields, indent=2).encode()
        duplicate = _invoice(
            conn,
            copy_doc,
            "inv-500-again.json",
            status="processed",
            duplicate_status="duplicate",
            duplicate_of=original,
            duplicate_group_id=group[0],
            match_how="exact",
            match_score=1,
            match_reasons=["same seller, number, type, total and currency"],
            **decided,
        )
        job = _job(conn, duplicate, "succeeded")
        conn.execute(
            "INSERT INTO approvals (invoice_id, job_id, decision, rule) VALUES (%s, %s, 'rejected', %s)",
            (duplicate, job, f"duplicate of {original}"),
        )
        _steps(conn, duplicate, job, *ALL_STEPS)
        invoices["duplicate"] = OldInvoice(duplicate, None)

        # Quarantined: an unreadable file.
        reason = "the parser failed on this document"
        quarantined = _invoice(
            conn,
            b"%PDF-1.4 not really",
            "broken.pdf",
            status="quarantined",
            attempts=1,
            quarantine_code="unreadable_document",
            quarantine_reason=reason,
            last_error=reason,
            processing_stage="extract_text",
        )
        job = _job(conn, quarantined, "failed", error=f"quarantined: unreadable_document: {reason}")
        _steps(conn, quarantined, job, "extract_text")
        invoices["quarantined"] = OldInvoice(quarantined, None)

        # Failed, with its retry due.
        error = "extract_text failed: SandboxUnavailable: document sandbox worker did not start"
        failed = _invoice(
            conn,
            json_invoice("INV-501", total="238.00"),
            "inv-501.json",
            status="failed",
            attempts=1,
            last_error=error,
            processing_stage="extract_text",
        )
        conn.execute(
            "UPDATE invoices SET next_attempt_at = now() - interval '1 minute' WHERE id = %s", (failed,)
        )
        _job(conn, failed, "failed", error=error, age="1 hour")
        invoices["failed_retry_due"] = OldInvoice(failed, "238.00")

        # Held by a run that died: its lock is still running, its heartbeat hours old.
        held = _invoice(
            conn,
            json_invoice("INV-502", total="357.00"),
            "inv-502.json",
            status="processing",
            attempts=1,
            processing_stage="extract_text",
        )
        _job(conn, held, "running", age="2 hours")
        invoices["held_by_dead_run"] = OldInvoice(held, "357.00")

        # Requested by the sensor, never claimed (the deployment was stopped for the upgrade).
        requested = _invoice(conn, json_invoice("INV-503", total="476.00"), "inv-503.json")
        conn.execute(
            "UPDATE invoices SET requested_at = now() - interval '2 hours' WHERE id = %s", (requested,)
        )
        invoices["requested_unclaimed"] = OldInvoice(requested, "476.00")

        # Ingested, not yet requested.
        pending = _invoice(conn, json_invoice("INV-504", total="119.00"), "inv-504.json")
        invoices["pending"] = OldInvoice(pending, "119.00")
    return invoices


# -- reading it back --------------------------------------------------------------------------------


def rows(url: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return [tuple(r) for r in conn.execute(query, params).fetchall()]


DECISIONS = (
    "SELECT id, status, duplicate_status, duplicate_of, duplicate_group_id, match_how, quarantine_code,"
    " fields FROM invoices ORDER BY seq"
)
POSTINGS = (
    "SELECT id, invoice_id, job_id, amount, currency, posted_at FROM ledger_postings ORDER BY invoice_id"
)
APPROVALS = "SELECT invoice_id, job_id, decision, rule, decided_at FROM approvals ORDER BY invoice_id"
STEP_EVENTS = "SELECT id, invoice_id, job_id, step, event, at FROM step_events ORDER BY id"
JOBS = "SELECT id, invoice_id, attempt, status, owner, started_at, heartbeat_at, finished_at, error FROM processing_jobs"
GROUPS = "SELECT id, org_id, business_key, original_invoice_id FROM duplicate_groups ORDER BY id"


def schema(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Everything a migration can change in the public schema, in a comparable form."""
    return {
        "columns": rows(
            url,
            "SELECT table_name, column_name, ordinal_position, data_type, is_nullable, column_default"
            " FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1, 3",
        ),
        "constraints": rows(
            url,
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(c.oid) FROM pg_constraint c"
            " JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = 'public' ORDER BY 1, 2",
        ),
        "indexes": rows(
            url, "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1"
        ),
        "functions": rows(
            url,
            "SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid)"
            " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'"
            " ORDER BY 1, 2",
        ),
        "triggers": rows(
            url,
            "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t"
            " WHERE NOT tgisinternal ORDER BY 1, 2",
        ),
    }


# -- the upgrade ------------------------------------------------------------------------------------


@pytest.fixture
def env(tmp_path: Path, empty_database_url: str) -> Iterator[dict[str, str]]:
    # Retries due at once: the test does not wait out a backoff.
    with cli_environment(
        tmp_path / "home", empty_database_url, INVOICE_PIPELINE_RETRY_BASE_SECONDS="0"
    ) as values:
        yield values


def waiting_migrators(conn: psycopg.Connection[Any]) -> int:
    """Sessions queued on the migrator's advisory lock in this database."""
    row = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 1",
        (MIGRATION_LOCK_ID >> 32, MIGRATION_LOCK_ID & 0xFFFF_FFFF),
    ).fetchone()
    assert row is not None
    return int(row[0])


def race_two_migrate_commands(url: str, env: dict[str, str]) -> list[subprocess.CompletedProcess[str]]:
    """Two `invoice-pipeline migrate` started together, released at the same instant.

    The barrier is the migrator's own lock: this test holds it until both commands are queued
    on it, then lets go, so they really contend instead of one finishing before the other starts.
    """
    with psycopg.connect(url, autocommit=True) as gate:
        gate.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_ID,))
        procs = [
            subprocess.Popen(
                [str(CONSOLE_SCRIPT), "migrate"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        try:
            wait_for(
                lambda: waiting_migrators(gate) == 2 or any(p.poll() is not None for p in procs),
                timeout=120,
                what="both migrate commands to queue on the migration lock",
            )
            assert waiting_migrators(gate) == 2, [p.poll() for p in procs]
        finally:
            gate.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_ID,))
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        results.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return results


@pytest.mark.slow
def test_upgrade_from_the_oldest_release_loses_nothing_and_finishes_what_was_in_flight(
    empty_database_url: str, database_url: str, env: dict[str, str], tmp_path: Path
) -> None:
    url = empty_database_url
    _migrate_before(url, tmp_path, FIRST_AFTER_OLDEST)
    old = write_old_release_rows(url)
    before = {q: rows(url, q) for q in (DECISIONS, POSTINGS, APPROVALS, STEP_EVENTS, JOBS, GROUPS)}

    # Two migrate commands at once: both succeed, one applies the new files, each is recorded once.
    raced = race_two_migrate_commands(url, env)
    assert [r.returncode for r in raced] == [0, 0], [r.stderr for r in raced]
    new_files = [p.name for p in migration_files() if p.name >= FIRST_AFTER_OLDEST]
    applied = sorted(raced, key=lambda r: r.stdout.count("applied 0"), reverse=True)
    assert [
        line.split()[1] for line in applied[0].stdout.splitlines() if line.startswith("applied ")
    ] == new_files
    assert "up to date (0 applied" in applied[1].stdout, applied[1].stdout
    assert rows(url, "SELECT filename, count(*) FROM schema_migrations GROUP BY 1 ORDER BY 1") == [
        (p.name, 1) for p in migration_files()
    ]

    # Upgraded, the schema is the one a fresh install gets; migrating again changes nothing.
    upgraded = schema(url)
    assert upgraded == schema(database_url), "an upgraded database differs from a fresh one"
    again = migrate(url)
    assert again.applied == [] and len(again.already_applied) == len(migration_files())
    assert schema(url) == upgraded

    # The migration itself rewrote no decision, posting, approval or audit row (0003 and 0007
    # only add keys, which are not compared here).
    for q, old_rows in before.items():
        assert rows(url, q) == old_rows, q

    # The documented procedure goes on: sweep (frees what the old release left in flight),
    # then process. A new copy of the old posted invoice arrives meanwhile.
    copy = json.dumps(json.loads(json_invoice("INV-500", total="595.00")), sort_keys=True).encode()
    store = InvoiceStore(url, max_size=2)
    try:
        new_copy = store.documents.store_document(copy, ORG, "inv-500-third-time.json").invoice_id
    finally:
        store.close()
    swept = run_cli("sweep", env=env)
    assert swept.returncode == 0, swept.stderr
    assert "swept 1 stale lock(s)" in swept.stdout and "1 unclaimed request(s) expired" in swept.stdout, (
        swept.stdout
    )
    processed = run_cli("process", env=env)
    assert processed.returncode == 0, processed.stderr[-3000:]

    after = {r[0]: r for r in rows(url, DECISIONS)}
    assert len(after) == len(old) + 1, "no invoice lost, none invented"
    # Decided before the upgrade: exactly as they were.
    for old_row in before[DECISIONS]:
        if old_row[0] in (old["original"].id, old["duplicate"].id, old["quarantined"].id):
            assert after[old_row[0]] == old_row
    # In flight before the upgrade: finished now, each posted once with its own amount.
    in_flight = ("failed_retry_due", "held_by_dead_run", "requested_unclaimed", "pending")
    for name in in_flight:
        assert after[old[name].id][1:3] == ("processed", "original"), (name, after[old[name].id])
    postings = rows(url, "SELECT invoice_id, amount, currency FROM ledger_postings")
    assert sorted((str(i), str(a), c) for i, a, c in postings) == sorted(
        (str(old[name].id), old[name].total, "EUR") for name in ("original", *in_flight)
    ), "one posting per approved invoice, old amounts unchanged, nothing for duplicates"
    old_posting_ids = {r[0] for r in before[POSTINGS]}
    assert [r for r in rows(url, POSTINGS) if r[0] in old_posting_ids] == before[POSTINGS]

    # The new copy of the old original is found as its duplicate, in the old group.
    original_group = after[old["original"].id][4]
    assert after[new_copy][1:5] == ("processed", "duplicate", old["original"].id, original_group), after[
        new_copy
    ]
    assert len(rows(url, GROUPS)) == 1

    # Audit: the old rows are all still there, unchanged; only the dead run's lock moved (swept).
    assert rows(url, STEP_EVENTS)[: len(before[STEP_EVENTS])] == before[STEP_EVENTS]
    assert [r for r in rows(url, APPROVALS) if r[0] in {a[0] for a in before[APPROVALS]}] == before[APPROVALS]
    jobs_now = {r[0]: r for r in rows(url, JOBS)}
    for job in before[JOBS]:
        if job[3] == "running":
            assert jobs_now[job[0]][3] == "failed" and jobs_now[job[0]][8].startswith("swept:"), jobs_now[
                job[0]
            ]
        else:
            assert jobs_now[job[0]] == job
    assert not [j for j in jobs_now.values() if j[3] == "running"]

    status = json.loads(run_cli("status", "--json", env=env).stdout)
    assert status["locks_held"] == 0
    assert status["by_status"] == {"processed": 7, "quarantined": 1}, status["by_status"]
