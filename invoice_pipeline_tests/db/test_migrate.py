from __future__ import annotations

import json
import multiprocessing
import shutil
from pathlib import Path

import psycopg
import pytest

from chaos.common import worker_context
from invoice_pipeline.db.migrate import MigrationError, migrate
from invoice_pipeline.db.sqlfiles import migration_files, sql_dir
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.keys import hash64
from invoice_pipeline.domain.matching import MatchCandidate
from invoice_pipeline.engine.dedupe import decide_duplicate
from invoice_pipeline.engine.store import InvoiceStore
from pipeline_support.factories import json_invoice


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return {r[0] for r in rows}


def test_fresh_database_gets_every_file_then_rerun_is_a_no_op(empty_database_url: str) -> None:
    names = [p.name for p in migration_files()]
    first = migrate(empty_database_url)
    assert first.applied == names
    assert {"invoices", "processing_jobs", "schema_migrations", "documents"} <= _tables(empty_database_url)
    second = migrate(empty_database_url)
    assert second.applied == []
    assert second.already_applied == names


def test_the_contract_insert_works(empty_database_url: str) -> None:
    migrate(empty_database_url)
    with psycopg.connect(empty_database_url) as conn:
        row = conn.execute("INSERT INTO invoices (org_id) VALUES ('acme') RETURNING id").fetchone()
        assert row is not None
        job = conn.execute("SELECT acquire_processing_lock(%s, 1)", (row[0],)).fetchone()
        assert job is not None and job[0] is not None


