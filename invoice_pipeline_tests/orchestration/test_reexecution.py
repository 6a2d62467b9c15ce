"""A run re-executed from failure (the UI's "Re-execute from failure") takes its parent's invoices
afresh, never a job another, maybe live, owner is running (issue 53).

The parent run fails at posting (the ledger table is away), releasing its lease; another owner
then claims the invoice and is running it when the parent is re-executed. The re-executed run
must refuse the invoice, leaving that owner's job as it was: adopting it would post the invoice
under a lease someone else holds and is working with.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from dagster import (
    DagsterInstance,
    JobDefinition,
    JobExecutionResult,
    ReexecutionOptions,
    execute_job,
    reconstructable,
)

from invoice_pipeline.engine.chunk_loop import claim_chunk
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.jobs import make_jobs
from invoice_pipeline_tests.factories import pipeline_resources
from pipeline_support.factories import json_invoice

# The test database's URL, for the job a re-execution rebuilds from its module (reconstructable);
# not an INVOICE_PIPELINE_ setting: only this test reads it.
DATABASE_URL_VAR = "REEXECUTION_TEST_DATABASE_URL"
ANOTHER_OWNER = "dagster-run:another-live-run"


def process_invoice_on_the_test_database() -> JobDefinition:
    job, _ = make_jobs(pipeline_resources(os.environ[DATABASE_URL_VAR], retry_base_seconds=0))
    return job


@contextmanager
def ledger_down(database_url: str) -> Iterator[None]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE ledger_postings RENAME TO ledger_postings_unavailable")
        try:
            yield
        finally:
            conn.execute("ALTER TABLE ledger_postings_unavailable RENAME TO ledger_postings")


def failures(result: JobExecutionResult) -> list[str]:
    return [
        e.step_failure_data.error.message
        for e in result.all_events
        if e.is_step_failure and e.step_failure_data.error is not None
    ]


def test_a_reexecuted_run_never_adopts_a_job_another_owner_runs(
    database_url: str, store: InvoiceStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATABASE_URL_VAR, database_url)
    inv = store.documents.store_document(json_invoice("RX-1"), "acme", "rx.json").invoice_id
    job = reconstructable(process_invoice_on_the_test_database)
    with DagsterInstance.local_temp(str(tmp_path)) as instance:
        with ledger_down(database_url):
            parent = execute_job(
                job,
                instance=instance,
                run_config={"ops": {"start": {"config": {"invoice_id": str(inv)}}}},
                raise_on_error=False,
            )
        assert not parent.success
        assert store.claims.current_holder(inv) is None, "the failed parent released its lease"

        (other,) = claim_chunk(store, [(inv, None)], ANOTHER_OWNER)
        child = execute_job(
            job,
            instance=instance,
            reexecution_options=ReexecutionOptions.from_failure(parent.run_id, instance),
            raise_on_error=False,
        )
        assert not child.success, "the re-executed run took an invoice another owner is running"
        messages = failures(child)
        assert any("re-executed run cannot take" in m and ANOTHER_OWNER in m for m in messages), messages

    holder = store.claims.current_holder(inv)
    assert holder is not None and (holder.job_id, holder.owner) == (other.job_id, ANOTHER_OWNER)
    with psycopg.connect(database_url) as conn:
        posted = conn.execute("SELECT count(*) FROM ledger_postings WHERE invoice_id = %s", (inv,)).fetchone()
        written = conn.execute(
            "SELECT count(*) FROM step_events WHERE job_id = %s", (other.job_id,)
        ).fetchone()
    assert posted == (0,) and written == (0,), "nothing written under the other owner's lease"
