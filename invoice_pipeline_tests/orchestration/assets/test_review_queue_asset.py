"""The review-queue report asset (pandas) and its age check, through the code location's jobs."""

from __future__ import annotations

from dagster import DagsterEventType

from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.definitions import make_definitions
from invoice_pipeline_tests.engine.review.helpers import held_invoice, sql
from invoice_pipeline_tests.factories import pipeline_resources


def test_report_counts_by_reason_and_org_and_check_warns_on_age(
    database_url: str, store: InvoiceStore
) -> None:
    neg = "negative_total: payable -50.00 EUR on an invoice (type 380)"
    a = held_invoice(store, "north", "Q-1", [neg])
    held_invoice(store, "north", "Q-2", [neg, "due_before_issue: due before issue"])
    held_invoice(store, "south", "Q-3", ["due_before_issue: due before issue"])
    sql(database_url, "UPDATE invoices SET review_since = now() - interval '5 days' WHERE id = %s", (a,))
    defs = make_definitions(pipeline_resources(database_url))

    report = defs.resolve_job_def("refresh_reports").execute_in_process(raise_on_error=False)
    assert report.success
    (materialization,) = [
        e.event_specific_data.materialization  # type: ignore[union-attr]
        for e in report.all_events
        if e.event_type == DagsterEventType.ASSET_MATERIALIZATION
        and e.asset_key is not None
        and e.asset_key.to_user_string() == "review_queue"
    ]
    meta = {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
    assert meta["held_invoices"] == 3
    assert meta["reason_negative_total"] == 2 and meta["reason_due_before_issue"] == 2
    assert 4.9 < meta["oldest_days"] < 5.1
    assert "north" in meta["by_org"] and "south" in meta["by_org"]

    def check(max_age_days: float | None = None) -> tuple[bool, str, str]:
        config = (
            {"ops": {"review_queue_review_queue_not_overdue": {"config": {"max_age_days": max_age_days}}}}
            if max_age_days is not None
            else {}
        )
        job = defs.resolve_job_def("check_invariants")
        result = job.execute_in_process(raise_on_error=False, run_config=config)
        (evaluation,) = [
            e.event_specific_data
            for e in result.all_events
            if e.event_type == DagsterEventType.ASSET_CHECK_EVALUATION
            and e.event_specific_data.check_name == "review_queue_not_overdue"  # type: ignore[union-attr]
        ]
        return (
            evaluation.passed,  # type: ignore[union-attr]
            evaluation.severity.value,  # type: ignore[union-attr]
            str(evaluation.metadata["offending_ids"].value),  # type: ignore[union-attr]
        )

    assert check() == (False, "WARN", str(a)), "the default allows 3 days"
    assert check(7)[0] is True