def _migrate_in_child(url: str, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    try:
        queue.put(("ok", migrate(url).applied))
    except Exception as exc:
        queue.put(("error", repr(exc)))


@pytest.mark.slow
def test_concurrent_migrators_apply_each_file_once(empty_database_url: str) -> None:
    ctx = worker_context()
    queue = ctx.Queue()
    procs = [ctx.Process(target=_migrate_in_child, args=(empty_database_url, queue)) for _ in range(6)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert all(kind == "ok" for kind, _ in results), results
    applied = [names for _, names in results if names]
    assert len(applied) == 1, f"exactly one migrator should have applied the files: {results}"
    with psycopg.connect(empty_database_url) as conn:
        count = conn.execute("SELECT count(*) FROM schema_migrations").fetchone()
    assert count is not None and count[0] == len(migration_files())


def test_edited_applied_file_is_refused_with_a_clear_message(empty_database_url: str, tmp_path: Path) -> None:
    copy = tmp_path / "sql"
    shutil.copytree(sql_dir(), copy)
    migrate(empty_database_url, copy)
    first = sorted(copy.glob("*.sql"))[0]
    first.write_text(first.read_text() + "\n-- an innocent-looking edit\n")
    with pytest.raises(MigrationError, match=rf"{first.name} was edited after it was applied"):
        migrate(empty_database_url, copy)


def test_new_file_is_applied_and_a_failing_one_changes_nothing(
    empty_database_url: str, tmp_path: Path
) -> None:
    copy = tmp_path / "sql"
    shutil.copytree(sql_dir(), copy)
    migrate(empty_database_url, copy)
    (copy / "9001_extra.sql").write_text("CREATE TABLE extra_ok (id int);")
    (copy / "9002_broken.sql").write_text("CREATE TABLE extra_broken (id int); SELECT * FROM no_such_table;")
    with pytest.raises(psycopg.errors.UndefinedTable):
        migrate(empty_database_url, copy)
    assert "extra_ok" not in _tables(empty_database_url)
    (copy / "9002_broken.sql").unlink()
    assert migrate(empty_database_url, copy).applied == ["9001_extra.sql"]


def _migrate_before(url: str, tmp_path: Path, first_new: str) -> None:
    """The database as a release before `first_new` left it: every migration older than it."""
    migrate(url, _files_before(tmp_path / "sql", first_new))


def _files_before(directory: Path, first_new: str) -> Path:
    """A copy of sql/ holding only the migrations older than `first_new`."""
    directory.mkdir()
    for path in migration_files():
        if path.name < first_new:
            shutil.copy(path, directory / path.name)
    return directory


def test_invoices_decided_before_blocking_keys_are_rekeyed_and_still_found(
    empty_database_url: str, tmp_path: Path
) -> None:
    """0003 changed how keys are made; its data migration recomputes them for decided invoices.

    The stored keys are compared with what today's code makes of the same fields: a later copy
    alone would still find the old original through the number key that 0007's data migration
    fills, and so hide the loss of this one (with `rekey_decided_invoices` skipped, the block
    key stays NULL and the first assert fails)."""
    _migrate_before(empty_database_url, tmp_path, "0003")
    fields = json.loads(json_invoice("INV-77", vat_id="DE123456789"))
    with psycopg.connect(empty_database_url) as conn:
        # What the old code stored: the VAT id with its prefix in the key, no blocking key.
        row = conn.execute(
            "INSERT INTO invoices (org_id, status, fields, payable_total, currency, duplicate_status,"
            " business_key, vendor_key) VALUES ('acme', 'processed', %s, 119.00, 'EUR', 'original',"
            " 'acme\x1fvat:DE123456789\x1fINV77\x1finvoice', 'vat:DE123456789') RETURNING id",
            (json.dumps(fields),),
        ).fetchone()
        assert row is not None
        old_original = row[0]
    # Only through 0003: 0021 rekeys every decided invoice again, and would hide a 0003 that did not.
    assert (
        migrate(empty_database_url, _files_before(tmp_path / "to-0003", "0004")).applied[0].startswith("0003")
    )
    expected = MatchCandidate.from_fields("x", "acme", InvoiceFields.from_json(fields)).stored_keys
    columns = ("business_key", "business_key_hash", "vendor_key", "block_key")
    with psycopg.connect(empty_database_url) as conn:
        stored = conn.execute(
            "SELECT business_key, business_key_hash, vendor_key, block_key FROM invoices WHERE id = %s",
            (old_original,),
        ).fetchone()
    assert stored is not None
    assert dict(zip(columns, stored, strict=True)) == {k: expected[k] for k in columns}, (
        "the old original was not rekeyed"
    )
    migrate(empty_database_url)
    store = InvoiceStore(empty_database_url, max_size=2)
    try:
        copy = store.documents.store_document(json_invoice("INV-0077", vat_id="123456789"), "acme").invoice_id
        lease = store.claims.acquire(copy, 1)
        assert lease is not None
        new_fields = InvoiceFields.from_json(json.loads(json_invoice("INV-0077", vat_id="123456789")))
        store.documents.save_fields(lease, new_fields)
        decision = decide_duplicate(store, lease, "acme", new_fields)
    finally:
        store.close()
    assert decision.status == "duplicate" and decision.original_id == old_original


def test_invoices_decided_before_number_keys_are_found_by_a_copy_without_currency(
    empty_database_url: str, tmp_path: Path
) -> None:
    """0007 added the number key; its data migration fills it for invoices decided before, so a
    later copy with no blocking key (here: no currency) still finds them. Without the data
    migration the copy becomes a second original (checked by skipping `set_number_keys`)."""
    _migrate_before(empty_database_url, tmp_path, "0007")
    fields = InvoiceFields.from_json(json.loads(json_invoice("INV-88")))
    keys = MatchCandidate.from_fields("x", "acme", fields).stored_keys
    with psycopg.connect(empty_database_url) as conn:
        row = conn.execute(
            "INSERT INTO invoices (org_id, status, fields, payable_total, currency, duplicate_status,"
            " business_key, business_key_hash, vendor_key, block_key)"
            " VALUES ('acme', 'processed', %s, 119.00, 'EUR', 'original', %s, %s, %s, %s) RETURNING id",
            (
                json.dumps(fields.to_json()),
                keys["business_key"],
                keys["business_key_hash"],
                keys["vendor_key"],
                keys["block_key"],
            ),
        ).fetchone()
        assert row is not None
        old_original = row[0]
    assert migrate(empty_database_url).applied[0] == "0007_page_money_fails_closed.sql"
    scan = InvoiceFields.from_json(json.loads(json_invoice("INV-88", currency=None, vat_id=None)))  # type: ignore[arg-type]
    store = InvoiceStore(empty_database_url, max_size=2)
    try:
        copy = store.documents.store_document(
            json_invoice("INV-88", currency=None, vat_id=None), "acme"
        ).invoice_id  # type: ignore[arg-type]
        lease = store.claims.acquire(copy, 1)
        assert lease is not None
        store.documents.save_fields(lease, scan)
        decision = decide_duplicate(store, lease, "acme", scan)
    finally:
        store.close()
    assert decision.status == "suspected" and decision.original_id == old_original


def test_invoices_decided_before_0021_are_rekeyed_and_a_repriced_resend_is_held(
    empty_database_url: str, tmp_path: Path
) -> None:
    """0021 took the amount out of the blocking key (issue 58); its data migration recomputes
    the stored block keys. An original decided before it, with the old key (amount bucket in
    it), must still be found by a re-send whose number differs only in format, so shares no
    number key, and whose amount differs: held as suspected. With the data migration skipped
    the old key is never searched again, the re-send becomes a second original: paid twice."""
    _migrate_before(empty_database_url, tmp_path, "0021")
    fields = InvoiceFields.from_json(json.loads(json_invoice("INV-1001", total="1190.00")))
    keys = MatchCandidate.from_fields("x", "acme", fields).stored_keys
    old_block = hash64("\x1f".join(("block", "acme", "invoice", "EUR", "1001", "119000")))
    with psycopg.connect(empty_database_url) as conn:
        row = conn.execute(
            "INSERT INTO invoices (org_id, status, fields, payable_total, currency, issue_date,"
            " duplicate_status, business_key, business_key_hash, vendor_key, block_key, number_key)"
            " VALUES ('acme', 'processed', %s, 1190.00, 'EUR', '2026-11-02', 'original', %s, %s, %s, %s, %s)"
            " RETURNING id",
            (
                json.dumps(fields.to_json()),
                keys["business_key"],
                keys["business_key_hash"],
                keys["vendor_key"],
                old_block,
                keys["number_key"],
            ),
        ).fetchone()
        assert row is not None
        old_original = row[0]
    assert "0021_block_keys_without_amount.sql" in migrate(empty_database_url).applied
    with psycopg.connect(empty_database_url) as conn:
        stored = conn.execute("SELECT block_key FROM invoices WHERE id = %s", (old_original,)).fetchone()
    assert stored == (keys["block_key"],), "the old original was not rekeyed"
    store = InvoiceStore(empty_database_url, max_size=2)
    try:
        resend = json_invoice("1001", total="1249.50", issue_date="2026-11-20")
        copy = store.documents.store_document(resend, "acme").invoice_id
        lease = store.claims.acquire(copy, 1)
        assert lease is not None
        new_fields = InvoiceFields.from_json(json.loads(resend))
        store.documents.save_fields(lease, new_fields)
        decision = decide_duplicate(store, lease, "acme", new_fields)
    finally:
        store.close()
    assert decision.status == "suspected" and decision.original_id == old_original
