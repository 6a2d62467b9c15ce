"""A request belongs to a run: when that run has ended or died unclaimed, the sweep frees it at once."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

import psycopg
import pytest
from dagster import DagsterInstance, DagsterRunStatus, build_sensor_context
from dagster._core.storage.tags import RUN_KEY_TAG as DAGSTER_RUN_KEY_TAG

from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.jobs import process_invoice, process_invoice_batch
from invoice_pipeline.orchestration.maintenance import run_maintenance
from invoice_pipeline.orchestration.request_owner import (
    REQUEST_TAG,
    RUN_KEY_TAG,
    RequestOwner,
    instance_scope,
)
from invoice_pipeline.orchestration.resources import InvoiceDatabase
from invoice_pipeline.orchestration.sensors import new_invoices_sensor
from invoice_pipeline_tests.factories import pipeline_resources
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import wait_for

HOUR = 3600


def sweep(database_url: str, instance: DagsterInstance, **config: object) -> str:
    settings: dict[str, object] = {
        "lock_ttl_seconds": HOUR,
        "retry_base_seconds": 0,
        "heartbeat_seconds": 0.2,
    }
    settings.update(config)
    return run_maintenance(InvoiceDatabase(database_url=database_url, **settings), instance).summary()  # type: ignore[arg-type]


def requested_by(database_url: str, invoice_id: object) -> str | None:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT requested_by FROM invoices WHERE id = %s", (invoice_id,)).fetchone()
    assert row is not None
    return None if row[0] is None else str(row[0])


def batch_run(
    instance: DagsterInstance, ids: list[UUID], tags: dict[str, str], status: DagsterRunStatus
) -> str:
    config = {"ops": {"fan_out": {"config": {"invoice_ids": [str(i) for i in ids]}}}}
    return instance.create_run_for_job(
        job_def=process_invoice_batch, run_config=config, tags=tags, status=status
    ).run_id


def test_owner_text_round_trips_and_names_dagsters_own_run_key_tag(tmp_path: Path) -> None:
    assert RUN_KEY_TAG == DAGSTER_RUN_KEY_TAG, "the tag the daemon puts on a sensor's runs"
    instance = DagsterInstance.local_temp(str(tmp_path))
    owner = RequestOwner.run_key(instance_scope(instance), "invoice:1f0c:attempt:2")
    assert RequestOwner.parse(owner.text) == owner
    assert RequestOwner.parse("someone else's text") is None
    again = DagsterInstance.from_config(str(tmp_path))
    assert RequestOwner.run_key(instance_scope(again), "k").instance_id == owner.instance_id, (
        "stable across processes"
    )


def test_requests_of_a_run_that_ended_without_claiming_are_released_in_the_next_sweep(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    """`invoice-pipeline process` killed between requesting and claiming (no run keys involved)."""
    instance = DagsterInstance.local_temp(str(tmp_path))
    ids = [
        store.documents.store_document(json_invoice(f"N-{i}"), "acme", f"{i}.json").invoice_id
        for i in range(3)
    ]
    owner = RequestOwner.tagged(instance_scope(instance), "token-1")
    assert [d.invoice_id for d in store.claims.claim_due_invoices(10, requested_by=owner.text)] == ids
    run_id = batch_run(instance, ids, {REQUEST_TAG: "token-1"}, DagsterRunStatus.STARTED)

    assert "released 0 request(s)" in sweep(database_url, instance), "its run is alive"
    assert store.claims.claim_due_invoices(10) == [], "still requested"

    run = instance.get_run_by_id(run_id)
    assert run is not None
    instance.report_run_failed(run, message="worker killed")
    message = sweep(database_url, instance)
    assert "released 3 request(s) of ended or dead runs" in message, message
    for invoice_id in ids:
        state = store.documents.invoice_state(invoice_id)
        assert state is not None and (state.status, state.attempts) == ("pending", 0), (
            "no attempt counted: no run key was used up"
        )
        assert state.last_error is not None and run_id in state.last_error
    assert [d.invoice_id for d in store.claims.claim_due_invoices(10)] == ids, (
        "due again at once, not in an hour"
    )


def test_a_sensor_request_is_released_as_a_failed_attempt_so_the_retry_gets_a_new_run_key(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    instance = DagsterInstance.local_temp(str(tmp_path))
    inv = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    resources = pipeline_resources(database_url)
    context = build_sensor_context(instance=instance, resources={"invoice_db": resources["invoice_db"]})
    (request,) = new_invoices_sensor.evaluate_tick(context).run_requests
    assert (
        requested_by(database_url, inv)
        == RequestOwner.run_key(instance_scope(instance), str(request.run_key)).text
    )
    # What the daemon does with the request, and how the run ends: dead before it claimed.
    instance.create_run_for_job(
        job_def=process_invoice,
        run_config=request.run_config,
        tags={**request.tags, DAGSTER_RUN_KEY_TAG: str(request.run_key)},
        status=DagsterRunStatus.FAILURE,
    )
    assert "released 1 request(s)" in sweep(database_url, instance)
    state = store.documents.invoice_state(inv)
    assert state is not None and (state.status, state.attempts) == ("failed", 1)
    (retry,) = new_invoices_sensor.evaluate_tick(context).run_requests
    assert retry.run_key == f"invoice:{inv}:attempt:2" != request.run_key


def test_a_request_whose_run_never_appeared_is_released_once_older_than_the_lock_ttl(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    """Killed after claiming, before execute_job created the run: there is no run to ask."""
    instance = DagsterInstance.local_temp(str(tmp_path))
    inv = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    store.claims.claim_due_invoices(
        10, requested_by=RequestOwner.tagged(instance_scope(instance), "never-launched").text
    )
    assert "released 0 request(s)" in sweep(database_url, instance, lock_ttl_seconds=60), (
        "a run may still be about to appear"
    )
    with psycopg.connect(database_url) as conn:  # a minute and a bit later, on the database clock
        conn.execute(
            "UPDATE invoices SET requested_at = requested_at - interval '61 seconds' WHERE id = %s", (inv,)
        )
    message = sweep(database_url, instance, lock_ttl_seconds=60)
    assert "released 1 request(s)" in message, message
    assert [d.invoice_id for d in store.claims.claim_due_invoices(10)] == [inv]


def test_another_instances_requests_are_left_to_that_instance(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    """Two deployments share the invoice database, not their Dagster instances."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    mine = DagsterInstance.local_temp(str(tmp_path / "a"))
    theirs = DagsterInstance.local_temp(str(tmp_path / "b"))
    inv = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    store.claims.claim_due_invoices(
        10, requested_by=RequestOwner.tagged(instance_scope(theirs), "queued-over-there").text
    )
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "UPDATE invoices SET requested_at = requested_at - interval '10 minutes' WHERE id = %s", (inv,)
        )
    assert "released 0 request(s)" in sweep(database_url, mine, lock_ttl_seconds=60)
    assert "released 1 request(s)" in sweep(database_url, theirs, lock_ttl_seconds=60)


