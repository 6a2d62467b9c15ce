"""Launch, fail, re-execute from failure and watch the sensor — through the GraphQL API the UI uses."""

from __future__ import annotations

import psycopg
from dagster import DagsterRunStatus
from dagster_graphql import DagsterGraphQLClient

from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.orchestration.ui.conftest import DevServer, hide_from_sensor
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import wait_for

TERMINAL = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}

REEXECUTE = """
mutation Reexecute($parentRunId: String!) {
  launchRunReexecution(reexecutionParams: {parentRunId: $parentRunId, strategy: FROM_FAILURE}) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""

STEP_STATS = """
query Steps($runId: ID!) {
  runOrError(runId: $runId) { ... on Run { stepStats { stepKey status } } }
}
"""

RUNS_WITH_TAG = """
query Runs($value: String!) {
  runsOrError(filter: {tags: [{key: "invoice_id", value: $value}]}) {
    ... on Runs { results { runId status jobName } }
  }
}
"""


def client(server: DevServer) -> DagsterGraphQLClient:
    return DagsterGraphQLClient("127.0.0.1", port_number=server.port)


def wait_terminal(gql: DagsterGraphQLClient, run_id: str) -> DagsterRunStatus:
    return wait_for(
        lambda: (s := gql.get_run_status(run_id)) in TERMINAL and s,
        timeout=240,
        interval=0.5,
        what=f"run {run_id} to finish",
    )


def launch(gql: DagsterGraphQLClient, invoice_id: object) -> str:
    return gql.submit_job_execution(
        "process_invoice",
        run_config={"ops": {"start": {"config": {"invoice_id": str(invoice_id)}}}},
        tags={"invoice_id": str(invoice_id), "launched_by": "test"},
    )


def test_launch_process_invoice_to_success(dev_server: DevServer, dev_store: InvoiceStore) -> None:
    inv = dev_store.documents.store_document(json_invoice("GQL-7201"), "acme", "gql1.json").invoice_id
    hide_from_sensor(dev_server.database_url, inv)
    gql = client(dev_server)
    run_id = launch(gql, inv)
    assert wait_terminal(gql, run_id) == DagsterRunStatus.SUCCESS
    assert dev_store.documents.invoice_state(inv).status == "processed"  # type: ignore[union-attr]


def test_reexecute_from_failure_skips_completed_steps(dev_server: DevServer, dev_store: InvoiceStore) -> None:
    inv = dev_store.documents.store_document(
        json_invoice("GQL-7202", total="77.00"), "acme", "gql2.json"
    ).invoice_id
    hide_from_sensor(dev_server.database_url, inv)
    gql = client(dev_server)
    with psycopg.connect(dev_server.database_url, autocommit=True) as conn:
        conn.execute(
            "ALTER TABLE ledger_postings RENAME TO ledger_postings_unavailable"
        )  # the ledger is down
        try:
            parent = launch(gql, inv)
            assert wait_terminal(gql, parent) == DagsterRunStatus.FAILURE
        finally:
            conn.execute("ALTER TABLE ledger_postings_unavailable RENAME TO ledger_postings")  # and back
    assert dev_store.documents.load_ledger_posting(inv) is None
    result = gql._execute(REEXECUTE, {"parentRunId": parent})["launchRunReexecution"]
    assert result["__typename"] == "LaunchRunSuccess", result
    child = result["run"]["runId"]
    assert wait_terminal(gql, child) == DagsterRunStatus.SUCCESS

    steps = {
        s["stepKey"]: s["status"]
        for s in gql._execute(STEP_STATS, {"runId": child})["runOrError"]["stepStats"]
    }
    assert set(steps) == {"process_chunk.post_to_ledger", "process_chunk.release"}, steps
    assert dev_store.documents.count_step_executions(inv, "extract_text") == 1, (
        "completed steps were not re-run"
    )
    assert dev_store.documents.load_ledger_posting(inv) is not None
    state = dev_store.documents.invoice_state(inv)
    assert state is not None and state.status == "processed"
    assert [j.status for j in dev_store.claims.job_history(inv)] == ["failed", "succeeded"]


def test_sensor_launches_a_run_for_a_newly_ingested_invoice(
    dev_server: DevServer, dev_store: InvoiceStore
) -> None:
    inv = dev_store.documents.store_document(
        json_invoice("SENSOR-7301", total="12.00"), "acme", "sensor.json"
    ).invoice_id
    gql = client(dev_server)

    def sensor_run() -> list[dict[str, str]]:
        return gql._execute(RUNS_WITH_TAG, {"value": str(inv)})["runsOrError"]["results"]

    (run,) = wait_for(
        sensor_run, timeout=180, interval=1, what="the sensor to launch a run for the new invoice"
    )
    assert run["jobName"] == "process_invoice"
    assert wait_terminal(gql, run["runId"]) == DagsterRunStatus.SUCCESS
    assert dev_store.documents.invoice_state(inv).status == "processed"  # type: ignore[union-attr]


def test_inbox_file_becomes_a_processed_invoice_without_a_click(
    dev_server: DevServer, dev_store: InvoiceStore
) -> None:
    inbox = dev_server.home / "inbox" / "globex"
    inbox.mkdir(parents=True, exist_ok=True)
    (inbox / "dropped.json").write_bytes(json_invoice("INBOX-7401", total="33.00"))

    def processed() -> bool:
        with psycopg.connect(dev_server.database_url) as conn:
            row = conn.execute(
                "SELECT status FROM invoices WHERE source_filename = 'dropped.json' AND org_id = 'globex'"
            ).fetchone()
        return bool(row and row[0] == "processed")

    wait_for(processed, timeout=240, interval=1, what="the dropped file to be ingested and processed")
