"""Asset checks fail on a broken invariant (broken here on purpose) and pass otherwise; reports compute."""

from __future__ import annotations

from datetime import timedelta

import psycopg
from dagster import DagsterEventType

from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.definitions import make_definitions
from invoice_pipeline.orchestration.jobs import make_jobs
from invoice_pipeline_tests.factories import pipeline_resources
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import wait_for


def check_results(database_url: str, **db: object) -> dict[str, tuple[bool, str]]:
    job = make_definitions(pipeline_resources(database_url, **db)).resolve_job_def("check_invariants")
    result = job.execute_in_process(raise_on_error=False)
    evaluations = [
        e.event_specific_data
        for e in result.all_events
        if e.event_type == DagsterEventType.ASSET_CHECK_EVALUATION
    ]
    return {
        ev.check_name: (ev.passed, str(ev.metadata.get("offending_ids").value))  # type: ignore[union-attr]
        for ev in evaluations
    }


def process(database_url: str, store: InvoiceStore, *docs: bytes) -> list[object]:
    job, _ = make_jobs(pipeline_resources(database_url))
    ids = []
    for i, doc in enumerate(docs):
        inv = store.documents.store_document(doc, "acme", f"{i}.json").invoice_id
        assert job.execute_in_process(
            run_config={"ops": {"start": {"config": {"invoice_id": str(inv)}}}}
        ).success
        ids.append(inv)
    return ids


def test_checks_pass_on_a_healthy_database(database_url: str, store: InvoiceStore) -> None:
    process(database_url, store, json_invoice("A-1"), json_invoice("a 1"), json_invoice("B-2", total="50.00"))
    results = check_results(database_url)
    assert results == {name: (True, "") for name in results} and len(results) == 6


def test_copy_posted_check_names_the_copy(database_url: str, store: InvoiceStore) -> None:
    _, copy = process(database_url, store, json_invoice("A-1"), json_invoice("a 1"))
    assert results_ok(check_results(database_url))
    with psycopg.connect(database_url) as conn:
        # What a pipeline that ignored the duplicate decision would do.
        conn.execute(
            "INSERT INTO ledger_postings (invoice_id, job_id, org_id, amount, currency)"
            " SELECT invoice_id, id, 'acme', 119, 'EUR' FROM processing_jobs WHERE invoice_id = %s",
            (copy,),
        )
    assert check_results(database_url)["no_copy_posted"] == (False, str(copy))


def results_ok(results: dict[str, tuple[bool, str]]) -> bool:
    return all(passed for passed, _ in results.values())


def test_each_check_fails_with_the_offending_ids_when_broken(database_url: str, store: InvoiceStore) -> None:
    original, copy = process(database_url, store, json_invoice("A-1"), json_invoice("a 1"))
    stale = store.documents.store_document(json_invoice("S-1"), "acme", "s.json").invoice_id
    lease = store.claims.acquire(stale, 1)
    assert lease is not None
    with psycopg.connect(database_url) as conn:
        # Bypass every safeguard on purpose, as a buggy migration or a hand edit could.
        conn.execute("ALTER TABLE ledger_postings DROP CONSTRAINT ledger_postings_invoice_id_key")
        conn.execute(
            "INSERT INTO ledger_postings (invoice_id, job_id, org_id, amount, currency)"
            " SELECT invoice_id, job_id, org_id, amount, currency FROM ledger_postings WHERE invoice_id = %s",
            (original,),
        )
        conn.execute("DROP INDEX invoices_one_original_per_key")
        conn.execute(
            "UPDATE invoices SET duplicate_status = 'original', duplicate_of = NULL WHERE id = %s", (copy,)
        )
        conn.execute("UPDATE invoices SET created_at = now() - interval '2 days' WHERE id = %s", (stale,))
    # The lease above must still be fresh when the check runs: a 1 s TTL made that a race with
    # make_definitions + the check job (~0.2 s idle, more on a loaded box), so the "fresh lease"
    # assertion below failed whenever the test was slowed by 0.8 s (checked by delaying
    # check_results() 0.9 s: "a fresh lease is not stale"). The stale case, with a 1 s TTL after
    # waiting on the DB clock, is test_stale_lock_check_names_the_job.
    results = check_results(database_url, lock_ttl_seconds=60)
    assert results["no_invoice_posted_twice"] == (False, str(original))
    (group,) = {
        r[0]
        for r in psycopg.connect(database_url).execute("SELECT id::text FROM duplicate_groups").fetchall()
    }
    assert results["one_original_per_duplicate_group"] == (False, group)
    assert results["no_stuck_invoices"] == (False, str(stale))
    assert results["no_stale_running_locks"] == (True, ""), "a fresh lease is not stale"


def test_stale_lock_check_names_the_job(database_url: str, store: InvoiceStore) -> None:
    inv = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    lease = store.claims.acquire(inv, 1)
    assert lease is not None
    assert check_results(database_url, lock_ttl_seconds=3600)["no_stale_running_locks"] == (True, "")
    with psycopg.connect(database_url) as conn:
        wait_for(
            lambda: conn.execute(
                "SELECT clock_timestamp() - heartbeat_at > %s FROM processing_jobs WHERE id = %s",
                (timedelta(seconds=1), lease.job_id),
            ).fetchone()[0],  # type: ignore[index]
            what="the lease to be older than 1 s on the DB clock",
        )
    assert check_results(database_url, lock_ttl_seconds=1)["no_stale_running_locks"] == (
        False,
        str(lease.job_id),
    )


def test_reports_compute_with_numeric_metadata(database_url: str, store: InvoiceStore) -> None:
    process(database_url, store, json_invoice("A-1"), json_invoice("a 1"), json_invoice("B-2", total="50.00"))
    job = make_definitions(pipeline_resources(database_url)).resolve_job_def("refresh_reports")
    result = job.execute_in_process()
    metadata = {
        m.asset_key.to_user_string(): {k: v.value for k, v in m.metadata.items()}  # type: ignore[union-attr]
        for m in result.asset_materializations_for_node("vendor_spend")
        + result.asset_materializations_for_node("duplicate_report")
        + result.asset_materializations_for_node("processing_latency")
    }
    assert metadata["vendor_spend"]["total_posted"] == 169.0 and metadata["vendor_spend"]["postings"] == 2
    assert (
        metadata["duplicate_report"]["duplicates"] == 1
        and metadata["duplicate_report"]["amount_at_risk"] == 119.0
    )
    assert (
        metadata["processing_latency"]["invoices"] == 3
        and metadata["processing_latency"]["mean_attempts"] == 1.0
    )
