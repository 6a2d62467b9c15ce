"""The Dagster side of delivery (issue 56 item 2): the sensor asks for a delivery run only when
export rows are due and none is in flight; the job delivers them through the engine's loop and
materializes export_batches, downstream of ledger_postings."""

from __future__ import annotations

from pathlib import Path

from dagster import AssetKey, DagsterInstance, build_sensor_context

from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.definitions import make_definitions
from invoice_pipeline.orchestration.export_jobs import ASSET_EXPORTS, deliver_exports, exports_due_sensor
from invoice_pipeline.samples.receiver import WebhookReceiver
from invoice_pipeline_tests.engine.exports.helpers import (
    SECRET,
    datev_target,
    post_invoices,
    statuses,
    webhook_target,
)
from invoice_pipeline_tests.factories import pipeline_resources


def test_the_sensor_launches_a_delivery_run_when_rows_are_due_and_the_run_delivers(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    instance = DagsterInstance.local_temp(str(tmp_path))
    resources = pipeline_resources(database_url)
    context = build_sensor_context(instance=instance, resources={"invoice_db": resources["invoice_db"]})
    assert not exports_due_sensor.evaluate_tick(context).run_requests  # nothing due

    with WebhookReceiver(SECRET) as receiver:
        erp = webhook_target(store, "acme", receiver.url, tmp_path / "secret")
        books = datev_target(store, "acme", tmp_path / "books")
        post_invoices(store, "acme", 2)
        (request,) = exports_due_sensor.evaluate_tick(context).run_requests
        assert "acme/erp" in request.tags["export_targets"]

        job = make_definitions(resources).resolve_job_def(deliver_exports.name)
        result = job.execute_in_process(instance=instance)
    assert result.success
    assert statuses(database_url, erp) == {"delivered": 2} == statuses(database_url, books)
    assert len(receiver.booked()) == 2
    (event,) = instance.fetch_materializations(AssetKey(ASSET_EXPORTS), limit=10).records
    materialization = event.asset_materialization
    assert materialization is not None and materialization.metadata["delivered"].value == 4
    assert not exports_due_sensor.evaluate_tick(context).run_requests  # all delivered


def test_export_batches_is_downstream_of_the_ledger_in_the_lineage(database_url: str) -> None:
    defs = make_definitions(pipeline_resources(database_url))
    graph = defs.resolve_asset_graph()
    assert AssetKey("ledger_postings") in graph.get(AssetKey(ASSET_EXPORTS)).parent_keys
    assert defs.resolve_sensor_def(exports_due_sensor.name) is not None
