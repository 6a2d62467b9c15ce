"""Reviewers against reviewers, and against the pipeline: real processes, many rounds, in lockstep.

Each worker is a separate Python process with its own connection pool. For every round the main
process prepares an invoice, then the workers meet at a barrier and act on it at once: no sleeps,
so each round is a real race, won by whoever the scheduler favours. Whatever the order:

* exactly one of two conflicting decisions applies; the other is refused and says why;
* every decision, audit row and posting was written under a live lock that then succeeded;
* an invoice is posted once if a person approved it and never if one rejected it;
* of two suspected copies released at once, exactly one becomes the original (the duplicate
  decision's advisory locks serialise them; without, both would claim the one unique key).

That the contenders really overlap is not left to the scheduler: the reviewers' store waits,
right after its attempt at the processing lock (`take_review_lock`), until every contender of
the round has made its own attempt. So the winner holds the lock, and has written nothing yet,
while the loser tries it; the loser must then be refused by the lock itself ("busy: held by"),
not by what the winner wrote afterwards (the status re-read under the lock, or the unique
approval row), which would refuse a second decision too.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest

from chaos.common import worker_context
from invoice_pipeline.domain.review import ReviewPolicy
from invoice_pipeline.engine.records import Lease
from invoice_pipeline.engine.store import InvoiceStore, Review
from invoice_pipeline_tests.engine.review.helpers import (
    decided_invoice,
    held_invoice,
    key_fields,
    run_batch,
    sql,
)
from pipeline_support.factories import json_invoice

ROUNDS = 30
# A worker that never reaches the barrier fails the round instead of hanging the suite.
BARRIER_TIMEOUT = 120


@dataclass(frozen=True)
class Result:
    round: int
    worker: str
    done: bool
    message: str
    # The lock owner, and whether its attempt at the lock succeeded (None: no attempt was made).
    owner: str = ""
    took_lock: bool | None = None


class ReviewMeetingAtTheLock(Review):
    """The real review part, except that `take_review_lock` returns only once every contender of
    the round (the parties of `meet`) has made its attempt at the lock: the decisions overlap."""

    def __init__(self, store: InvoiceStore, meet: Any) -> None:
        super().__init__(store.database, store.claims, store.dedupe, store.payments)
        self.meet = meet
        self.took_lock: bool | None = None

    def take_review_lock(self, invoice_id: UUID | str, owner: str) -> Lease | None:
        lease = super().take_review_lock(invoice_id, owner)
        self.took_lock = lease is not None
        self.meet.wait(BARRIER_TIMEOUT)
        return lease


class MeetAtTheLock(InvoiceStore):
    """The real store, whose review part meets the round's other contenders at the lock."""

    def __init__(self, database_url: str, meet: Any, **kwargs: Any) -> None:
        super().__init__(database_url, **kwargs)
        self.meeting = ReviewMeetingAtTheLock(self, meet)
        self.review = self.meeting


# -- workers (module level: a fork-server child imports them by name) -------------------------


def _review_worker(
    database_url: str,
    name: str,
    action: str,
    note: str | None,
    rounds: list[str],
    meet: Any,
    barrier: Any,
    results: Any,
) -> None:
    from invoice_pipeline.engine.review import Actor, act

    store = MeetAtTheLock(database_url, meet, max_size=2)
    actor = Actor(f"os-user:{name}", f"review:{name}@race:{os.getpid()}")
    try:
        for i, invoice_id in enumerate(rounds):
            barrier.wait(BARRIER_TIMEOUT)
            store.meeting.took_lock = None
            outcome = act(store, action, invoice_id, actor, note)  # type: ignore[arg-type]
            results.put(Result(i, name, outcome.done, outcome.message, actor.owner, store.meeting.took_lock))
    finally:
        store.close()


