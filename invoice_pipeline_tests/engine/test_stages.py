"""The stages themselves (invoice_pipeline/engine/stages.py), called directly on a real PostgreSQL.

A chunk is claimed with `claim_chunk` and run through `process_chunk` / `run_stage`, with the
real document reader (in process) and the real store: no Dagster around the stages, no mock of
the database. What happens to one invoice mid-chunk is done to its rows in the database, from
inside the stage's own work (the reader's hook), while the other invoices of the chunk go on:

* a lease lost mid-chunk loses that invoice alone; the others are saved and finish;
* a write the database refuses for one invoice's data is retried an invoice at a time: that
  invoice fails with the database's reason and is rescheduled, the others are saved;
* a systemic error (the server drops the connection in the middle of the chunk's write) is
  not swallowed per invoice: it fails the stage, and through Dagster the whole op.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from uuid import UUID

import psycopg
import pytest
from dagster import DagsterEventType, DagsterInstance

from invoice_pipeline.config import DEFAULT_MAX_DOCUMENT_BYTES
from invoice_pipeline.documents import ExtractedText
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.engine.chunk_loop import claim_chunk, process_chunk
from invoice_pipeline.engine.stages import (
    STAGES,
    Claimed,
    Done,
    Failed,
    Lost,
    StageEnv,
    run_stage,
)
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.jobs import make_jobs
from invoice_pipeline.orchestration.ops import TRANSIENT_RETRY
from invoice_pipeline.orchestration.resources import DocumentReader
from invoice_pipeline_tests.engine.review.helpers import sql
from invoice_pipeline_tests.factories import pipeline_resources
from pipeline_support.factories import json_invoice

OWNER = "test-stages"
EXTRACT_TEXT, EXTRACT_FIELDS = STAGES[0], STAGES[1]


@dataclass
class Reader:
    """The real document reader, in process, with hooks that run inside the stage's work."""

    on_read_text: Callable[[str], None] | None = None
    on_read_fields: Callable[[InvoiceFields], InvoiceFields] | None = None
    inner: DocumentReader = field(default_factory=lambda: DocumentReader(isolate=False))

    def read_text(self, content: bytes, filename: str | None, max_bytes: int) -> ExtractedText:
        if self.on_read_text is not None:
            self.on_read_text(filename or "")
        return self.inner.read_text(content, filename, max_bytes)

    def read_fields(self, extracted: ExtractedText) -> InvoiceFields:
        fields = self.inner.read_fields(extracted)
        return fields if self.on_read_fields is None else self.on_read_fields(fields)


def stage_env(store: InvoiceStore, reader: Reader) -> StageEnv:
    return StageEnv(
        store=store,
        parser=reader,
        max_document_bytes=DEFAULT_MAX_DOCUMENT_BYTES,
        max_stage_seconds=120,
        max_attempts=3,
        retry_base=timedelta(minutes=1),
    )


def new_invoices(store: InvoiceStore, names: list[str]) -> dict[str, UUID]:
    """One invoice per name, each its own original (own number, own total)."""
    return {
        name: store.documents.store_document(
            json_invoice(f"ST-{name}", total=f"{100 + n}.00"), "acme", f"{name}.json"
        ).invoice_id
        for n, name in enumerate(names)
    }


def claim(store: InvoiceStore, ids: list[UUID]) -> list[Claimed]:
    chunk = claim_chunk(store, [(i, None) for i in ids], OWNER)
    assert [c.invoice_id for c in chunk] == ids, "the whole chunk is claimed"
    return chunk


def postings(database_url: str, invoice_id: UUID) -> int:
    rows = sql(database_url, "SELECT count(*) FROM ledger_postings WHERE invoice_id = %s", (invoice_id,))
    return int(rows[0][0])


def assert_finished(store: InvoiceStore, database_url: str, invoice_id: UUID) -> None:
    """Went through every stage of the chunk: saved, posted once, lock released as succeeded."""
    state = store.documents.invoice_state(invoice_id)
    assert state is not None and state.status == "processed", state
    assert store.documents.load_extracted_text(invoice_id) is not None
    assert store.documents.load_fields(invoice_id) is not None
    assert postings(database_url, invoice_id) == 1
    assert [j.status for j in store.claims.job_history(invoice_id)] == ["succeeded"]


# -- (a) one lease lost inside a chunk ----------------------------------------------------------


