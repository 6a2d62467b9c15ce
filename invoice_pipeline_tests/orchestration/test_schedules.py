from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import psycopg
from dagster import DagsterInstance, DagsterRunStatus, build_schedule_context

from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.jobs import process_invoice
from invoice_pipeline.orchestration.run_requests import run_owner
from invoice_pipeline.orchestration.schedules import sweep_stale_locks_schedule
from invoice_pipeline_tests.factories import pipeline_resources
from invoice_pipeline_tests.support import db_seconds_since
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import wait_for


def started_run(instance: DagsterInstance) -> str:
    config = {"ops": {"start": {"config": {"invoice_id": "00000000-0000-0000-0000-000000000000"}}}}
    return instance.create_run_for_job(
        job_def=process_invoice, run_config=config, status=DagsterRunStatus.STARTED
    ).run_id


def evaluate(database_url: str, instance: DagsterInstance, **db: object) -> str:
    resources = pipeline_resources(database_url, **db)
    # As a context manager: the context enters an instance of its own (from the ref), and only
    # its exit sets Dagster's current defs-state storage back (conftest checks this).
    with build_schedule_context(
        instance=instance, resources={"invoice_db": resources["invoice_db"]}
    ) as context:
        data = sweep_stale_locks_schedule.evaluate_tick(context)
    assert not data.run_requests
    return str(data.skip_message)


def wait_stale(database_url: str, job_id: object, seconds: float) -> None:
    wait_for(
        lambda: (
            db_seconds_since(
                database_url, "SELECT heartbeat_at FROM processing_jobs WHERE id = %s", (job_id,)
            )
            > seconds
        ),
        what="the lease to go stale on the DB clock",
    )


def test_sweeps_reconciles_the_dead_run_and_makes_its_invoice_due_at_once(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    instance = DagsterInstance.local_temp(str(tmp_path))
    run_id = started_run(instance)
    inv = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    lease = store.claims.acquire(inv, 1, owner=run_owner(run_id))
    assert lease is not None
    live_run_id = started_run(instance)
    live_inv = store.documents.store_document(json_invoice("LIVE"), "acme", "b.json").invoice_id
    assert store.claims.acquire(live_inv, 1, owner=run_owner(live_run_id)) is not None

    # A 60 s TTL, and the dead holder's silence simulated by back-dating its heartbeat (as
    # test_kill_process does): with a 1 s TTL both fresh leases had to be swept-checked within
    # 1 s of their acquire or heartbeat, so a test slowed by ~1 s swept a live lease and failed
    # (checked by delaying evaluate() 1.1 s: "swept 2 stale lock(s); marked 2 dead run(s)").
    assert "swept 0 stale lock" in evaluate(database_url, instance, lock_ttl_seconds=60)
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "UPDATE processing_jobs SET heartbeat_at = heartbeat_at - interval '1 hour' WHERE id = %s",
            (lease.job_id,),
        )
    wait_stale(database_url, lease.job_id, 60)
    store.claims.heartbeat(store.claims.current_holder(live_inv).job_id)  # type: ignore[union-attr]
    message = evaluate(database_url, instance, lock_ttl_seconds=60, retry_base_seconds=60)
    assert message.startswith(
        "swept 1 stale lock(s) and 0 stale export lease(s); marked 1 dead run(s) failed; scheduled 1 retry"
    )

    dead = instance.get_run_by_id(run_id)
    assert dead is not None and dead.status == DagsterRunStatus.FAILURE
    failure_text = "\n".join(e.message for e in instance.all_logs(run_id))
    assert "presumed dead" in failure_text and str(lease.job_id) in failure_text
    still = instance.get_run_by_id(live_run_id)
    assert still is not None and still.status == DagsterRunStatus.STARTED, "a heartbeating run is left alone"

    state = store.documents.invoice_state(inv)
    assert (
        state is not None
        and state.status == "failed"
        and state.last_error
        and state.last_error.startswith("swept:")
    )
    # A dead holder left no error to back off from (retry_base is 60 s here): due at once.
    assert [d.invoice_id for d in store.claims.claim_due_invoices(10)] == [inv]


