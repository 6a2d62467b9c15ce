"""Delivery of the outbox (issue 56 items 2 and 3) against a real loopback HTTP receiver and real
files: what the webhook sends, retries and dead letters, the idempotency key across
redeliveries, DATEV's same batch -> same bytes, and the fence against a swept deliverer."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from invoice_pipeline.engine.exports import datev
from invoice_pipeline.engine.exports.delivery import deliver
from invoice_pipeline.engine.exports.webhook import Delivery
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples.receiver import WebhookReceiver
from invoice_pipeline_tests.engine.exports.helpers import (
    IBAN,
    SECRET,
    age_export_leases,
    datev_target,
    export_ids,
    post_invoices,
    posting_ids,
    sql,
    statuses,
    webhook_target,
)


def test_the_webhook_sends_each_posting_once_signed_with_its_key(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    with WebhookReceiver(SECRET) as receiver:
        target = webhook_target(store, "acme", receiver.url, tmp_path / "secret")
        invoice_ids = post_invoices(store, "acme", 3)
        report = deliver(store, "w1")
    assert (report.delivered, report.dead) == (3, 0)
    assert statuses(database_url, target) == {"delivered": 3}
    assert len(receiver.requests) == 3
    assert all(r.signature_ok for r in receiver.requests)
    assert {r.key for r in receiver.requests} == export_ids(database_url, target)
    assert set(receiver.booked().values()) == {1}
    assert set(receiver.booked()) == posting_ids(database_url, "acme")
    body = receiver.requests[0].json()
    assert body["invoice_id"] in {str(i) for i in invoice_ids}
    assert body["iban"] == IBAN and body["currency"] == "EUR"
    assert body["vendor"]["vat_id"] and {"kind": "iban", "value": IBAN} in body["vendor"]["identifiers"]
    sha = sql(database_url, "SELECT document_sha256 FROM invoices WHERE id = %s", (body["invoice_id"],))
    assert body["document_sha256"] == sha[0][0]
    assert body["invoice_number"].startswith("INV-") and body["issue_date"] == "2026-11-02"


def test_the_idempotency_key_is_the_same_on_every_redelivery(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    """First every request is answered 500, then the connection is closed, then 200: three
    attempts per posting, one key per posting throughout, booked once."""
    with WebhookReceiver(SECRET) as receiver:
        target = webhook_target(store, "acme", receiver.url, tmp_path / "s", retry_base=timedelta(0))
        post_invoices(store, "acme", 2)
        receiver.then("500", "500", "close", "close")
        deliver(store, "w1", max_batches=1)
        deliver(store, "w2", max_batches=1)
        deliver(store, "w3", max_batches=1)
    assert statuses(database_url, target) == {"delivered": 2}
    assert [r.answered for r in receiver.requests] == ["500", "500", "close", "close", "200", "200"]
    keys = [r.key for r in receiver.requests]
    assert keys[0:2] == keys[2:4] == keys[4:6]
    assert sorted(keys[:2]) == sorted(export_ids(database_url, target))
    assert set(receiver.booked().values()) == {1} and len(receiver.booked()) == 2


def test_retried_until_the_attempt_limit_then_dead_lettered_with_the_answer_and_requeued(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    with WebhookReceiver(SECRET, default="503") as receiver:
        target = webhook_target(
            store, "acme", receiver.url, tmp_path / "s", max_attempts=3, retry_base=timedelta(0)
        )
        post_invoices(store, "acme", 1)
        report = deliver(store, "w1")
        assert (report.retried, report.dead, report.delivered) == (2, 1, 0)
        assert len(receiver.requests) == 3
        assert statuses(database_url, target) == {"dead": 1}
        ((attempts, answer),) = sql(database_url, "SELECT attempts, answer FROM exports")
        assert attempts == 3 and answer.startswith("HTTP 503")
        assert [d.answer for d in store.exports.dead_letters("acme")] == [answer]
        # The receiver is back: a person redrives the dead letter.
        receiver.default = "200"
        assert store.exports.requeue("acme", "erp") == 1
        assert deliver(store, "w2").delivered == 1
    assert statuses(database_url, target) == {"delivered": 1}
    assert len({r.key for r in receiver.requests}) == 1


def test_a_client_error_is_dead_lettered_at_once_with_the_body_and_a_timeout_is_retried(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    with WebhookReceiver(SECRET) as receiver:
        target = webhook_target(
            store, "acme", receiver.url, tmp_path / "s", retry_base=timedelta(hours=1), timeout_s=0.5
        )
        post_invoices(store, "acme", 3)
        receiver.then("422", "hang", "429")
        report = deliver(store, "w1")
    assert (report.dead, report.retried, report.delivered) == (1, 2, 0)
    answers = dict(sql(database_url, "SELECT status, answer FROM exports WHERE status = 'dead'"))
    assert answers["dead"].startswith("HTTP 422") and '"status": "422"' in answers["dead"]
    retried = [
        r[0] for r in sql(database_url, "SELECT answer FROM exports WHERE status = 'due' ORDER BY seq")
    ]
    assert retried[0].startswith("no answer: TimeoutError") and retried[1].startswith("HTTP 429")
    assert statuses(database_url, target) == {"dead": 1, "due": 2}


def test_a_wrong_signature_is_refused_by_the_receiver_and_dead_lettered(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    with WebhookReceiver(b"the receiver's other secret") as receiver:
        target = webhook_target(store, "acme", receiver.url, tmp_path / "s")
        post_invoices(store, "acme", 1)
        deliver(store, "w1")
    assert statuses(database_url, target) == {"dead": 1}
    assert receiver.booked() == {}


def test_a_datev_batch_delivered_again_writes_the_same_file_with_the_same_bytes(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    """A deliverer writes the batch's file and dies before its commit; the next one, after the
    sweep, writes the same name with the same bytes (and no other file)."""
    folder = tmp_path / "datev"
    target = datev_target(store, "acme", folder)
    post_invoices(store, "acme", 3)
    batch = store.exports.claim_batch(target, "dies")
    assert batch is not None and len(batch.leases) == 3
    first = datev.write_batch(batch)
    before = first.read_bytes()
    first.write_bytes(b"torn")  # whatever the first left there is replaced
    assert age_export_leases(database_url) == 3
    report = deliver(store, "w2")
    assert (report.swept, report.delivered) == (3, 3)
    assert sorted(p.name for p in folder.iterdir()) == [first.name]
    assert first.read_bytes() == before
    text = before.decode(datev.ENCODING)
    lines = text.split("\r\n")
    assert lines[0].startswith('"EXTF";700;21;"Buchungsstapel";12;')
    assert lines[1].startswith('"Umsatz (ohne Soll/Haben-Kz)";"Soll/Haben-Kennzeichen"')
    assert len([line for line in lines[2:] if line]) == 3
    assert lines[2].split(";")[:3] == ["101,00", '"H"', '"EUR"']
    assert statuses(database_url, target) == {"delivered": 3}


def test_a_swept_deliverer_cannot_mark_rows_delivered(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    """The fence: a deliverer whose leases were swept (a zombie: frozen past its TTL) records
    nothing, before and after another deliverer claimed the rows."""
    target = datev_target(store, "acme", tmp_path / "datev")
    post_invoices(store, "acme", 2)
    zombie = store.exports.claim_batch(target, "zombie")
    assert zombie is not None
    age_export_leases(database_url)
    assert store.exports.release_stale() == 2
    late = [Delivery(lease.export_id, "delivered", "zombie") for lease in zombie.leases]
    assert store.exports.record(zombie.leases, late).lost == 2
    assert statuses(database_url, target) == {"due": 2}
    successor = store.exports.claim_batch(target, "successor")
    assert successor is not None and successor.batch_id == zombie.batch_id
    assert store.exports.record(zombie.leases, late).lost == 2
    assert statuses(database_url, target) == {"due": 2}
    done = [Delivery(lease.export_id, "delivered", "ok") for lease in successor.leases]
    assert store.exports.record(successor.leases, done).delivered == 2
    assert statuses(database_url, target) == {"delivered": 2}
    assert sql(database_url, "SELECT DISTINCT answer FROM exports") == [("ok",)]