def _pipeline_worker(database_url: str, rounds: list[str], barrier: Any, results: Any) -> None:
    """Someone clicking Launch on process_invoice for the invoice, every round."""
    from dagster import DagsterInstance

    from invoice_pipeline.orchestration.jobs import make_jobs
    from invoice_pipeline_tests.factories import pipeline_resources

    job, _ = make_jobs(pipeline_resources(database_url))
    with DagsterInstance.ephemeral() as instance:
        for i, invoice_id in enumerate(rounds):
            barrier.wait(BARRIER_TIMEOUT)
            result = job.execute_in_process(
                run_config={"ops": {"start": {"config": {"invoice_id": invoice_id}}}},
                raise_on_error=False,
                instance=instance,
            )
            results.put(Result(i, "pipeline", result.success, ""))


def race(workers: list[tuple[Callable[..., None], tuple[Any, ...]]], rounds: int) -> list[Result]:
    """Start every worker (each gets the barrier and the result queue last), collect every result."""
    ctx = worker_context()
    barrier = ctx.Barrier(len(workers))
    results = ctx.Queue()
    procs = [ctx.Process(target=fn, args=(*args, barrier, results)) for fn, args in workers]
    for p in procs:
        p.start()
    collected = [results.get(timeout=600) for _ in range(rounds * len(workers))]
    for p in procs:
        p.join(120)
        assert p.exitcode == 0, f"worker {p.name} exited {p.exitcode}"
    return collected


def refused_by_the_lock(loser: Result, winner: Result) -> None:
    """The loser tried the lock while the winner held it, and the lock is what refused it."""
    assert winner.took_lock is True, winner
    assert loser.took_lock is False, loser
    assert loser.message.startswith("busy: held by "), loser
    # Named while the winner still holds it; or the winner finished between the two reads.
    assert f"owner {winner.owner})" in loser.message or "finished just now" in loser.message, loser


def writers_held_the_lock(database_url: str, invoice_ids: list[UUID]) -> None:
    """Every decision and posting was written by a job that ended as succeeded: under a live
    lock, through the fence (a swept or refused holder writes nothing)."""
    rows = sql(
        database_url,
        "SELECT w.what, j.status FROM ("
        " SELECT 'approval' AS what, job_id FROM approvals WHERE invoice_id = ANY(%(ids)s)"
        " UNION ALL SELECT 'audit', job_id FROM review_actions WHERE invoice_id = ANY(%(ids)s)"
        " UNION ALL SELECT 'posting', job_id FROM ledger_postings WHERE invoice_id = ANY(%(ids)s)"
        ") w JOIN processing_jobs j ON j.id = w.job_id",
        {"ids": invoice_ids},
    )
    assert rows and {status for _, status in rows} == {"succeeded"}, rows


@pytest.mark.slow
def test_two_reviewers_approve_and_reject_at_once(database_url: str, store: InvoiceStore) -> None:
    """Checked: without the processing lock (the partial unique index dropped and
    acquire_processing_lock a plain INSERT, so both reviewers take a lease), each round still
    ends with exactly one decision, refused by the status re-read or the unique approval row,
    but the loser is no longer refused by the lock and this test fails."""
    meet = worker_context().Barrier(2)
    ids = [
        held_invoice(store, "race", f"RR-{i}", ["negative_total: payable -50.00 EUR"]) for i in range(ROUNDS)
    ]
    rounds = [str(i) for i in ids]
    results = race(
        [
            (_review_worker, (database_url, "alice", "approve", None, rounds, meet)),
            (_review_worker, (database_url, "bob", "reject", "not ours", rounds, meet)),
        ],
        ROUNDS,
    )
    winners: Counter[str] = Counter()
    for i, invoice_id in enumerate(ids):
        done = [r for r in results if r.round == i and r.done]
        assert len(done) == 1, [r for r in results if r.round == i]
        (lost,) = [r for r in results if r.round == i and not r.done]
        refused_by_the_lock(lost, done[0])
        winners[done[0].worker] += 1
        approval = store.documents.load_approval(invoice_id)
        assert approval is not None
        assert approval.decision == ("approved" if done[0].worker == "alice" else "rejected")
        (audit,) = store.review.review_history(invoice_id)
        assert audit.actor == f"os-user:{done[0].worker}"
    writers_held_the_lock(database_url, ids)
    print(f"winners over {ROUNDS} rounds: {dict(winners)}")