def test_backoff_doubles_per_attempt_and_dead_letters_after_max(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    instance = DagsterInstance.local_temp(str(tmp_path))
    inv = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    delays = []
    for attempt in (1, 2, 3):
        lease = store.claims.acquire(inv, attempt)
        assert lease is not None
        # What a failed op does on its last try when a step fails with an error.
        store.claims.fail(lease.job_id, "boom", max_attempts=3, retry_base=timedelta(seconds=10))
        message = evaluate(database_url, instance, lock_ttl_seconds=1, retry_base_seconds=10, max_attempts=3)
        state = store.documents.invoice_state(inv)
        assert state is not None
        if attempt < 3:
            assert state.status == "failed", message
            with psycopg.connect(database_url) as conn:
                row = conn.execute(
                    "SELECT extract(epoch FROM next_attempt_at - updated_at) FROM invoices WHERE id = %s",
                    (inv,),
                ).fetchone()
            assert row is not None
            delays.append(round(float(row[0])))
        else:
            assert state.status == "needs_attention", message
    assert delays == [10, 20]
    assert store.claims.claim_due_invoices(10) == [], "a dead-lettered invoice is not requested again"


def test_request_no_run_claimed_expires_into_a_retry_under_a_new_run_key(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    """A run that died before claiming leaves its run key used; the retry must not reuse it."""
    instance = DagsterInstance.local_temp(str(tmp_path))
    lost = store.documents.store_document(json_invoice("LOST"), "acme", "lost.json").invoice_id
    queued = store.documents.store_document(json_invoice("QUEUED"), "acme", "queued.json").invoice_id
    requested = {d.invoice_id for d in store.claims.claim_due_invoices(10)}
    assert requested == {lost, queued}
    instance.create_run_for_job(
        job_def=process_invoice,
        run_config={"ops": {"start": {"config": {"invoice_id": str(queued)}}}},
        status=DagsterRunStatus.STARTING,  # launched, not yet claiming
    )
    assert store.claims.claim_due_invoices(10) == [], "a request is made once"
    wait_for(
        lambda: (
            db_seconds_since(database_url, "SELECT requested_at FROM invoices WHERE id = %s", (lost,)) > 1.1
        ),
        what="the request to be older than its 1 s timeout on the DB clock",
    )
    message = evaluate(database_url, instance, request_timeout_seconds=1, retry_base_seconds=0)
    assert message.endswith("1 unclaimed request(s) expired"), message
    state = store.documents.invoice_state(lost)
    assert state is not None and state.status == "failed" and state.attempts == 1
    assert state.last_error is not None and "never claimed the invoice" in state.last_error
    still = store.documents.invoice_state(queued)
    assert still is not None and still.status == "pending" and still.attempts == 0, (
        "its run is still starting"
    )
    (retry,) = store.claims.claim_due_invoices(10)
    assert (retry.invoice_id, retry.attempt) == (lost, 2), "the retry's run key is invoice:<id>:attempt:2"


def test_started_run_that_died_without_a_lease_is_marked_failed_once_silent_past_the_ttl(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    """A worker killed before claiming (or after releasing) leaves no lease to sweep."""
    instance = DagsterInstance.local_temp(str(tmp_path))
    run_id = started_run(instance)
    assert "marked 0 dead run(s)" in evaluate(database_url, instance, lock_ttl_seconds=3600)

    def reconciled() -> bool:
        return "marked 1 dead run(s) failed" in evaluate(database_url, instance, lock_ttl_seconds=1)

    wait_for(
        reconciled, timeout=30, interval=0.2, what="the silent run to pass the 1 s TTL and be reconciled"
    )
    run = instance.get_run_by_id(run_id)
    assert run is not None and run.status == DagsterRunStatus.FAILURE
    assert "holds no lease and has logged nothing" in "\n".join(e.message for e in instance.all_logs(run_id))