@pytest.mark.parametrize(
    "status", [DagsterRunStatus.STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.NOT_STARTED]
)
def test_a_run_found_dead_has_its_requests_released_in_the_same_sweep(
    database_url: str, store: InvoiceStore, tmp_path: Path, status: DagsterRunStatus
) -> None:
    """Killed before claiming: no lease to sweep; presumed dead once silent past the TTL. Killed
    between creating its run and starting it, the run says NOT_STARTED or STARTING for ever
    (`kill -9` of `invoice-pipeline process`, or of a launched run worker): the same."""
    instance = DagsterInstance.local_temp(str(tmp_path))
    ids = [
        store.documents.store_document(json_invoice(f"D-{i}"), "acme", f"{i}.json").invoice_id
        for i in range(2)
    ]
    store.claims.claim_due_invoices(
        10, requested_by=RequestOwner.tagged(instance_scope(instance), "dies").text
    )
    run_id = batch_run(instance, ids, {REQUEST_TAG: "dies"}, status)

    def reconciled_and_released() -> str | None:
        message = sweep(database_url, instance, lock_ttl_seconds=1)
        return message if "marked 1 dead run(s) failed" in message else None

    message = wait_for(
        reconciled_and_released, timeout=30, interval=0.2, what="the silent run to pass its 1 s TTL"
    )
    assert "released 2 request(s) of ended or dead runs" in message, message
    run = instance.get_run_by_id(run_id)
    assert run is not None and run.status == DagsterRunStatus.FAILURE
    assert sorted(d.invoice_id for d in store.claims.claim_due_invoices(10)) == sorted(ids)


def test_claiming_clears_the_owner(database_url: str, store: InvoiceStore, tmp_path: Path) -> None:
    instance = DagsterInstance.local_temp(str(tmp_path))
    inv = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    store.claims.claim_due_invoices(10, requested_by=RequestOwner.tagged(instance_scope(instance), "t").text)
    assert requested_by(database_url, inv) is not None
    assert store.claims.acquire(inv, 1, owner="dagster-run:x") is not None
    assert requested_by(database_url, inv) is None, "a claimed request is no longer waiting for anyone"
    assert store.maintenance.open_request_owners() == []