def test_a_lease_lost_mid_chunk_loses_that_invoice_alone(database_url: str, store: InvoiceStore) -> None:
    """While the stage reads b's document, b's lease goes stale (its heartbeat back-dated), the
    sweep finishes its job, and another worker takes b. The chunk's fenced write refuses b alone.

    Checked: with the fence ignored by the chunk write (`_write_chunk_once` in
    engine/store/base.py taking every lease as alive), b's text is written with the swept job
    and this test fails.
    """
    ids = new_invoices(store, ["a", "b", "c"])
    chunk = claim(store, list(ids.values()))
    b = ids["b"]
    (b_job,) = [c.job_id for c in chunk if c.invoice_id == b]
    taken_over: list[UUID] = []

    def lose_b(filename: str) -> None:
        if filename != "b.json":
            return
        sql(
            database_url,
            "UPDATE processing_jobs SET heartbeat_at = heartbeat_at - interval '1 hour' WHERE id = %s",
            (b_job,),
        )
        assert store.maintenance.release_stale_locks(b) == 1, "the sweep finished b's job"
        thief = store.claims.acquire(b, 2, "another-worker")
        assert thief is not None
        taken_over.append(thief.job_id)

    result = process_chunk(stage_env(store, Reader(on_read_text=lose_b)), chunk)

    assert taken_over, "b's lease was lost in the middle of the chunk"
    text = result.reports[0]
    assert text.stage == EXTRACT_TEXT.name
    lost = text.outcomes[b]
    assert isinstance(lost, Lost) and "swept" in lost.detail, lost
    assert isinstance(text.outcomes[ids["a"]], Done) and isinstance(text.outcomes[ids["c"]], Done)
    assert [c.invoice_id for c in text.survivors] == [ids["a"], ids["c"]]
    assert all(b not in report.outcomes for report in result.reports[1:]), "b left the chunk"
    assert set(result.finished.written) == {ids["a"], ids["c"]}
    for name in ("a", "c"):
        assert_finished(store, database_url, ids[name])
    # Nothing of the swept attempt landed, and the new holder still has b.
    assert store.documents.load_extracted_text(b) is None, "the swept job's text was written"
    assert store.documents.load_fields(b) is None and postings(database_url, b) == 0
    holder = store.claims.current_holder(b)
    assert holder is not None and holder.job_id == taken_over[0] and holder.owner == "another-worker"
    jobs = {j.job_id: j for j in store.claims.job_history(b)}
    assert jobs[b_job].status == "failed" and (jobs[b_job].error or "").startswith("swept")
    state = store.documents.invoice_state(b)
    assert state is not None and state.status == "processing", "the new holder's attempt stands"


# -- (b) the database refuses one invoice's data ------------------------------------------------


def test_a_write_the_database_refuses_for_one_invoice_fails_that_invoice_alone(
    database_url: str, store: InvoiceStore
) -> None:
    """b's fields carry a document type the invoices table's CHECK constraint refuses: a real
    error of the server, for b's data only. The chunk's write is retried an invoice at a time.

    Checked: with the one-at-a-time fallback removed from `_write_chunk` (every invoice of the
    refused chunk reported failed), a and c fail with b and this test fails.
    """
    ids = new_invoices(store, ["a", "b", "c"])
    chunk = claim(store, list(ids.values()))
    b = ids["b"]

    def break_b(fields: InvoiceFields) -> InvoiceFields:
        return replace(fields, document_type="receipt") if fields.invoice_number == "ST-b" else fields  # type: ignore[arg-type]

    result = process_chunk(stage_env(store, Reader(on_read_fields=break_b)), chunk)

    fields_report = result.reports[1]
    assert fields_report.stage == EXTRACT_FIELDS.name
    failed = fields_report.outcomes[b]
    assert isinstance(failed, Failed) and failed.error.startswith("CheckViolation"), failed
    assert "invoices_document_type_check" in failed.error
    assert isinstance(fields_report.outcomes[ids["a"]], Done)
    assert isinstance(fields_report.outcomes[ids["c"]], Done)
    assert set(result.finished.written) == {ids["a"], ids["c"]}
    for name in ("a", "c"):
        assert_finished(store, database_url, ids[name])
    # b: its text stays (saved by the stage before), its fields were not, and it is rescheduled
    # with the database's reason; its lock is released at once.
    assert store.documents.load_extracted_text(b) is not None
    assert store.documents.load_fields(b) is None and postings(database_url, b) == 0
    (job,) = store.claims.job_history(b)
    assert job.status == "failed" and "invoices_document_type_check" in (job.error or "")
    assert store.claims.current_holder(b) is None
    state = store.documents.invoice_state(b)
    assert state is not None and state.status == "failed" and state.attempts == 1, state
    assert "invoices_document_type_check" in (state.last_error or "")
    assert state.next_attempt_at is not None


