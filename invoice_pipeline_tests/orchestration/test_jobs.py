"""Both jobs, executed in process with the real resource on a real PostgreSQL."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from dagster import DagsterEventType, DagsterInstance, ExecuteInProcessResult

from invoice_pipeline.documents import ExtractedText
from invoice_pipeline.engine.runs import InvoiceRef, unique_refs
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.assets.lineage import PIPELINE_ASSET_KEYS
from invoice_pipeline.orchestration.jobs import make_jobs
from invoice_pipeline.orchestration.resources import DocumentReader
from invoice_pipeline.orchestration.run_requests import batch_run_config, refs_from_lists
from invoice_pipeline_tests.factories import pipeline_resources
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import wait_for


def run_single(
    database_url: str, invoice_id: object, reader: DocumentReader | None = None, **db: Any
) -> ExecuteInProcessResult:
    job, _ = make_jobs(pipeline_resources(database_url, reader, **db))
    return job.execute_in_process(
        run_config={"ops": {"start": {"config": {"invoice_id": str(invoice_id)}}}},
        raise_on_error=False,
        instance=INSTANCE,
    )


def run_batch(
    database_url: str, invoice_ids: list[object], reader: DocumentReader | None = None
) -> ExecuteInProcessResult:
    _, job = make_jobs(pipeline_resources(database_url, reader))
    return job.execute_in_process(
        run_config=batch_run_config([InvoiceRef(str(i)) for i in invoice_ids]),
        raise_on_error=False,
        instance=INSTANCE,
    )


def executed_steps(database_url: str, invoice_id: object) -> list[str]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT step FROM step_events WHERE invoice_id = %s AND event = 'executed' ORDER BY id",
            (invoice_id,),
        ).fetchall()
    return [r[0] for r in rows]


INSTANCE = DagsterInstance.ephemeral()


def log_messages(result: ExecuteInProcessResult) -> str:
    """Everything the run logged, user messages included, as a person reads it in the UI."""
    return "\n".join(e.message for e in INSTANCE.all_logs(result.run_id))


STAGES = ["extract_text", "extract_fields", "validate", "detect_duplicates", "approve", "post_to_ledger"]


def test_happy_path_processes_posts_once_and_releases(database_url: str, store: InvoiceStore) -> None:
    inv = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    result = run_single(database_url, inv)
    assert result.success
    state = store.documents.invoice_state(inv)
    assert state is not None and state.status == "processed" and state.attempts == 1
    assert executed_steps(database_url, inv) == STAGES
    posting = store.documents.load_ledger_posting(inv)
    assert posting is not None and str(posting.amount) == "119.00" and posting.currency == "EUR"
    assert [j.status for j in store.claims.job_history(inv)] == ["succeeded"]
    assert store.claims.current_holder(inv) is None
    materialized = {
        e.asset_key.to_user_string()  # type: ignore[union-attr]
        for e in result.all_events
        if e.event_type == DagsterEventType.ASSET_MATERIALIZATION
    }
    assert materialized == set(PIPELINE_ASSET_KEYS)
    # Launching it again is harmless: the invoice is done.
    again = run_single(database_url, inv)
    assert again.success and "already processed" in log_messages(again)
    assert executed_steps(database_url, inv) == STAGES


def test_duplicate_is_rejected_and_never_posted(database_url: str, store: InvoiceStore) -> None:
    first = store.documents.store_document(json_invoice("INV-00123"), "acme", "a.json").invoice_id
    copy = store.documents.store_document(
        json_invoice("inv 123", seller="ACME Supplies"), "acme", "b.json"
    ).invoice_id
    other_org = store.documents.store_document(json_invoice("INV-00123"), "globex", "a.json").invoice_id
    for inv in (first, copy, other_org):
        assert run_single(database_url, inv).success
    decision = store.dedupe.load_duplicate_decision(copy)
    assert decision is not None and decision.is_duplicate and decision.original_id == first
    assert decision.reasons, "a duplicate says why it matched"
    assert store.documents.load_ledger_posting(copy) is None
    approval = store.documents.load_approval(copy)
    assert approval is not None and approval.decision == "rejected"
    other = store.dedupe.load_duplicate_decision(other_org)
    assert other is not None and other.status == "original", "another org's copy is its own original"


def test_suspected_duplicate_is_held_for_review_and_never_posted(
    database_url: str, store: InvoiceStore
) -> None:
    first = store.documents.store_document(json_invoice("INV-00123"), "acme", "a.json").invoice_id
    # The same invoice re-keyed by hand: number without its prefix, seller by name only.
    copy = store.documents.store_document(
        json_invoice("123", seller="ACME Supplies", vat_id=None), "acme", "b.json"
    ).invoice_id
    for inv in (first, copy):
        assert run_single(database_url, inv).success
    decision = store.dedupe.load_duplicate_decision(copy)
    assert decision is not None and decision.is_suspected and decision.original_id == first
    state = store.documents.invoice_state(copy)
    assert state is not None and state.status == "needs_review"
    reasons = store.documents.review_reasons(copy)
    assert reasons and reasons[0].startswith(f"suspected_duplicate of {first}")
    assert store.documents.load_approval(copy) is None, "neither approved nor rejected: a person decides"
    assert store.documents.load_ledger_posting(copy) is None
    assert executed_steps(database_url, copy) == STAGES[:-1], "post_to_ledger fast-forwarded"
    summary = store.reporting.status_summary()
    assert summary.suspected_duplicates == 1 and summary.by_status["needs_review"] == 1
    assert [(a.invoice_id, a.code) for a in summary.attention] == [(copy, "review")]
    overview = store.reporting.invoice_overview(copy)
    assert overview is not None and overview.review_reasons == reasons
    again = run_single(database_url, copy)
    assert again.success and "already needs_review" in log_messages(again)
    assert store.documents.load_ledger_posting(copy) is None


def test_lock_held_elsewhere_ends_cleanly_without_later_stages(
    database_url: str, store: InvoiceStore
) -> None:
    inv = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    holder = store.claims.acquire(inv, 1, owner="someone-else")
    assert holder is not None
    result = run_single(database_url, inv)
    assert result.success
    assert executed_steps(database_url, inv) == []
    messages = log_messages(result)
    assert "held elsewhere" in messages and str(holder.job_id) in messages and "someone-else" in messages
    skipped = {e.step_key for e in result.all_events if e.event_type == DagsterEventType.STEP_SKIPPED}
    assert "process_chunk.extract_text" in skipped and "process_chunk.release" in skipped


def test_bad_document_is_quarantined_with_a_reason_and_not_retried(
    database_url: str, store: InvoiceStore
) -> None:
    inv = store.documents.store_document(b'{"invoice_number": 12}', "acme", "bad.json").invoice_id
    result = run_single(database_url, inv)
    assert not result.success
    state = store.documents.invoice_state(inv)
    assert state is not None and state.status == "quarantined"
    assert state.quarantine_code and state.quarantine_reason
    assert store.documents.load_document(inv) is not None, "the original is kept"
    (job,) = store.claims.job_history(inv)
    assert job.status == "failed" and job.error is not None and "quarantined" in job.error
    retries = [e for e in result.all_events if e.event_type == DagsterEventType.STEP_UP_FOR_RETRY]
    assert retries == []


class SweptWhileReading(DocumentReader):
    """Plays the world in which this holder stalled and the sweep took its lock mid-step."""

    database_url: str

    def read_text(self, content: bytes, filename: str | None, max_bytes: int) -> ExtractedText:
        # A sweeper whose lease TTL is 0: every running lease is stale to it.
        sweeper = InvoiceStore(self.database_url, max_size=1, lock_ttl=timedelta(0))
        try:
            assert sweeper.maintenance.release_stale_locks() == 1
        finally:
            sweeper.close()
        return super().read_text(content, filename, max_bytes)


def test_lost_lease_stops_the_run_without_retries_or_writes(database_url: str, store: InvoiceStore) -> None:
    inv = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    result = run_single(
        database_url,
        inv,
        SweptWhileReading(database_url=database_url),
        heartbeat_seconds=30,
        lock_ttl_seconds=60,
    )
    assert not result.success
    failures = [e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE]
    assert len(failures) == 1 and "lease lost" in (failures[0].message or "") + str(
        failures[0].event_specific_data
    )
    assert [e for e in result.all_events if e.event_type == DagsterEventType.STEP_UP_FOR_RETRY] == []
    assert store.documents.load_extracted_text(inv) is None, "the zombie's text never landed"
    state = store.documents.invoice_state(inv)
    assert state is not None and state.status == "failed", "nobody else holds it: a retry is scheduled"


class FlakyReader(DocumentReader):
    """Fails the first `failures` calls with a connection error, as a flaky OCR service would."""

    failures: int
    marker: str

    def read_text(self, content: bytes, filename: str | None, max_bytes: int) -> ExtractedText:
        with psycopg.connect(self.marker) as conn:
            calls = conn.execute("SELECT nextval('flaky_calls')").fetchone()[0]  # type: ignore[index]
        if calls <= self.failures:
            raise psycopg.OperationalError(f"simulated connection drop #{calls}")
        return super().read_text(content, filename, max_bytes)


def test_transient_error_is_retried_with_backoff(database_url: str, store: InvoiceStore) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("CREATE SEQUENCE flaky_calls")
    inv = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    result = run_single(database_url, inv, FlakyReader(failures=2, marker=database_url))
    assert result.success
    retries = [e for e in result.all_events if e.event_type == DagsterEventType.STEP_UP_FOR_RETRY]
    assert len(retries) == 2
    assert store.documents.invoice_state(inv).status == "processed"  # type: ignore[union-attr]


def test_failure_hook_releases_at_once_and_schedules_retry_then_dead_letters(
    database_url: str, store: InvoiceStore
) -> None:
    with psycopg.connect(database_url) as conn:
        conn.execute("CREATE SEQUENCE flaky_calls")
    inv = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    broken = FlakyReader(failures=1000, marker=database_url)
    result = run_single(database_url, inv, broken, max_attempts=2)
    assert not result.success
    (job,) = store.claims.job_history(inv)
    assert job.status == "failed" and "simulated connection drop" in (job.error or "")
    state = store.documents.invoice_state(inv)
    assert state is not None and state.status == "failed" and state.attempts == 1
    with psycopg.connect(database_url) as conn:
        delay = conn.execute(
            "SELECT extract(epoch FROM next_attempt_at - now()) FROM invoices WHERE id = %s", (inv,)
        ).fetchone()
    assert delay is not None and 50 < float(delay[0]) <= 60, "first retry waits retry_base"
    assert not run_single(database_url, inv, broken, max_attempts=2).success
    state = store.documents.invoice_state(inv)
    assert state is not None and state.status == "needs_attention" and state.attempts == 2
    assert "simulated connection drop" in (state.last_error or "")
    dead_letter = run_single(database_url, inv, broken, max_attempts=2)
    assert not dead_letter.success, "a dead letter is not silently skipped"
    assert "requeue_invoices" in log_messages(dead_letter) + _failure_messages(dead_letter)
    assert len(store.claims.job_history(inv)) == 2, "and is left alone"


def _failure_messages(result: ExecuteInProcessResult) -> str:
    return "\n".join(
        str(e.event_specific_data) for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE
    )


def test_of_two_copies_in_one_chunk_the_first_to_arrive_is_the_original(
    database_url: str, store: InvoiceStore
) -> None:
    """A chunk is worked in arrival order, not in the random order of its invoices' UUIDs."""
    pairs = []
    for i in range(12):
        first = store.documents.store_document(
            json_invoice(f"P-{i}", total=f"{50 + i}.00"), "acme", f"a{i}.json"
        )
        # The same invoice again, reformatted: other bytes, an exact copy by its fields.
        again = json_invoice(f"P-{i}", total=f"{50 + i}.00").replace(b"{", b"{ ", 1)
        pairs.append(
            (first.invoice_id, store.documents.store_document(again, "acme", f"b{i}.json").invoice_id)
        )
    # Listed copies first: the run's config order must not decide either.
    assert run_batch(database_url, [c for _, c in pairs] + [o for o, _ in pairs]).success
    for original, copy in pairs:
        assert store.dedupe.load_duplicate_decision(original).status == "original"  # type: ignore[union-attr]
        decision = store.dedupe.load_duplicate_decision(copy)
        assert decision is not None and decision.status == "duplicate" and decision.original_id == original


