"""The jobs a person launches from the UI and the sensor launches by itself.

Executor: in-process, deliberately. The lease and its heartbeat thread belong to the run's
process; the stages are mostly database round trips, and the multiprocess executor would
start a Python interpreter per stage (seconds each) for no isolation we need — the run, not
the stage, is the unit that dies and is recovered. A backlog goes through one batched run with
dynamic fan-out instead of one process per invoice.
"""

from __future__ import annotations

from typing import Any

from dagster import GraphDefinition, JobDefinition, graph, in_process_executor

from invoice_pipeline.ops import (
    InvoiceRef,
    approve,
    claim,
    detect_duplicates,
    extract_fields,
    extract_text,
    fan_out,
    post_to_ledger,
    release,
    release_lock_on_failure,
    start,
    validate,
)

PROCESS_INVOICE = "process_invoice"
PROCESS_INVOICE_BATCH = "process_invoice_batch"


@graph(description="One invoice through every stage, under its durable lock.")
def process_one(ref: InvoiceRef) -> None:
    release(post_to_ledger(approve(detect_duplicates(validate(extract_fields(extract_text(claim(ref))))))))


@graph(name=PROCESS_INVOICE)
def process_invoice_graph() -> None:
    process_one(start())


@graph(name=PROCESS_INVOICE_BATCH)
def process_invoice_batch_graph() -> None:
    fan_out().map(process_one)


def make_jobs(resources: dict[str, Any] | None = None) -> tuple[JobDefinition, JobDefinition]:
    """Both jobs; `resources` binds them for execute_in_process and run workers alike."""

    def build(g: GraphDefinition, description: str) -> JobDefinition:
        return g.to_job(
            description=description,
            executor_def=in_process_executor,
            hooks={release_lock_on_failure},
            resource_defs=resources,
        )

    return (
        build(process_invoice_graph, "Process one invoice (config: invoice_id, optional attempt)."),
        build(
            process_invoice_batch_graph,
            "Process many invoices in one run; one lock and one branch per invoice.",
        ),
    )


process_invoice, process_invoice_batch = make_jobs()
