"""A crash costs seconds, not a chunk: a SIGKILL in the middle of a chunk's text extraction
keeps every document read before it, and the audit trail claims only what was saved.

`invoice-pipeline process` works one chunk of text PDFs, saving each document as soon as it is
read (INVOICE_PIPELINE_SAVE_AFTER_MS=0), and is SIGKILLed the moment it waits to save the third:
the test holds that document's row in `extracted_texts` (inserted, uncommitted) and watches
pg_blocking_pids, so no document's speed decides when the kill lands. Then one sweep and one
`process` finish the chunk, re-reading only what the kill threw away.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import psycopg

from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples.render import Line, invoice_pdf
from invoice_pipeline.samples.scans import draw_invoice
from invoice_pipeline_tests.test_kill_process import (  # noqa: F401 (env is a fixture)
    cli,
    env,
    kill_process_when,
    scalar,
)
from pipeline_support.helpers import blocks_someone, hold_text_rows

DOCUMENTS = 4
LINES = 30


def _slow_pdf(seed: int) -> bytes:
    inv = draw_invoice(seed)
    lines = tuple(
        Line(f"Consulting hours, item {i}", Decimal(1), Decimal("10.00"), Decimal(19)) for i in range(LINES)
    )
    return invoice_pdf(replace(inv, lines=lines, invoice_number=f"SLOW-{seed:04d}"), "en")


SAVED = "SELECT count(*) FROM extracted_texts"
EXECUTED = "SELECT count(*) FROM step_events WHERE step = 'extract_text' AND event = 'executed'"


def test_a_kill_mid_chunk_keeps_what_was_read_and_rereads_only_the_rest(
    database_url: str,
    store: InvoiceStore,
    env: dict[str, str],  # noqa: F811
) -> None:
    """The kill lands when the process first waits on the held row: the two documents before
    it must be saved by then. Checked: with the chunk's texts saved once at its end (the code
    before issue 19; here, the flush condition reduced to the chunk's last document), the first
    wait is the whole chunk's save with nothing saved yet: "0 of 4 saved mid-chunk"."""
    invoices = [
        store.documents.store_document(_slow_pdf(70 + i), "acme", f"slow{i}.pdf").invoice_id
        for i in range(DOCUMENTS)
    ]
    held = invoices[DOCUMENTS // 2]  # the third of the chunk (claimed in the order they came in)
    with hold_text_rows(database_url, [str(held)]) as holder:
        holder_pid = holder.info.backend_pid
        outcome = kill_process_when(
            env | {"INVOICE_PIPELINE_SAVE_AFTER_MS": "0"},
            lambda: blocks_someone(database_url, holder_pid),
            DOCUMENTS,
            "the first save that waits on the held document",
        )
        saved_at_kill = scalar(database_url, SAVED)
        holder.rollback()
    assert outcome == "killed", "the process was still reading when it was killed"
    assert saved_at_kill == DOCUMENTS // 2, f"{saved_at_kill} of {DOCUMENTS} saved mid-chunk"
    # 'executed' commits with the text it vouches for: never claimed for lost work.
    assert scalar(database_url, EXECUTED) == saved_at_kill
    with psycopg.connect(database_url) as conn:
        kept = {row[0] for row in conn.execute("SELECT invoice_id FROM extracted_texts").fetchall()}
        conn.execute(
            "UPDATE processing_jobs SET heartbeat_at = heartbeat_at - interval '1 hour' WHERE status = 'running'"
        )

    assert cli(env, "sweep").returncode == 0
    again = cli(env, "process", "--batch-size", str(DOCUMENTS))
    assert again.returncode == 0, again.stderr[-2000:]

    with psycopg.connect(database_url) as conn:
        starts = dict(
            conn.execute(
                "SELECT invoice_id, count(*) FILTER (WHERE event = 'started') FROM step_events "
                "WHERE step = 'extract_text' GROUP BY invoice_id"
            ).fetchall()
        )
        processed = conn.execute(
            # Finished: posted, or held because no vendor master confirms these pages' seller.
            "SELECT count(*) FROM invoices WHERE status IN ('processed', 'needs_review') AND id = ANY(%s)",
            (invoices,),
        ).fetchone()
    assert processed == (DOCUMENTS,)
    assert all(starts[i] == 1 for i in kept), "a document saved before the kill is never read again"
    assert all(starts[i] == 2 for i in set(invoices) - kept), "only the unsaved ones are read again"
    assert scalar(database_url, EXECUTED) == DOCUMENTS, "each text saved, and recorded executed, once"
