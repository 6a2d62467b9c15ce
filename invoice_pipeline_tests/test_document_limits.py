"""Documents cannot exhaust a worker (issue 11), through the real job on a real PostgreSQL.

A bomb is quarantined as too_complex with its lease released; input a parser cannot read is a
quarantine, not a transient retry; a stage stuck past its maximum duration fails its attempt
(lease released, invoice rescheduled) however healthy the heartbeat; and what a document says
reaches the terminal escaped. Outcomes only, no timing assertions.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterEventType, DagsterInstance, ExecuteInProcessResult

from invoice_pipeline.documents import ExtractedText
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.jobs import make_jobs
from invoice_pipeline.orchestration.resources import DocumentReader
from invoice_pipeline.terminal import printable
from invoice_pipeline_tests.factories import pipeline_resources
from pipeline_support import hostile_corpus
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import run_cli

INSTANCE = DagsterInstance.ephemeral()
TIGHT = DocumentReader(parse_cpu_seconds=1, parse_memory_mb=400, parse_timeout_seconds=120)


def run_single(
    database_url: str, invoice_id: object, reader: DocumentReader | None = None, **db: Any
) -> ExecuteInProcessResult:
    job, _ = make_jobs(pipeline_resources(database_url, reader or TIGHT, **db))
    return job.execute_in_process(
        run_config={"ops": {"start": {"config": {"invoice_id": str(invoice_id)}}}},
        raise_on_error=False,
        instance=INSTANCE,
    )


def retries(result: ExecuteInProcessResult) -> list[Any]:
    return [e for e in result.all_events if e.event_type == DagsterEventType.STEP_UP_FOR_RETRY]


def assert_quarantined(store: InvoiceStore, inv: Any, code: str, content: bytes) -> str:
    state = store.documents.invoice_state(inv)
    assert state is not None and state.status == "quarantined", state
    assert state.quarantine_code == code, state.quarantine_reason
    (job,) = store.claims.job_history(inv)
    assert job.status == "failed", "the lease was released with the quarantine"
    assert store.claims.current_holder(inv) is None
    document = store.documents.load_document(inv)
    assert document is not None and document.content == content, "the original bytes are kept"
    return state.quarantine_reason or ""


def test_a_decompression_bomb_is_quarantined_too_complex_and_releases_its_lease(
    database_url: str, store: InvoiceStore
) -> None:
    bomb = hostile_corpus.by_name(seed=11)["pdf_decompression_bomb"].content
    inv = store.documents.store_document(bomb, "acme", "bomb.pdf").invoice_id
    result = run_single(database_url, inv)
    assert not result.success
    reason = assert_quarantined(store, inv, "too_complex", bomb)
    assert "1 s of CPU" in reason
    assert retries(result) == [], "a bound is not transient"
    # The pipeline's process is fine and so is the next invoice.
    good = store.documents.store_document(json_invoice(), "acme", "good.json").invoice_id
    assert run_single(database_url, good).success


@pytest.mark.parametrize(
    ("content", "code"),
    [
        # Raised ValueError before: retried as transient until needs_attention.
        (
            b'{"invoice_number": "A1", "currency": "EUR", "payable_total": ' + b"9" * 5000 + b"}",
            "json_number_too_long",
        ),
        # Parsed, then failed to save (PostgreSQL refuses NUL and a 10^999999999 numeric): retried.
        (json_invoice("A\u00001"), "unstorable_character"),
        (b'{"invoice_number": "A1", "currency": "EUR", "payable_total": 1e999999999}', "amount_out_of_range"),
    ],
    ids=["5000_digit_integer", "nul_in_a_field", "huge_exponent"],
)
def test_input_a_parser_cannot_use_is_quarantined_not_retried(
    database_url: str, store: InvoiceStore, content: bytes, code: str
) -> None:
    inv = store.documents.store_document(content, "acme", "bad.json").invoice_id
    result = run_single(database_url, inv)
    assert not result.success
    assert_quarantined(store, inv, code, content)
    assert retries(result) == []


# -- a stage past its maximum duration ---------------------------------------------------------

ENTERED: dict[str, threading.Event] = {}
RELEASE: dict[str, threading.Event] = {}
# What each abandoned read produced once it was let go: the text its stage would have saved.
LATE_TEXT: dict[str, ExtractedText] = {}
FINISHED: dict[str, threading.Event] = {}


class StuckReader(DocumentReader):
    """A read that does not finish by itself: an OCR service that stopped answering, a parse
    stuck in C code. It heartbeats happily all the while (the process is alive)."""

    gate: str

    def read_text(self, content: bytes, filename: str | None, max_bytes: int) -> ExtractedText:
        ENTERED[self.gate].set()
        # The test releases it once the run has returned. Without a stage deadline the run never
        # returns; this guard turns that hang into a failure instead of a stuck suite.
        if not RELEASE[self.gate].wait(60):
            raise RuntimeError("the stage was never abandoned: no maximum duration")
        try:
            LATE_TEXT[self.gate] = text = super().read_text(content, filename, max_bytes)
            return text
        finally:
            FINISHED[self.gate].set()


def test_a_stuck_stage_fails_its_attempt_and_its_late_write_is_refused(
    database_url: str, store: InvoiceStore
) -> None:
    """The stage's save comes after `each()` returns, so the abandoned read itself never writes:
    the late write is made here, by hand, with what the abandoned read produced and the dead
    attempt's own lease, through the chunk write the stage uses (`save_extracted_texts`).

    Checked: with the fence ignored by the chunk write (`_write_chunk_once` taking every lease
    as alive), the late text is written and this test fails. With `AND status = 'running'`
    dropped from `fence_chunk` (sql/queries/fence.sql) it fails too: the append-only trigger on
    processing_jobs then refuses the finished job's heartbeat, so the write is reported failed
    instead of lost.
    """
    gate = "stuck"
    ENTERED[gate], RELEASE[gate], FINISHED[gate] = threading.Event(), threading.Event(), threading.Event()
    inv = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    try:
        result = run_single(
            database_url, inv, StuckReader(gate=gate), max_stage_seconds=0.5, heartbeat_seconds=0.05
        )
    finally:
        RELEASE[gate].set()
    assert ENTERED[gate].is_set(), "the stage really started its read"
    assert not result.success
    assert retries(result) == [], "not retried inside the run: the attempt fails"
    (job,) = store.claims.job_history(inv)
    assert job.status == "failed" and "maximum of 0.5 s" in (job.error or "")
    assert store.claims.current_holder(inv) is None, "the lease is released"
    state = store.documents.invoice_state(inv)
    assert state is not None and state.status == "failed" and state.attempts == 1
    assert state.next_attempt_at is not None, "rescheduled by the existing failure path"
    # The abandoned read now completes. Its text, written late with the attempt's dead lease
    # through the stage's own fenced chunk write, is refused: nothing of it lands.
    assert FINISHED[gate].wait(60), "the abandoned read ran to its end"
    late = LATE_TEXT.pop(gate, None)
    assert late is not None, "the abandoned read ran to its end"
    dead = store.claims.lease(job.job_id, inv, job.attempt, job.owner)
    write = store.documents.save_extracted_texts([(dead, late)])
    assert write.written == {} and write.failed == {}, write
    assert set(write.lost) == {inv} and write.lost[inv].startswith("job is failed"), write.lost
    assert store.documents.load_extracted_text(inv) is None, "the late write landed"
    assert [j.status for j in store.claims.job_history(inv)] == ["failed"], "the dead job stays finished"
    # The next attempt processes it.
    assert run_single(database_url, inv).success
    assert store.documents.invoice_state(inv).status == "processed"  # type: ignore[union-attr]


# -- what a document says reaches the terminal escaped -----------------------------------------


def cli(*args: str, env: dict[str, str]) -> str:
    done = run_cli(*args, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_show_and_status_escape_control_characters_and_json_stays_verbatim(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    attack = hostile_corpus.TERMINAL_ATTACK
    good = store.documents.store_document(
        json_invoice(seller=f"ACME {attack}"), "acme", f"{attack}.json"
    ).invoice_id
    bad = store.documents.store_document(b"\x1b[2J", "acme", f"{attack}.bin").invoice_id
    assert run_single(database_url, good).success
    assert not run_single(database_url, bad).success
    env = dict(
        os.environ, INVOICE_PIPELINE_HOME=str(tmp_path / "home"), INVOICE_PIPELINE_DATABASE_URL=database_url
    )

    for out in (cli("show", str(good), env=env), cli("status", env=env)):
        for raw in ("\x1b", "\x07", "\u202e"):
            assert raw not in out, f"{raw!r} reached the terminal"
    shown = cli("show", str(good), env=env)
    assert printable(attack) in shown and "\\x1b]52;c;" in shown
    assert f"{printable(attack)}.bin" in cli("status", env=env)
    record = json.loads(cli("show", str(good), "--json", env=env))
    assert record["invoice"]["fields"]["seller_name"] == f"ACME {attack}", "stored and exported verbatim"
