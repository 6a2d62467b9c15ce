from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest
from dagster import DagsterInstance, build_sensor_context

from invoice_pipeline.config import ENV_INBOX
from invoice_pipeline.engine.ingest import QUIET_SECONDS
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.run_requests import PROCESS_INVOICE, PROCESS_INVOICE_BATCH, invoice_ids_of
from invoice_pipeline.orchestration.sensors import new_invoices_sensor
from invoice_pipeline_tests.factories import pipeline_resources
from pipeline_support.factories import json_invoice


def tick(database_url: str, cursor: str | None = None, **db: object):  # type: ignore[no-untyped-def]
    resources = pipeline_resources(database_url, **db)
    context = build_sensor_context(
        instance=DagsterInstance.ephemeral(), resources={"invoice_db": resources["invoice_db"]}, cursor=cursor
    )
    return new_invoices_sensor.evaluate_tick(context)


@pytest.fixture(autouse=True)
def empty_inbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    inbox = tmp_path / "inbox"
    monkeypatch.setenv(ENV_INBOX, str(inbox))
    return inbox


def test_one_invoice_due_gets_a_run_keyed_by_its_attempt_and_is_requested_once(
    database_url: str, store: InvoiceStore
) -> None:
    a = store.documents.store_document(json_invoice("A-1"), "acme", "a.json").invoice_id
    (request,) = tick(database_url).run_requests
    assert request.run_key == f"invoice:{a}:attempt:1" and request.job_name == PROCESS_INVOICE
    assert request.tags["org_id"] == "acme" and request.tags["attempt"] == "1"
    assert request.run_config["ops"]["start"]["config"] == {"invoice_id": str(a), "attempt": 1}
    again = tick(database_url)
    assert again.run_requests == [] and again.skip_message == "no invoices due"


def test_invoices_due_in_one_tick_share_a_run(database_url: str, store: InvoiceStore) -> None:
    """A trickle must not cost a run (a process start, ~80 event rows) per invoice."""
    a = store.documents.store_document(json_invoice("A-1"), "acme", "a.json").invoice_id
    b = store.documents.store_document(json_invoice("B-1"), "globex", "b.json").invoice_id
    (request,) = tick(database_url).run_requests
    assert request.job_name == PROCESS_INVOICE_BATCH and request.tags["org_ids"] == "acme,globex"
    config = request.run_config["ops"]["fan_out"]["config"]
    assert config["invoice_ids"] == [str(a), str(b)] and config["attempts"] == [1, 1]
    assert tick(database_url).run_requests == []


def test_failed_invoice_is_requested_again_with_the_next_attempt_once_due(
    database_url: str, store: InvoiceStore
) -> None:
    inv = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "UPDATE invoices SET status = 'failed', attempts = 2, next_attempt_at = now() + interval '1 hour' WHERE id = %s",
            (inv,),
        )
    assert tick(database_url).run_requests == [], "not due yet"
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE invoices SET next_attempt_at = now() WHERE id = %s", (inv,))
    (request,) = tick(database_url).run_requests
    assert request.run_key == f"invoice:{inv}:attempt:3"


def test_running_done_and_quarantined_invoices_are_not_requested(
    database_url: str, store: InvoiceStore
) -> None:
    running = store.documents.store_document(json_invoice("R"), "acme", "r.json").invoice_id
    done = store.documents.store_document(json_invoice("D"), "acme", "d.json").invoice_id
    assert store.claims.acquire(running, 1) is not None
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE invoices SET status = 'processed' WHERE id = %s", (done,))
    assert tick(database_url).run_requests == []


def test_a_backlog_is_cut_into_even_runs_of_at_most_the_batch_size(
    database_url: str, store: InvoiceStore
) -> None:
    ids = [
        store.documents.store_document(json_invoice(f"N-{i}"), "acme", f"{i}.json").invoice_id
        for i in range(25)
    ]
    data = tick(database_url, batch_size=10)
    assert [r.job_name for r in data.run_requests] == [PROCESS_INVOICE_BATCH] * 3
    assert [len(invoice_ids_of(r.run_config)) for r in data.run_requests] == [9, 9, 7]
    batched = [i for r in data.run_requests for i in r.run_config["ops"]["fan_out"]["config"]["invoice_ids"]]
    assert batched == [str(i) for i in ids]
    assert len({r.run_key for r in data.run_requests}) == 3


