"""Each Spin counterexample of a broken model, replayed against the real SQL, is refused.

`make model` finds a counterexample for every mutant of model/protocol.pml (one mechanism
removed) and writes it to model/trails/<MUTANT>.schedule. Here the real statements run in that
order on a real PostgreSQL with one connection per model worker (replay.py), with every
mechanism in place, and what the broken model allowed does not happen. A model change that
changes a trail changes what these tests drive.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from invoice_pipeline_tests.model.replay import Replay, load_schedule


def real_invariants(url: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        running = conn.execute(
            "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM processing_jobs "
            "WHERE status = 'running' GROUP BY invoice_id) r"
        ).fetchone()
        originals = conn.execute(
            "SELECT count(*) FROM invoices WHERE duplicate_status = 'original'"
        ).fetchone()
        postings = conn.execute("SELECT count(*) FROM ledger_postings").fetchone()
    assert running and originals and postings
    return {"max_running": running[0], "originals": originals[0], "postings": postings[0]}


def assert_safe(url: str) -> None:
    """The properties of the model, on the real database after the replay (two copies of one invoice)."""
    facts = real_invariants(url)
    assert facts["max_running"] <= 1, facts
    assert facts["originals"] <= 1, facts
    assert facts["postings"] <= 1, facts


def test_no_fence_trail_zombie_write_refused(database_url: str) -> None:
    """The broken model let a swept job write; the real fence refuses that write."""
    schedule = load_schedule("NO_FENCE")
    assert "job_status[j]==1" in schedule.violated
    replay = Replay(database_url, schedule).run()
    last = replay.outcomes[-1]
    assert last.step.name in {"mark_original", "mark_duplicate", "post_to_ledger", "post_skipped",
                              "finish_processing_lock", "decided_already"}  # fmt: skip
    # The zombie's fence in that transaction was refused, so its write was never made.
    zombie = last.step.args["w"]
    fences = [o for o in replay.outcomes if o.step.name.startswith("fence") and o.step.args["w"] == zombie]
    assert fences[-1].did == "refused", [(o.step, o.did) for o in replay.outcomes]
    assert last.did == "not written (no lease)", last
    assert_safe(database_url)


def test_no_advisory_trail_one_original(database_url: str) -> None:
    """The broken model decided both copies original; the real advisory lock serialises them."""
    schedule = load_schedule("NO_ADVISORY")
    assert "inv_dup" in schedule.violated
    replay = Replay(database_url, schedule).run()
    decisions = sorted(o.did for o in replay.outcomes if o.step.name in {"mark_original", "mark_duplicate"})
    assert decisions == ["duplicate", "original"], [(o.step, o.did) for o in replay.outcomes]
    assert_safe(database_url)


@pytest.mark.parametrize("mutant", ["SWEEP_NO_RECHECK", "HB_QUEUED"])
def test_sweep_trail_live_lease_kept(database_url: str, mutant: str) -> None:
    """The broken model swept a lease its holder had renewed (the sweep's snapshot, not the row)
    or would have renewed (its heartbeat queued behind a write waiting for an advisory lock);
    the real sweep keeps it, and its holder's next fence passes."""
    schedule = load_schedule(mutant)
    assert "job_age[r]" in schedule.violated
    last = schedule.steps[-1]
    assert last.name == "release_stale_locks"
    replay = Replay(database_url, schedule).run()
    victim = replay.jobs[last.args["j"]]
    assert victim not in replay.swept[len(schedule.steps) - 1], [(o.step, o.did) for o in replay.outcomes]
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT status FROM processing_jobs WHERE id = %s", (victim,)).fetchone()
    assert row == ("running",)
    assert_safe(database_url)


def test_no_index_trail_second_claim_bounces(database_url: str) -> None:
    """The broken model let two claims both see no running job and both insert one; the real
    partial unique index (and the re-read under the invoice row lock) bounces the second."""
    schedule = load_schedule("NO_INDEX")
    assert "job_status[(i*2)]" in schedule.violated
    replay = Replay(database_url, schedule).run()
    claims = [o for o in replay.outcomes if o.step.name == "acquire_processing_locks"]
    assert claims[-1].did == "bounced", [(o.step, o.did) for o in replay.outcomes]
    assert_safe(database_url)
