"""Ingest: the original bytes are stored first, by SHA-256, once — even when several processes race."""

from __future__ import annotations

import hashlib
from pathlib import Path

import psycopg
import pytest

from chaos.common import worker_context
from invoice_pipeline.engine.ingest import FileState, InboxScan, ingest_paths, scan_inbox, take_scanned
from invoice_pipeline.engine.store import InvoiceStore
from pipeline_support.factories import json_invoice


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
    ctx = worker_context()
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
    document = store.documents.load_document(done.result.invoice_id)
    assert document is not None and document.content == path.read_bytes()


def _ready(inbox: Path) -> tuple[InboxScan, dict[str, FileState]]:
    """A scan, and the observation a previous scan would have made of the same files."""
    scan = scan_inbox(inbox)
    return scan, {str(e.relative): FileState.of(e.st) for e in scan.entries}


def test_a_file_that_vanishes_between_the_scan_and_the_read_is_skipped_and_the_rest_goes_on(
    store: InvoiceStore, tmp_path: Path
) -> None:
    inbox = tmp_path / "inbox"
    (inbox / "acme").mkdir(parents=True)
    (inbox / "acme" / "a.json").write_bytes(json_invoice("A-1", total="10.00"))
    (inbox / "acme" / "gone.json").write_bytes(json_invoice("G-1", total="20.00"))
    (inbox / "acme" / "z.json").write_bytes(json_invoice("Z-1", total="30.00"))
    scan, seen = _ready(inbox)
    (inbox / "acme" / "gone.json").unlink()  # listed, then gone before it is opened
    done = take_scanned(store, scan, seen)
    assert sorted(f.path.name for f in done.ingested) == ["a.json", "z.json"]
    assert [(s.path.name, s.reason) for s in done.skipped] == [
        ("gone.json", "it vanished between the scan and the read")
    ]
    assert done.rejected == [] and done.error is None


def test_a_file_swapped_for_a_symlink_after_the_scan_is_never_followed(
    store: InvoiceStore, tmp_path: Path
) -> None:
    inbox = tmp_path / "inbox"
    (inbox / "acme").mkdir(parents=True)
    victim = inbox / "acme" / "invoice.xml"
    victim.write_bytes(b"x" * len(Path("/etc/passwd").read_bytes()))
    scan, seen = _ready(inbox)
    victim.unlink()
    victim.symlink_to("/etc/passwd")  # the classic race: checked as a file, opened as a link
    done = take_scanned(store, scan, seen)
    assert done.ingested == []
    (rejected,) = done.rejected
    assert rejected.moved_to is not None and rejected.moved_to.is_symlink()
    assert "symbolic link" in rejected.reason
    with psycopg.connect(store.database_url) as conn:
        assert conn.execute("SELECT count(*) FROM documents").fetchone() == (0,)


def test_ingesting_a_folder_takes_regular_files_only(store: InvoiceStore, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "real.json").write_bytes(json_invoice("R-1"))
    (folder / "link.xml").symlink_to("/etc/passwd")
    (folder / "linked-dir").symlink_to("/etc", target_is_directory=True)
    (folder / "upload.json.part").write_bytes(b"{")
    done = ingest_paths(store, [folder], "acme")
    assert [f.path.name for f in done] == ["real.json"]


def test_a_bad_argument_stores_nothing(store: InvoiceStore, tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_bytes(json_invoice())
    with pytest.raises(FileNotFoundError, match="no such file or folder: .*missing.json"):
        ingest_paths(store, [good, tmp_path / "missing.json"], "acme")
    with psycopg.connect(store.database_url) as conn:
        assert conn.execute("SELECT count(*) FROM invoices").fetchone() == (0,)
