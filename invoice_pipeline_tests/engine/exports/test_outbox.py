"""The transactional outbox (issue 56 item 1): the fenced transaction that posts an invoice writes
one export row per enabled target of the org, and nothing else can write one."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import psycopg
import pytest

from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.engine.exports.helpers import datev_target, post_invoices, sql, webhook_target


def test_the_posting_transaction_writes_one_export_row_per_target_of_the_org(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    datev = datev_target(store, "acme", tmp_path / "datev")
    erp = webhook_target(store, "acme", "http://127.0.0.1:9/x", tmp_path / "secret")
    off = datev_target(store, "acme", tmp_path / "off", name="off")
    store.exports.set_enabled("acme", "off", False)
    other = datev_target(store, "globex", tmp_path / "globex")

    post_invoices(store, "acme", 3)
    post_invoices(store, "globex", 1, first=50)
    post_invoices(store, "initech", 1, first=60)  # no target: no export row

    postings = sql(database_url, "SELECT id, org_id, xmin::text FROM ledger_postings ORDER BY posted_at")
    assert [org for _, org, _ in postings].count("acme") == 3
    rows = sql(
        database_url,
        "SELECT e.posting_id, e.target_id, e.xmin::text, e.status FROM exports e",
    )
    by_posting: dict[object, list[int]] = {}
    for posting_id, target_id, _, status in rows:
        by_posting.setdefault(posting_id, []).append(target_id)
        assert status == "due"
    for posting_id, org, _ in postings:
        expected = {"acme": [datev.id, erp.id], "globex": [other.id], "initech": []}[org]
        assert sorted(by_posting.get(posting_id, [])) == sorted(expected), org
    assert off.id not in {t for _, t, _, _ in rows}
    # Written by the very transaction that wrote the posting.
    xmin_of_posting = {posting_id: xmin for posting_id, _, xmin in postings}
    assert all(xmin == xmin_of_posting[posting_id] for posting_id, _, xmin, _ in rows)


def test_no_other_transaction_can_write_an_export_row(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    post_invoices(store, "acme", 1)
    target = datev_target(store, "acme", tmp_path / "datev")  # added after the posting
    ((posting_id, invoice_id),) = sql(database_url, "SELECT id, invoice_id FROM ledger_postings")
    assert sql(database_url, "SELECT count(*) FROM exports") == [(0,)]  # a new target gets no backlog
    with pytest.raises(psycopg.errors.RestrictViolation, match="only by the transaction that posts"):
        sql(
            database_url,
            "INSERT INTO exports (posting_id, invoice_id, org_id, target_id) VALUES (%s, %s, 'acme', %s)",
            (posting_id, invoice_id, target.id),
        )
    assert sql(database_url, "SELECT count(*) FROM exports") == [(0,)]


def test_a_second_post_of_an_invoice_writes_no_second_export_row(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    datev_target(store, "acme", tmp_path / "datev")
    invoice_id = store.documents.store_document(b'{"x": 1}', "acme", "a.json").invoice_id
    lease = store.claims.acquire(invoice_id, 1, "test")
    assert lease is not None
    store.documents.post_to_ledger(lease, "acme", Decimal("10.00"), "EUR")
    store.documents.post_to_ledger(lease, "acme", Decimal("10.00"), "EUR")
    assert sql(database_url, "SELECT count(*) FROM ledger_postings") == [(1,)]
    assert sql(database_url, "SELECT count(*) FROM exports") == [(1,)]
