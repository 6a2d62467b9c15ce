"""kill -9 of a real delivery worker process (issue 56 item 5): killed between a webhook's answer
and the commit, or after a DATEV file's rename and before the commit, then a second worker.
At the end every posting is delivered to each target, the receiver booked each posting exactly
once by its idempotency key, and each DATEV batch is one file whose bytes did not change."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples.receiver import WebhookReceiver
from invoice_pipeline_tests.engine.exports.helpers import (
    SECRET,
    age_export_leases,
    datev_target,
    post_invoices,
    posting_ids,
    sql,
    statuses,
    webhook_target,
)
from pipeline_support.helpers import wait_for

POSTINGS = 7
BATCH = 3


def _worker(database_url: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline_support.export_worker", database_url, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.parametrize("crash_at", ["after_send:1", "after_send:5", "after_rename:1", "after_rename:2"])
def test_a_worker_killed_before_its_commit_then_a_second_worker_delivers_each_posting_once(
    database_url: str, store: InvoiceStore, tmp_path: Path, crash_at: str
) -> None:
    folder = tmp_path / "datev"
    marker = tmp_path / "marker"
    with WebhookReceiver(SECRET) as receiver:
        erp = webhook_target(store, "acme", receiver.url, tmp_path / "secret", batch_size=BATCH)
        books = datev_target(store, "acme", folder, batch_size=BATCH)
        post_invoices(store, "acme", POSTINGS)

        first = _worker(database_url, "--crash-at", crash_at, "--marker", str(marker), "--owner", "first")
        try:
            wait_for(lambda: marker.exists() or first.poll() is not None, timeout=120, what="the crash point")
            assert first.poll() is None, first.communicate()[0]
            files_at_kill = {p.name: p.read_bytes() for p in folder.glob("*.csv")}
            first.send_signal(signal.SIGKILL)
            assert first.wait(30) == -signal.SIGKILL
        finally:
            if first.poll() is None:
                first.kill()
        requests_at_kill = len(receiver.requests)
        held = age_export_leases(database_url)
        assert held > 0  # the dead worker's leases, back-dated: the second worker's sweep frees them

        second = _worker(database_url, "--owner", "second")
        out, _ = second.communicate(timeout=300)
        assert second.returncode == 0, out

    assert statuses(database_url, erp) == {"delivered": POSTINGS}
    assert statuses(database_url, books) == {"delivered": POSTINGS}
    postings = posting_ids(database_url, "acme")
    assert receiver.booked() == dict.fromkeys(postings, 1)
    if crash_at.startswith("after_send"):
        # What the killed batch had sent before the kill was sent again, under the same keys.
        sent_in_killed_batch = (int(crash_at.split(":")[1]) - 1) % BATCH + 1
        assert requests_at_kill == int(crash_at.split(":")[1])
        assert len(receiver.requests) == POSTINGS + sent_in_killed_batch
        assert sum(n > 1 for n in receiver.acknowledged.values()) == sent_in_killed_batch
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert all(name.startswith("EXTF_Buchungsstapel_") for name in files)  # no temporary left behind
    batches = sql(
        database_url, "SELECT count(DISTINCT batch_id) FROM exports WHERE target_id = %s", (books.id,)
    )
    assert len(files) == batches[0][0] == -(-POSTINGS // BATCH)
    for name, content in files_at_kill.items():
        assert files[name] == content  # rewritten by the second worker with the same bytes
    records = [
        line for content in files.values() for line in content.decode("cp1252").split("\r\n")[2:] if line
    ]
    numbers = sorted(line.split(";")[10] for line in records)
    assert numbers == sorted(f'"INV-{n:05d}"' for n in range(1, POSTINGS + 1))


def test_deliverers_running_at_once_send_each_posting_once(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    """Three delivery processes released together on the same targets: a batch is held by one,
    so every posting is sent once (no redelivery without a crash), each row claimed once."""
    folder, go = tmp_path / "datev", tmp_path / "go"
    postings = 20
    with WebhookReceiver(SECRET) as receiver:
        erp = webhook_target(store, "acme", receiver.url, tmp_path / "secret", batch_size=2)
        books = datev_target(store, "acme", folder, batch_size=2)
        post_invoices(store, "acme", postings)
        ready = [tmp_path / f"ready{n}" for n in range(3)]
        workers = [
            _worker(database_url, "--owner", f"w{n}", "--ready", str(ready[n]), "--go", str(go))
            for n in range(3)
        ]
        wait_for(lambda: all(r.exists() for r in ready), timeout=120, what="three workers ready")
        go.write_text("go")
        for worker in workers:
            out, _ = worker.communicate(timeout=300)
            assert worker.returncode == 0, out
    assert statuses(database_url, erp) == {"delivered": postings} == statuses(database_url, books)
    assert len(receiver.requests) == postings and set(receiver.acknowledged.values()) == {1}
    jobs = sql(database_url, "SELECT count(*), count(DISTINCT export_id) FROM export_jobs")
    assert jobs == [(2 * postings, 2 * postings)]  # one job per row: none claimed twice
    assert len(list(folder.iterdir())) == postings // 2