# -- (c) a systemic error ---------------------------------------------------------------------

DROP_CONNECTION = """
CREATE FUNCTION test_drop_connection() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_terminate_backend(pg_backend_pid());
    RETURN NEW;
END
$$;
CREATE TRIGGER test_drop_connection BEFORE INSERT ON extracted_texts
    FOR EACH ROW EXECUTE FUNCTION test_drop_connection();
"""


@pytest.fixture
def connection_dropped_on_write(database_url: str) -> Iterator[Callable[[], None]]:
    """While installed, the server ends the session of whoever writes an extracted text: the
    connection is gone in the middle of the chunk's transaction, as when the server goes away."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(DROP_CONNECTION)

    def restore() -> None:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("DROP TRIGGER IF EXISTS test_drop_connection ON extracted_texts")

    yield restore
    restore()


def test_a_systemic_error_fails_the_stage_instead_of_each_invoice(
    database_url: str, store: InvoiceStore, connection_dropped_on_write: Callable[[], None]
) -> None:
    """The chunk's write loses its connection: run_stage raises, no invoice is failed for it,
    and once the database is back the same chunk (the op's retry) goes through.

    Checked: with `is_systemic` answering False (the error taken for one invoice's data), each
    invoice is failed on its own, run_stage returns, and this test fails.
    """
    ids = list(new_invoices(store, ["a", "b", "c"]).values())
    chunk = claim(store, ids)
    env = stage_env(store, Reader())

    with pytest.raises(psycopg.OperationalError, match="terminating connection|server closed the connection"):
        run_stage(EXTRACT_TEXT, env, chunk)

    for invoice_id in ids:
        (job,) = store.claims.job_history(invoice_id)
        assert job.status == "running", "the leases are the op's to release, not failed per invoice"
        state = store.documents.invoice_state(invoice_id)
        assert state is not None and state.status == "processing" and state.last_error is None
        assert store.documents.load_extracted_text(invoice_id) is None
    connection_dropped_on_write()
    report = run_stage(EXTRACT_TEXT, env, chunk)
    assert all(isinstance(o, Done) for o in report.outcomes.values()), report.outcomes
    assert [c.invoice_id for c in report.survivors] == ids


def test_a_systemic_error_fails_the_whole_op(
    database_url: str, store: InvoiceStore, connection_dropped_on_write: Callable[[], None]
) -> None:
    """Through Dagster: the extract_text op fails (after its retry policy), naming the systemic
    error for the whole chunk; its last try releases every lease of the chunk and reschedules
    the invoices. No invoice is reported as failed on its own, and no later stage runs.

    Checked: with `is_systemic` answering False, the op succeeds with each invoice failed on
    its own (no STEP_FAILURE), and this test fails.
    """
    ids = list(new_invoices(store, ["a", "b", "c"]).values())
    _, batch = make_jobs(pipeline_resources(database_url, reader=DocumentReader(isolate=False)))
    with DagsterInstance.ephemeral() as instance:
        result = batch.execute_in_process(
            run_config={"ops": {"fan_out": {"config": {"invoice_ids": [str(i) for i in ids]}}}},
            raise_on_error=False,
            instance=instance,
        )
    assert not result.success
    failures = [e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE]
    assert [e.step_key for e in failures] == ["process_chunk.extract_text[chunk_0000]"], failures
    message = str(failures[0].event_specific_data)
    assert "extract_text failed for the whole chunk" in message
    assert "terminating connection" in message or "server closed the connection" in message
    retried = [e for e in result.all_events if e.event_type == DagsterEventType.STEP_UP_FOR_RETRY]
    assert len(retried) == TRANSIENT_RETRY.max_retries, "the retry policy retried it as transient"
    started = {e.step_key for e in result.all_events if e.event_type == DagsterEventType.STEP_START}
    assert not any("extract_fields" in key for key in started if key), started
    for invoice_id in ids:
        (job,) = store.claims.job_history(invoice_id)
        assert job.status == "failed" and "extract_text failed for the whole chunk" in (job.error or "")
        state = store.documents.invoice_state(invoice_id)
        assert state is not None and state.status == "failed" and state.attempts == 1
        assert store.claims.current_holder(invoice_id) is None
        assert store.documents.load_extracted_text(invoice_id) is None