@pytest.mark.slow
def test_two_reviewers_release_two_copies_of_one_invoice(database_url: str, store: InvoiceStore) -> None:
    """B and C are exact copies of each other, both suspected copies of A. Released at once,
    one becomes the original and the other is then found to copy it. Each round both reviewers
    hold their invoice's lock, undecided, at the same time: the decisions overlap."""
    meet = worker_context().Barrier(2)
    pairs = []
    for i in range(ROUNDS):
        number = 7000 + i
        decided_invoice(store, "race", key_fields(f"INV-{number}", "238.00"), f"a{i}", None)
        b = decided_invoice(store, "race", key_fields(f"{number}", "238.00"), f"b{i}", None)
        c = decided_invoice(store, "race", key_fields(f"{number}", "238.00", po="PO-2"), f"c{i}", None)
        pairs.append((b, c))
    results = race(
        [
            (
                _review_worker,
                (database_url, "alice", "not_duplicate", None, [str(b) for b, _ in pairs], meet),
            ),
            (_review_worker, (database_url, "bob", "not_duplicate", None, [str(c) for _, c in pairs], meet)),
        ],
        ROUNDS,
    )
    assert all(r.done for r in results), [r for r in results if not r.done]
    assert all(r.took_lock for r in results), "both held their lock when they met"
    for b, c in pairs:
        decisions = {i: store.dedupe.load_duplicate_decision(i) for i in (b, c)}
        originals = [i for i, d in decisions.items() if d is not None and d.status == "original"]
        assert len(originals) == 1, decisions
        (other,) = {b, c} - set(originals)
        held = decisions[other]
        assert held is not None and held.status == "suspected" and held.original_id == originals[0]
        assert store.documents.invoice_state(other).status == "needs_review"  # type: ignore[union-attr]
    assert store.reporting.offending_ids("check_groups_without_one_original") == []


@pytest.mark.slow
def test_reviewers_and_the_pipeline_at_once_post_at_most_once(database_url: str, store: InvoiceStore) -> None:
    """The two reviewers meet at the lock as above; the pipeline's run is launched at the same
    moment and runs freely (a held invoice is not claimed; an approved one is posted once)."""
    meet = worker_context().Barrier(2)
    # Held by the real pipeline: the org's approval limit is below every amount.
    store.review.set_review_policy("race", ReviewPolicy(auto_approve_limit=Decimal("1")), "os-user:test")
    ids = [
        store.documents.store_document(json_invoice(f"RP-{i}"), "race", f"rp{i}.json").invoice_id
        for i in range(ROUNDS)
    ]
    assert run_batch(database_url, ids).success
    assert {store.documents.invoice_state(i).status for i in ids} == {"needs_review"}  # type: ignore[union-attr]
    rounds = [str(i) for i in ids]
    results = race(
        [
            (_pipeline_worker, (database_url, rounds)),
            (_review_worker, (database_url, "alice", "approve", None, rounds, meet)),
            (_review_worker, (database_url, "bob", "reject", "over budget", rounds, meet)),
        ],
        ROUNDS,
    )
    # What the sensor would do next: run whatever is due once more.
    run_batch(database_url, ids)
    for i, invoice_id in enumerate(ids):
        decided = [r.worker for r in results if r.round == i and r.done and r.worker != "pipeline"]
        assert len(decided) == 1, [r for r in results if r.round == i]
        (won,) = [r for r in results if r.round == i and r.done and r.worker != "pipeline"]
        (lost,) = [r for r in results if r.round == i and not r.done and r.worker != "pipeline"]
        refused_by_the_lock(lost, won)
        posted = int(
            sql(database_url, "SELECT count(*) FROM ledger_postings WHERE invoice_id = %s", (invoice_id,))[0][
                0
            ]
        )
        assert posted == (1 if decided == ["alice"] else 0), (decided, posted)
        assert store.documents.invoice_state(invoice_id).status == "processed"  # type: ignore[union-attr]
    writers_held_the_lock(database_url, ids)
    assert store.reporting.offending_ids("check_posted_twice") == []
