"""The jobs a person launches from the UI and the sensor launches by itself.

Executor: in-process, deliberately. The lease and its heartbeat thread belong to the run's
process; the stages are mostly database round trips, and the multiprocess executor would
start a Python interpreter per stage (seconds each) for no isolation we need — the run, not
the stage, is the unit that dies and is recovered. A backlog goes through one batched run that
fans out over chunks: a chunk is claimed in one statement, and each stage works, writes and
materializes it as a whole.
"""

from __future__ import annotations

from typing import Any

from dagster import GraphDefinition, JobDefinition, graph, in_process_executor

from invoice_pipeline.engine.runs import InvoiceRef
from invoice_pipeline.orchestration.ops import STAGE_OPS, Chunk, claim, fan_out, release, start
from invoice_pipeline.orchestration.run_requests import PROCESS_INVOICE, PROCESS_INVOICE_BATCH


@graph(description="A chunk of invoices through every stage, under their durable locks.")
def process_chunk(refs: list[InvoiceRef]) -> None:
    chunk: Chunk = claim(refs)
    for stage_op in STAGE_OPS:
        chunk = stage_op(chunk)
    release(chunk)


@graph(name=PROCESS_INVOICE)
def process_invoice_graph() -> None:
    process_chunk(start())


@graph(name=PROCESS_INVOICE_BATCH)
def process_invoice_batch_graph() -> None:
    fan_out().map(process_chunk)


def make_jobs(resources: dict[str, Any] | None = None) -> tuple[JobDefinition, JobDefinition]:
    """Both jobs; `resources` binds them for execute_in_process and run workers alike."""

    def build(g: GraphDefinition, description: str) -> JobDefinition:
        return g.to_job(
            description=description,
            executor_def=in_process_executor,
            resource_defs=resources,
        )

    return (
        build(process_invoice_graph, "Process one invoice (config: invoice_id, optional attempt)."),
        build(
            process_invoice_batch_graph,
            "Process many invoices in one run, in chunks (config: invoice_ids, attempts, chunk_size).",
        ),
    )


process_invoice, process_invoice_batch = make_jobs()
