"""The Prometheus metrics (invoice_pipeline/engine/metrics.py) against a real PostgreSQL.

* After a real workload (the stages over a chunk with an exact copy, a suspected copy and two
  currencies, then a lease swept), every series the scrape serves from maintained counters
  equals a recount from the tables themselves.
* No query of a scrape reads a table that grows with history except through a bounded index
  scan (a partial index, or an index condition): checked on the plans, with sequential scans
  priced out so that only a query with no other way shows one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import psycopg
from prometheus_client.parser import text_string_to_metric_families

from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.engine.chunk_loop import claim_chunk
from invoice_pipeline.engine.maintenance import sweep
from invoice_pipeline.engine.metrics import exposition, registry_for
from invoice_pipeline.engine.review import Actor, act
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.resources import InvoiceDatabase
from invoice_pipeline_tests.support import process_now
from pipeline_support.factories import json_invoice

# Tables whose size follows history; metric_counts and its deltas are the counters themselves.
GROWING = {"invoices", "processing_jobs", "ledger_postings", "step_events", "extracted_texts", "documents"}


def scrape(store: InvoiceStore) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """One scrape through prometheus-client, parsed back: sample name -> labels -> value."""
    text = exposition(registry_for(store)).decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def rows(url: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query).fetchall()


def test_the_counters_equal_a_recount_after_a_real_workload(database_url: str, store: InvoiceStore) -> None:
    docs = {
        "a.json": json_invoice("INV-5000", total="119.00"),
        "a-copy.json": json_invoice("INV-5000", total="119.00", buyer="Another Buyer"),  # exact copy
        "a-suspect.json": json_invoice("5000", total="119.00", buyer="Third Buyer"),  # reformatted number
        "usd.json": json_invoice(
            "US-77", total="250.00", currency="USD", seller="Yankee Tools Inc", vat_id=None
        ),
        "eur2.json": json_invoice("INV-6001", total="80.50"),
    }
    ids = [store.documents.store_document(content, "acme", name).invoice_id for name, content in docs.items()]
    process_now(store, ids, "test-metrics")
    # A lease whose holder died: claimed, its heartbeat back-dated past the TTL, swept.
    dead = store.documents.store_document(
        json_invoice("INV-7000", total="10.00"), "acme", "dead.json"
    ).invoice_id
    claim_chunk(store, [(dead, None)], "test-metrics-dead")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE processing_jobs SET heartbeat_at = heartbeat_at - interval '1 hour' "
            "WHERE invoice_id = %s AND status = 'running'",
            (dead,),
        )
    assert store.maintenance.release_stale_locks() == 1

    got = scrape(store)

    by_status = dict(rows(database_url, "SELECT status, count(*) FROM invoices GROUP BY status"))
    assert by_status.get("needs_review") == 1 and by_status.get("processed", 0) >= 3, by_status
    for status in (
        "pending",
        "processing",
        "processed",
        "failed",
        "quarantined",
        "needs_attention",
        "needs_review",
    ):
        assert got["invoice_pipeline_invoices"][(("status", status),)] == by_status.get(status, 0), status
    assert got["invoice_pipeline_dead_letters"][()] == by_status.get("needs_attention", 0)

    kinds = dict(
        rows(
            database_url,
            "SELECT duplicate_status, count(*) FROM invoices WHERE duplicate_status IS NOT NULL GROUP BY 1",
        )
    )
    assert kinds == {"original": 3, "duplicate": 1, "suspected": 1}
    for kind, n in kinds.items():
        assert got["invoice_pipeline_duplicate_decisions"][(("kind", kind),)] == n

    posted = rows(database_url, "SELECT currency, count(*), sum(amount) FROM ledger_postings GROUP BY 1")
    assert {c for c, _, _ in posted} == {"EUR", "USD"}
    for currency, n, amount in posted:
        assert got["invoice_pipeline_postings_total"][(("currency", currency),)] == n
        assert Decimal(str(got["invoice_pipeline_posted_amount_total"][(("currency", currency),)])) == amount

    held = dict(
        rows(
            database_url,
            "SELECT substring(r FROM '^[a-z][a-z0-9_]*'), count(*) FROM invoices, "
            "unnest(review_reasons) r WHERE status = 'needs_review' GROUP BY 1",
        )
    )
    assert held and {k[0][1]: v for k, v in got["invoice_pipeline_held_invoices"].items()} == held
    assert got["invoice_pipeline_oldest_held_age_seconds"][()] >= 0

    swept = rows(database_url, "SELECT count(*) FROM processing_jobs WHERE error LIKE 'swept:%'")[0][0]
    assert swept == 1 and got["invoice_pipeline_leases_swept_total"][()] == swept
    assert got["invoice_pipeline_leases_running"][()] == 0
    # The swept invoice is due again (failed, retry at once after a sweep) or still waiting.
    due = rows(
        database_url,
        "SELECT count(*) FROM invoices WHERE status IN ('pending', 'failed') AND next_attempt_at <= now()",
    )[0][0]
    assert got["invoice_pipeline_due_invoices"][()] == due

    executed = dict(
        rows(database_url, "SELECT step, count(*) FROM step_events WHERE event = 'executed' GROUP BY 1")
    )
    assert len(executed) >= 5, executed
    for step, n in executed.items():
        assert got["invoice_pipeline_stage_duration_seconds_count"][(("stage", step),)] == n, step
        assert got["invoice_pipeline_stage_duration_seconds_bucket"][(("le", "+Inf"), ("stage", step))] == n


def test_the_counters_follow_a_duplicate_decision_a_person_changes(
    database_url: str, store: InvoiceStore
) -> None:
    """Issue 53: a decision that changes (not only one made for the first time) moves its count
    from the old kind to the new one. Two suspected copies: a person says one is no copy (it
    becomes an original, and is processed), and confirms the other (it becomes a duplicate)."""
    docs = {
        "a.json": json_invoice("INV-5100", total="119.00"),
        "a-suspect.json": json_invoice("5100", total="119.00", buyer="Third Buyer"),
        "b.json": json_invoice("INV-5200", total="80.50"),
        "b-suspect.json": json_invoice("5200", total="80.50", buyer="Third Buyer"),
    }
    ids = dict(
        zip(
            docs,
            (store.documents.store_document(c, "acme", n).invoice_id for n, c in docs.items()),
            strict=True,
        )
    )
    process_now(store, list(ids.values()), "test-metrics")
    assert _duplicate_kinds(database_url) == {"original": 2, "suspected": 2}
    assert _scraped_kinds(store) == {"original": 2, "suspected": 2}

    alice = Actor("os-user:alice", "review:alice@test:1")
    released = act(store, "not_duplicate", ids["a-suspect.json"], alice)
    assert released.done and released.to_status == "pending", released
    confirmed = act(store, "confirm_duplicate", ids["b-suspect.json"], alice)
    assert confirmed.done, confirmed
    process_now(store, [ids["a-suspect.json"]], "test-metrics")

    kinds = _duplicate_kinds(database_url)
    assert kinds == {"original": 3, "duplicate": 1}
    assert _scraped_kinds(store) == kinds
    by_status = dict(rows(database_url, "SELECT status, count(*) FROM invoices GROUP BY status"))
    scraped = {k[0][1]: v for k, v in scrape(store)["invoice_pipeline_invoices"].items() if v}
    assert scraped == by_status


def _duplicate_kinds(url: str) -> dict[str, int]:
    return dict(
        rows(
            url,
            "SELECT duplicate_status, count(*) FROM invoices WHERE duplicate_status IS NOT NULL GROUP BY 1",
        )
    )


def _scraped_kinds(store: InvoiceStore) -> dict[str, float]:
    """The duplicate_decisions series, kinds counted zero left out."""
    return {k[0][1]: v for k, v in scrape(store)["invoice_pipeline_duplicate_decisions"].items() if v}


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


def test_no_scrape_query_reads_a_growing_table_unbounded(database_url: str, store: InvoiceStore) -> None:
    queries = QueryFile("metrics")
    with psycopg.connect(database_url, autocommit=True) as conn:
        partial = {
            name
            for (name,) in conn.execute(
                "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indpred IS NOT NULL"
            ).fetchall()
        }
        conn.execute("SET enable_seqscan = off")
        for name in ("metric_totals", "in_flight_by_stage", "held_by_reason", "queue_gauges"):
            (plan,) = conn.execute(f"EXPLAIN (FORMAT JSON) {queries[name]}").fetchone()  # type: ignore[misc]
            plan = plan if isinstance(plan, list) else json.loads(plan)
            for node in plan_nodes(plan[0]["Plan"]):
                table = node.get("Relation Name")
                if table not in GROWING:
                    continue
                bounded = (
                    "Index Cond" in node
                    or node.get("Index Name") in partial
                    or (node["Node Type"] == "Bitmap Heap Scan" and "Recheck Cond" in node)
                )
                assert bounded, (
                    f"{name} reads {table} unbounded: {node['Node Type']} {node.get('Index Name')}"
                )


def test_ocr_pages_and_seconds_are_counted_and_a_bad_layout_is_no_refused_write(
    database_url: str, store: InvoiceStore
) -> None:
    """OCR's own record of each page's seconds (documents/ocr.py `OcrLayout.to_structured`) is
    summed; a layout that is not JSON counts its pages but no seconds, and is still written."""
    ids = [
        store.documents.store_document(json_invoice(f"OC-{n}"), "acme", f"{n}.png").invoice_id
        for n in range(3)
    ]
    (job,) = claim_chunk(store, [(ids[0], None)], "test-ocr")
    layout = {
        "ocr": {"engine": "rapidocr", "pages": [{"page": 1, "seconds": 2.25}, {"page": 2, "seconds": 1.5}]}
    }
    rows_written = [
        (ids[0], "ocr-rapidocr", 2, json.dumps(layout)),
        (ids[1], "ocr-rapidocr", 1, "not json at all"),
        (ids[2], "pdf-text", 4, None),  # not OCR: not counted
    ]
    with psycopg.connect(database_url, autocommit=True) as conn:
        for invoice_id, method, pages, structured in rows_written:
            conn.execute(
                "INSERT INTO extracted_texts (invoice_id, job_id, format, method, page_count, text, structured) "
                "VALUES (%s, %s, 'png', %s, %s, 'text', %s)",
                (invoice_id, job.job_id, method, pages, structured),
            )
        assert rows(database_url, "SELECT count(*) FROM extracted_texts")[0][0] == 3
    got = scrape(store)
    assert got["invoice_pipeline_ocr_documents_total"][()] == 2
    assert got["invoice_pipeline_ocr_pages_total"][()] == 3
    assert got["invoice_pipeline_ocr_seconds_total"][()] == 3.75


def test_the_sweep_folds_the_deltas_where_nothing_scrapes(database_url: str, store: InvoiceStore) -> None:
    """Without scrapes the deltas would grow with every write; the sweep (every sensor tick and
    the schedule) folds them, and the totals are unchanged by the fold."""
    for n in range(3):
        store.documents.store_document(json_invoice(f"SW-{n}"), "acme", f"sw-{n}.json")
    assert rows(database_url, "SELECT count(*) FROM metric_count_deltas")[0][0] == 3
    report = sweep(InvoiceDatabase(database_url=database_url), None)
    assert report.metric_deltas_folded == 3 and not report.changed_anything
    assert rows(database_url, "SELECT count(*) FROM metric_count_deltas")[0][0] == 0
    assert scrape(store)["invoice_pipeline_invoices"][(("status", "pending"),)] == 3
