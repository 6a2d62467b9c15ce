"""The payment model's counterexample, replayed against the real stages (issue 52).

`make model` verifies model/payment.pml (the payment decision taken in the posting's
transaction under the identity key's advisory lock) and finds, for its mutant APPROVAL_ONLY
(the decision the approval stage took from a registry read before any lock), the race of "a
registry read once per chunk": both invoices of a new vendor read "no vendor", the first
registers it with IBAN A, the second adds B to it and pays B. The counterexample is kept in
model/trails/APPROVAL_ONLY.schedule. Here the real stages run in the schedule's order, one
invoice per model worker, on a real PostgreSQL: the second posting decides again under the lock,
sees the vendor the first registered, and holds its invoice. What the broken model allowed does
not happen.
"""

from __future__ import annotations

from uuid import UUID

import psycopg

from invoice_pipeline.engine.chunk_loop import ChunkLoop, claim_chunk
from invoice_pipeline.engine.stages import STAGES, Claimed, run_stage
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.engine.test_liveness import stage_env
from invoice_pipeline_tests.engine.test_payment_stateful import UNJUSTIFIED_ACCOUNTS
from invoice_pipeline_tests.model.replay import load_schedule
from pipeline_support.factories import json_invoice

ORG = "model-payment"
VAT = "DE136695976"
IBANS = ("DE89370400440532013000", "GB82WEST12345698765432")  # worker 0 asks for A, worker 1 for B


def test_approval_only_trail_is_refused_by_the_posting_decision(
    database_url: str, store: InvoiceStore
) -> None:
    schedule = load_schedule("APPROVAL_ONLY")
    assert "vendor_iban" in schedule.violated
    assert [s.name for s in schedule.steps].count("post") == 2, "the trail ends in the second posting"
    invoices: list[UUID] = [
        store.documents.store_document(
            json_invoice(f"MODEL-{w}", vat_id=VAT, payee_iban=IBANS[w]), ORG, f"w{w}.json"
        ).invoice_id
        for w in range(2)
    ]
    chunks: dict[int, list[Claimed]] = {}
    env = stage_env(store)
    loop = ChunkLoop(store, env.max_attempts, env.retry_base)
    for step in schedule.steps:
        w = step.args["w"]
        if step.name == "approve_reads":
            chunks[w] = claim_chunk(store, [(invoices[w], None)], f"model-worker-{w}")
            for stage in STAGES[:-1]:  # up to and including approve: both approved, no vendor yet
                run_stage(stage, env, chunks[w])
        elif step.name == "post":
            run_stage(STAGES[-1], env, chunks[w])
            loop.release(chunks[w])
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert conn.execute(UNJUSTIFIED_ACCOUNTS, {"org": ORG}).fetchall() == []
        statuses = dict(conn.execute("SELECT id, status FROM invoices WHERE org_id = %s", (ORG,)).fetchall())
        paid = conn.execute("SELECT iban FROM ledger_postings WHERE org_id = %s", (ORG,)).fetchall()
    first, second = (invoices[s.args["w"]] for s in schedule.steps if s.name == "post")
    assert statuses[first] == "processed" and statuses[second] == "needs_review", statuses
    assert len(paid) == 1
    reasons = store.documents.review_reasons(second) or []
    assert any(r.startswith("bank_details_changed") for r in reasons), reasons
