"""A person's review and redrive from the Dagster UI: the Launchpad's jobs, through its GraphQL API,
against a real `invoice-pipeline dev` (webserver, daemon, sensor)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from dagster import DagsterRunStatus
from dagster_graphql import DagsterGraphQLClient

from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples import review_cases
from invoice_pipeline_tests.engine.review.helpers import make_dead_letter, postings, render, sample
from invoice_pipeline_tests.orchestration.ui.conftest import DevServer, hide_from_sensor
from invoice_pipeline_tests.orchestration.ui.test_graphql import client, launch, wait_terminal
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import wait_for

RUN_LOGS = """
query Logs($runId: ID!) {
  logsForRun(runId: $runId) {
    __typename
    ... on EventConnection {
      events {
        __typename
        ... on MessageEvent { message }
        ... on ExecutionStepFailureEvent { error { message } }
        ... on RunFailureEvent { error { message } }
      }
    }
  }
}
"""


def run_text(gql: DagsterGraphQLClient, run_id: str) -> str:
    """Everything a person reads in the run's log view, failures' error messages included."""
    events: list[dict[str, Any]] = gql._execute(RUN_LOGS, {"runId": run_id})["logsForRun"]["events"]
    parts = [e.get("message") or "" for e in events]
    parts += [(e.get("error") or {}).get("message") or "" for e in events]
    return "\n".join(parts)


def status_of(store: InvoiceStore, invoice_id: UUID) -> str:
    state = store.documents.invoice_state(invoice_id)
    return state.status if state else "gone"


def test_approve_from_the_launchpad_posts_the_held_invoice_once(
    dev_server: DevServer, dev_store: InvoiceStore
) -> None:
    content = render(review_cases.negative_invoice(sample("UI-NEG-1")), "ubl")
    invoice_id = dev_store.documents.store_document(content, "acme", "ui-negative.xml").invoice_id
    # The sensor processes it by itself and holds it for a person.
    wait_for(
        lambda: status_of(dev_store, invoice_id) == "needs_review",
        timeout=240,
        interval=0.5,
        what="the sensor's run to hold the negative invoice",
    )
    gql = client(dev_server)
    run_id = gql.submit_job_execution(
        "review_invoice",
        run_config={
            "ops": {
                "review_invoices": {
                    "config": {
                        "decision": "approve",
                        "invoice_ids": [str(invoice_id)],
                        "note": "refund agreed",
                        "reviewer": "ui-test",
                    }
                }
            }
        },
    )
    assert wait_terminal(gql, run_id) == DagsterRunStatus.SUCCESS, run_text(gql, run_id)
    # The approval made it due: the sensor launches process_invoice, which posts it.
    wait_for(
        lambda: status_of(dev_store, invoice_id) == "processed",
        timeout=240,
        interval=0.5,
        what="the approved invoice to be processed",
    )
    assert postings(dev_server.database_url, invoice_id) == 1
    (audit,) = dev_store.review.review_history(invoice_id)
    assert audit.action == "approve" and audit.actor == f"dagster-run:{run_id} (ui-test)"


def test_dead_letter_is_not_redriven_by_process_invoice_but_by_requeue_invoices(
    dev_server: DevServer, dev_store: InvoiceStore
) -> None:
    invoice_id = dev_store.documents.store_document(
        json_invoice("UI-DL-7501", total="42.00"), "acme", "dl.json"
    ).invoice_id
    hide_from_sensor(dev_server.database_url, invoice_id)
    make_dead_letter(dev_server.database_url, invoice_id)
    assert status_of(dev_store, invoice_id) == "needs_attention"
    gql = client(dev_server)

    by_hand = launch(gql, invoice_id)
    assert wait_terminal(gql, by_hand) == DagsterRunStatus.FAILURE
    assert "requeue_invoices" in run_text(gql, by_hand), "the failure says how to redrive it"
    assert status_of(dev_store, invoice_id) == "needs_attention"

    run_id = gql.submit_job_execution(
        "requeue_invoices",
        run_config={
            "ops": {"requeue": {"config": {"invoice_ids": [str(invoice_id)], "note": "ledger back"}}}
        },
    )
    assert wait_terminal(gql, run_id) == DagsterRunStatus.SUCCESS, run_text(gql, run_id)
    wait_for(
        lambda: status_of(dev_store, invoice_id) == "processed",
        timeout=240,
        interval=0.5,
        what="the sensor to process the requeued invoice",
    )
    assert postings(dev_server.database_url, invoice_id) == 1
    (audit,) = dev_store.review.review_history(invoice_id)
    assert (audit.action, audit.from_status, audit.to_status) == ("requeue", "needs_attention", "pending")


def test_a_refused_review_fails_its_run_with_the_reason(
    dev_server: DevServer, dev_store: InvoiceStore
) -> None:
    invoice_id = dev_store.documents.store_document(
        json_invoice("UI-OK-7601", total="10.00"), "acme", "ok.json"
    ).invoice_id
    wait_for(
        lambda: status_of(dev_store, invoice_id) == "processed",
        timeout=240,
        interval=0.5,
        what="the sensor to process the invoice",
    )
    gql = client(dev_server)
    run_id = gql.submit_job_execution(
        "review_invoice",
        run_config={
            "ops": {
                "review_invoices": {
                    "config": {"decision": "reject", "invoice_ids": [str(invoice_id)], "note": "x"}
                }
            }
        },
    )
    assert wait_terminal(gql, run_id) == DagsterRunStatus.FAILURE
    assert "it is processed" in run_text(gql, run_id)
    assert dev_store.review.review_history(invoice_id) == []