def test_invoice_committed_out_of_order_is_not_lost(database_url: str, store: InvoiceStore) -> None:
    """The slow transaction takes the earlier sequence number but commits after a later one was seen."""
    with psycopg.connect(database_url) as slow:
        early = slow.execute("INSERT INTO invoices (org_id) VALUES ('acme') RETURNING id, seq").fetchone()
        assert early is not None
        late = store.documents.store_document(json_invoice(), "acme", "late.json").invoice_id
        first = tick(database_url)
        assert [r.tags["invoice_id"] for r in first.run_requests] == [str(late)]
        slow.commit()
    with psycopg.connect(database_url) as conn:
        late_seq = conn.execute("SELECT seq FROM invoices WHERE id = %s", (late,)).fetchone()
    assert late_seq is not None and early[1] < late_seq[0], "the invisible invoice really had the earlier seq"
    second = tick(database_url)
    assert [r.tags["invoice_id"] for r in second.run_requests] == [str(early[0])]


def test_inbox_files_are_ingested_per_org_and_moved_aside(
    database_url: str, store: InvoiceStore, empty_inbox: Path
) -> None:
    (empty_inbox / "acme").mkdir(parents=True)
    (empty_inbox / "acme" / "x.json").write_bytes(json_invoice("X-1"))
    (empty_inbox / "loose.json").write_bytes(json_invoice("L-1"))
    first = tick(database_url)
    assert first.run_requests == [], "a file is taken only when it is unchanged in two scans"
    data = tick(database_url, first.cursor)
    (request,) = data.run_requests
    assert request.tags["org_ids"] == "acme,default"
    assert (empty_inbox / "acme" / ".ingested" / "x.json").exists()
    assert not (empty_inbox / "acme" / "x.json").exists()
    assert tick(database_url, data.cursor).run_requests == [], "moved files are not ingested again"


def test_a_file_nobody_wrote_for_a_while_is_taken_at_the_first_scan(
    database_url: str, store: InvoiceStore, empty_inbox: Path
) -> None:
    """Moved in after it was written: as quiet as two scans a tick apart could prove.

    Checked: with the two-scan rule alone, nothing is planned at the first scan and this fails."""
    (empty_inbox / "acme").mkdir(parents=True)
    quiet, fresh = empty_inbox / "acme" / "quiet.json", empty_inbox / "acme" / "fresh.json"
    quiet.write_bytes(json_invoice("Q-1"))
    fresh.write_bytes(json_invoice("F-1"))
    then = quiet.stat().st_mtime - QUIET_SECONDS - 1
    os.utime(quiet, (then, then))
    requests = tick(database_url).run_requests
    assert not quiet.exists(), "a file quiet for QUIET_SECONDS is taken at the first scan"
    assert fresh.exists(), "the fresh file waits for a second scan"
    assert len(requests) == 1, requests
    assert store.documents.invoice_state(requests[0].tags["invoice_id"]) is not None


def test_a_dead_holders_invoice_is_swept_and_requested_again_in_one_tick(
    database_url: str, store: InvoiceStore
) -> None:
    """Recovery by default: the sensor sweeps (cheap, every tick), not only the 5-minute schedule."""
    inv = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    (first,) = tick(database_url).run_requests
    lease = store.claims.acquire(inv, 1, owner="a worker that is then SIGKILLed")
    assert lease is not None
    assert tick(database_url, lock_ttl_seconds=30).run_requests == [], "a fresh lease is left alone"
    with psycopg.connect(database_url) as conn:  # its last heartbeat, back-dated past the TTL
        conn.execute(
            "UPDATE processing_jobs SET heartbeat_at = heartbeat_at - interval '31 seconds' WHERE id = %s",
            (lease.job_id,),
        )
    (retry,) = tick(database_url, lock_ttl_seconds=30).run_requests
    assert retry.run_key == f"invoice:{inv}:attempt:2" != first.run_key
    assert [j.status for j in store.claims.job_history(inv)] == ["failed"]
