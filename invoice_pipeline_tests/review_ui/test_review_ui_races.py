"""Reviewers in separate processes deciding one invoice at the same instant, round after round:
the page's functions (approve, reject, correct, with the version the page showed) never give
two outcomes. Each worker has its own store (pool); they meet at a barrier and act at once."""

from __future__ import annotations

from typing import Any

from chaos.common import worker_context
from invoice_pipeline.engine.corrections import correct_invoice
from invoice_pipeline.engine.review import Actor, act
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.engine.review.helpers import held_invoice, sql

ROUNDS = 30
TIMEOUT = 120


def _worker(database_url: str, name: str, kind: str, jobs: Any, results: Any, meet: Any) -> None:
    store = InvoiceStore(database_url, max_size=2)
    actor = Actor(f"review-ui:{name}", f"review-ui:{name}@race:{name}")
    try:
        while True:
            job = jobs.get(timeout=TIMEOUT)
            if job is None:
                return
            invoice_id, version = job
            meet.wait(TIMEOUT)
            if kind == "correct":
                outcome = correct_invoice(
                    store, invoice_id, ["po_number=PO-RACE"], actor, expect_version=version
                )
            else:
                outcome = act(store, kind, invoice_id, actor, "race", expect_version=version)  # type: ignore[arg-type]
            results.put((invoice_id, name, outcome.done, outcome.message))
    finally:
        store.close()


def test_reviewers_in_separate_processes_never_make_two_outcomes(
    database_url: str, store: InvoiceStore
) -> None:
    ctx = worker_context()
    meet = ctx.Barrier(3)
    results = ctx.Queue()
    kinds = ("approve", "reject", "correct")
    queues = [ctx.Queue() for _ in kinds]
    workers = [
        ctx.Process(target=_worker, args=(database_url, kind, kind, q, results, meet), daemon=True)
        for kind, q in zip(kinds, queues, strict=True)
    ]
    for w in workers:
        w.start()
    winners: dict[str, int] = {}
    try:
        for i in range(ROUNDS):
            inv = held_invoice(store, "race", f"INV-UI-{i}", ["negative_total: payable -50.00 EUR"])
            # A positive total: approving it is allowed (posting needs a total and a currency).
            sql(
                database_url,
                'UPDATE invoices SET fields = fields || \'{"payable_total": "50.00"}\' WHERE id = %s',
                (inv,),
            )
            version = store.review_pages.review_version(inv)
            for q in queues:
                q.put((str(inv), version))
            got = [results.get(timeout=TIMEOUT) for _ in kinds]
            done = [g for g in got if g[2]]
            assert len(done) == 1, got
            winners[done[0][1]] = winners.get(done[0][1], 0) + 1
            audit = sql(database_url, "SELECT action FROM review_actions WHERE invoice_id = %s", (inv,))
            assert len(audit) == 1, audit
            assert all("meanwhile" in g[3] or "busy" in g[3] or "it is " in g[3] for g in got if not g[2]), (
                got
            )
            assert sql(
                database_url,
                "SELECT count(*) FROM processing_jobs WHERE invoice_id = %s AND status = 'running'",
                (inv,),
            ) == [(0,)]
    finally:
        for q in queues:
            q.put(None)
        for w in workers:
            w.join(30)
    print(f"winners over {ROUNDS} rounds: {winners}")
