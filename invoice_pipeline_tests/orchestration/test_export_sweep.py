"""The one sweep (the `sweep` command and the sweep_stale_locks schedule) frees export leases
too, not only each delivery at its start (issue 56): a dead deliverer's batch is released even
when no delivery runs, and a delivery run whose lease was swept is marked failed, so that
exports_due_sensor, which waits while a delivery run is in flight, launches the next one.
Silence is simulated by back-dating the heartbeat, never by waiting."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from uuid import UUID

import pytest
from dagster import DagsterInstance, DagsterRunStatus, EventLogEntry

from invoice_pipeline.engine.export_records import Delivery, ExportLease, ExportTarget
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.export_jobs import deliver_exports
from invoice_pipeline.orchestration.run_requests import run_owner
from invoice_pipeline_tests.engine.exports.helpers import datev_target, post_invoices, sql
from invoice_pipeline_tests.orchestration.test_schedules import evaluate
from pipeline_support.helpers import cli_environment, run_cli


def two_leases(store: InvoiceStore, target: ExportTarget, owners: tuple[str, str]) -> list[ExportLease]:
    """Two batches of one row, each claimed by its owner: one lease each."""
    leases = []
    for owner in owners:
        batch = store.exports.claim_batch(target, owner)
        assert batch is not None and len(batch.leases) == 1
        leases.append(batch.leases[0])
    return leases


def back_date(database_url: str, job_id: UUID) -> None:
    sql(
        database_url,
        "UPDATE export_jobs SET heartbeat_at = heartbeat_at - interval '1 hour' WHERE id = %s",
        (job_id,),
    )


def job_state(database_url: str, job_id: UUID) -> tuple[str, str]:
    ((status, error),) = sql(
        database_url, "SELECT status, coalesce(error, '') FROM export_jobs WHERE id = %s", (job_id,)
    )
    return str(status), str(error)


def test_the_sweep_schedule_frees_a_stale_export_lease_and_fails_its_dead_delivery_run(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    instance = DagsterInstance.local_temp(str(tmp_path))
    books = datev_target(store, "acme", tmp_path / "books", batch_size=1)
    post_invoices(store, "acme", 2)
    dead_run, live_run = (
        instance.create_run_for_job(job_def=deliver_exports, status=DagsterRunStatus.STARTED).run_id
        for _ in range(2)
    )
    dead, live = two_leases(store, books, (run_owner(dead_run), run_owner(live_run)))
    fresh = evaluate(database_url, instance, lock_ttl_seconds=60)
    assert fresh.startswith("swept 0 stale lock(s) and 0 stale export lease(s); marked 0 dead run(s)"), fresh

    back_date(database_url, dead.job_id)
    message = evaluate(database_url, instance, lock_ttl_seconds=60)
    assert message.startswith("swept 0 stale lock(s) and 1 stale export lease(s); marked 1 dead run(s)"), (
        message
    )
    status, error = job_state(database_url, dead.job_id)
    assert status == "failed" and error.startswith("swept:")
    assert job_state(database_url, live.job_id) == ("running", ""), "a heartbeating lease is left alone"

    failed = instance.get_run_by_id(dead_run)
    assert failed is not None and failed.status == DagsterRunStatus.FAILURE
    log = "\n".join(e.message for e in instance.all_logs(dead_run))
    assert "presumed dead" in log and str(dead.export_id) in log
    running = instance.get_run_by_id(live_run)
    assert running is not None and running.status == DagsterRunStatus.STARTED
    # The swept row is due again, for the next claim: the same batch.
    again = store.exports.claim_batch(books, "next")
    assert again is not None and [lease.export_id for lease in again.leases] == [dead.export_id]
    assert again.batch_id == dead.batch_id


def test_the_sweep_command_frees_a_stale_export_lease_and_leaves_a_fresh_one(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    books = datev_target(store, "acme", tmp_path / "books", batch_size=1)
    post_invoices(store, "acme", 2)
    dead, live = two_leases(store, books, ("dead-deliverer", "live-deliverer"))
    with cli_environment(tmp_path / "home", database_url) as env:
        fresh = run_cli("sweep", env=env)
        assert fresh.returncode == 0, fresh.stderr
        assert "and 0 stale export lease(s)" in fresh.stdout, fresh.stdout
        back_date(database_url, dead.job_id)
        swept = run_cli("sweep", env=env)
    assert swept.returncode == 0, swept.stderr
    assert "and 1 stale export lease(s)" in swept.stdout, swept.stdout
    assert job_state(database_url, dead.job_id)[0] == "failed"
    assert job_state(database_url, live.job_id) == ("running", "")


@pytest.mark.parametrize("between_batches", [True, False])
def test_a_silent_delivery_run_is_dead_only_when_it_finished_no_lease_within_the_ttl(
    database_url: str, store: InvoiceStore, tmp_path: Path, between_batches: bool
) -> None:
    """A live delivery run logs nothing from its first batch to its last: its last event may be
    long past while it works. Its silence counts from its last lease's finish too, so a run
    between two batches is left alone; one that never claimed is found dead."""
    instance = DagsterInstance.local_temp(str(tmp_path))
    books = datev_target(store, "acme", tmp_path / "books", batch_size=1)
    post_invoices(store, "acme", 2)
    run_id = instance.create_run_for_job(job_def=deliver_exports, status=DagsterRunStatus.STARTED).run_id
    # Its step's start, an hour ago (back-dated, not waited for).
    instance.store_event(
        EventLogEntry(
            None, logging.DEBUG, "step started", run_id, time.time() - 3600, job_name=deliver_exports.name
        )
    )
    if between_batches:
        batch = store.exports.claim_batch(books, run_owner(run_id))
        assert batch is not None
        (lease,) = batch.leases
        store.exports.record(batch.leases, [Delivery(lease.export_id, "delivered", "written")])
    message = evaluate(database_url, instance, lock_ttl_seconds=60)
    run = instance.get_run_by_id(run_id)
    assert run is not None
    if between_batches:
        assert "marked 0 dead run(s)" in message and run.status == DagsterRunStatus.STARTED, message
    else:
        assert "marked 1 dead run(s)" in message and run.status == DagsterRunStatus.FAILURE, message
        assert "it holds no lease and has logged nothing for 36" in "\n".join(
            e.message for e in instance.all_logs(run_id)
        )