def test_batch_one_bad_invoice_never_fails_its_chunk(database_url: str, store: InvoiceStore) -> None:
    good = [
        store.documents.store_document(
            json_invoice(f"B-{i}", total=f"{10 + i}.00"), "acme", f"{i}.json"
        ).invoice_id
        for i in range(4)
    ]
    bad = store.documents.store_document(b"", "acme", "empty.json").invoice_id
    result = run_batch(database_url, [*good, bad])
    assert result.success, "one bad invoice is its own outcome, not the chunk's failure"
    for inv in good:
        assert store.documents.invoice_state(inv).status == "processed"  # type: ignore[union-attr]
        assert store.documents.load_ledger_posting(inv) is not None
    bad_state = store.documents.invoice_state(bad)
    assert (
        bad_state is not None
        and bad_state.status == "quarantined"
        and bad_state.quarantine_code == "empty_file"
    )


@pytest.mark.parametrize("bad_id", ["not-a-uuid", "123"])
def test_bad_invoice_id_is_a_clear_config_failure(database_url: str, bad_id: str) -> None:
    result = run_single(database_url, bad_id)
    assert not result.success
    assert "must be a UUID" in log_messages(result) + str(
        [e.event_specific_data for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE]
    )


# The first extraction of a run waits here until the test lets it go (in-process executor: the
# op runs in this process, so module events reach it).
EXTRACTING, LET_GO = threading.Event(), threading.Event()


