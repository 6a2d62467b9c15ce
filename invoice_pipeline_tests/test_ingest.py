"""Ingest: the original bytes are stored first, by SHA-256, once — even when several processes race."""

from __future__ import annotations

import hashlib
import multiprocessing
from pathlib import Path

import psycopg

from invoice_pipeline.ingest import ingest_paths
from invoice_pipeline.store import InvoiceStore
from invoice_pipeline_tests.factories import json_invoice


def _ingest_same_file(url: str, path: str, barrier, queue) -> None:  # type: ignore[no-untyped-def]
    store = InvoiceStore(url, max_size=1)
    try:
        barrier.wait()
        (done,) = ingest_paths(store, [Path(path)], "acme")
        queue.put((str(done.result.invoice_id), done.result.created))
    finally:
        store.close()


def test_same_file_from_racing_processes_is_one_document_one_invoice(
    database_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "invoice.json"
    path.write_bytes(json_invoice())
    ctx = multiprocessing.get_context("spawn")
    n = 6
    barrier, queue = ctx.Barrier(n), ctx.Queue()
    procs = [
        ctx.Process(target=_ingest_same_file, args=(database_url, str(path), barrier, queue))
        for _ in range(n)
    ]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
    assert len({invoice for invoice, _ in results}) == 1
    assert sum(created for _, created in results) == 1, "exactly one process created it"
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM documents").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM invoices").fetchone() == (1,)
        row = conn.execute("SELECT sha256, content FROM documents").fetchone()
    assert (
        row is not None
        and row[0] == hashlib.sha256(row[1]).hexdigest()
        and bytes(row[1]) == path.read_bytes()
    )


def test_folders_are_walked_and_each_org_gets_its_own_invoice(store: InvoiceStore, tmp_path: Path) -> None:
    (tmp_path / "in" / "sub").mkdir(parents=True)
    (tmp_path / "in" / "a.json").write_bytes(json_invoice("A"))
    (tmp_path / "in" / "sub" / "b.json").write_bytes(json_invoice("B"))
    (tmp_path / "in" / ".hidden").write_bytes(b"editor swap file")
    first = ingest_paths(store, [tmp_path / "in"], "acme")
    assert sorted(f.path.name for f in first) == ["a.json", "b.json"]
    other = ingest_paths(store, [tmp_path / "in" / "a.json"], "globex")
    assert other[0].result.created and other[0].result.invoice_id != first[0].result.invoice_id, (
        "one org never sees another's invoice"
    )


def test_unreadable_bytes_are_kept_for_the_pipeline_to_quarantine(
    store: InvoiceStore, tmp_path: Path
) -> None:
    path = tmp_path / "garbage.pdf"
    path.write_bytes(b"%PDF-1.7\n\x00\xff truncated")
    (done,) = ingest_paths(store, [path], "acme")
    document = store.load_document(done.result.invoice_id)
    assert document is not None and document.content == path.read_bytes()