class GatedReader(DocumentReader):
    """Text extraction whose first document waits for the test, like a long OCR page."""

    def read_text(self, content: bytes, filename: str | None, max_bytes: int) -> ExtractedText:
        if not EXTRACTING.is_set():
            EXTRACTING.set()
            assert LET_GO.wait(120), "the test never let the extraction go"
        return super().read_text(content, filename, max_bytes)


def test_waiting_batch_branches_keep_their_leases_under_a_running_sweep(
    database_url: str, store: InvoiceStore
) -> None:
    """A batch runs stage by stage: while one branch extracts, the others wait — alive, not stale.

    While the first extraction is held, every running lease's heartbeat is back-dated by an hour;
    the run's LeaseKeeper must beat all four again (the waiting branches too), and a sweep with
    the TTL then frees none. No timing decides it: the test waits for the beats themselves.
    """
    ids = [
        store.documents.store_document(
            json_invoice(f"W-{i}", total=f"{20 + i}.00"), "acme", f"{i}.json"
        ).invoice_id
        for i in range(4)
    ]
    EXTRACTING.clear()
    LET_GO.clear()
    seen: dict[str, int] = {}

    def while_one_extracts() -> None:
        try:
            assert EXTRACTING.wait(120), "no extraction started"
            with psycopg.connect(database_url, autocommit=True) as conn:
                seen["back_dated"] = conn.execute(
                    "UPDATE processing_jobs SET heartbeat_at = heartbeat_at - interval '1 hour' "
                    "WHERE status = 'running'"
                ).rowcount

                def fresh() -> int:
                    row = conn.execute(
                        "SELECT count(*) FROM processing_jobs WHERE status = 'running' "
                        "AND heartbeat_at > clock_timestamp() - interval '1 minute'"
                    ).fetchone()
                    return int(row[0]) if row and row[0] == seen["back_dated"] else 0

                seen["beaten"] = wait_for(fresh, what="the keeper to beat every lease of the run again")
            sweeping = InvoiceStore(database_url, max_size=1, lock_ttl=timedelta(seconds=60))
            try:
                seen["swept"] = sweeping.maintenance.release_stale_locks()
            finally:
                sweeping.close()
        finally:
            LET_GO.set()

    checker = threading.Thread(target=while_one_extracts)
    checker.start()
    try:
        _, job = make_jobs(
            pipeline_resources(database_url, GatedReader(), lock_ttl_seconds=60, heartbeat_seconds=0.05)
        )
        result = job.execute_in_process(
            run_config={"ops": {"fan_out": {"config": {"invoice_ids": [str(i) for i in ids]}}}},
            raise_on_error=False,
            instance=INSTANCE,
        )
    finally:
        LET_GO.set()
        checker.join(180)
    assert seen.get("back_dated") == 4, f"the four leases were running while one extracted: {seen}"
    assert seen.get("beaten") == 4, seen
    assert seen.get("swept") == 0, "no live lease was swept"
    assert result.success
    assert all(store.documents.invoice_state(i).status == "processed" for i in ids)  # type: ignore[union-attr]


def test_fan_out_keeps_each_invoice_with_its_own_attempt() -> None:
    refs = unique_refs(refs_from_lists(["A", "B", "A", "C"], [1, 2, 1, 3]))
    assert [(r.invoice_id, r.attempt) for r in refs] == [("A", 1), ("B", 2), ("C", 3)]
    assert unique_refs(refs_from_lists(["A", "A"], None)) == [InvoiceRef("A", None)]
