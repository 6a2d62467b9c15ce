"""Self-fencing without a network: the keeper's judgement and the stages' use of it."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from invoice_pipeline.engine.leases import LeaseKeeper
from invoice_pipeline.engine.stages import (
    FLUSH_AFTER_SECONDS,
    SELF_FENCED,
    Claimed,
    Lost,
    saved_as_they_finish,
)
from pipeline_support.helpers import wait_for


def _failing_beat(job_ids: list[uuid.UUID]) -> set[uuid.UUID]:
    raise ConnectionError("link down")


class Clock:
    """A monotonic clock the test moves: the keeper judges renewals by it, not by real time."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_lease_not_renewed_for_most_of_the_ttl_may_not_be_held() -> None:
    clock = Clock()
    keeper = LeaseKeeper(_failing_beat, timedelta(seconds=0.05), timedelta(seconds=0.6), clock=clock)
    job = uuid.uuid4()
    keeper.hold(job)
    try:
        clock.now += 0.39  # under 2/3 of the TTL (0.4 s) since the claim, with every beat failing
        assert keeper.may_hold(job)
        clock.now += 0.02
        assert not keeper.may_hold(job), "2/3 of the TTL without a renewal: the keeper says no"
    finally:
        keeper.stop()


def test_renewed_leases_stay_held_and_lost_ones_do_not() -> None:
    clock = Clock()
    alive: set[uuid.UUID] = set()
    sent_at: list[float] = []

    def beat(ids: list[uuid.UUID]) -> set[uuid.UUID]:
        sent_at.append(clock.now)
        return set(ids) & alive

    keeper = LeaseKeeper(beat, timedelta(seconds=0.01), timedelta(seconds=0.6), clock=clock)
    kept, lost = uuid.uuid4(), uuid.uuid4()
    alive.add(kept)
    keeper.hold(kept)
    keeper.hold(lost)
    try:
        wait_for(lambda: keeper.is_lost(lost), what="the lost lease")
        assert not keeper.may_hold(lost)
        clock.now += 10  # many TTLs later; the keeper beats on
        # Two beats sent at the new time: the first one's renewal has been applied.
        wait_for(lambda: sum(t >= clock.now for t in sent_at) >= 2, what="renewals at the new time")
        assert keeper.may_hold(kept), "renewals keep the live lease"
        assert not keeper.may_hold(lost)
    finally:
        keeper.stop()


def test_stages_start_no_document_and_save_nothing_for_a_fenced_lease() -> None:
    class Env:  # saved_as_they_finish reads only may_hold (self-fencing) and save_after_seconds
        def __init__(self, fenced: set[uuid.UUID]) -> None:
            self.may_hold = lambda job_id: job_id not in fenced
            self.save_after_seconds = FLUSH_AFTER_SECONDS

    items = [Claimed(uuid.uuid4(), "acme", uuid.uuid4(), 1, "me") for _ in range(3)]
    worked: list[Claimed] = []
    saved: list[Any] = []

    def save(done: list[Any]) -> Any:
        saved.extend(done)
        from invoice_pipeline.engine.records import ChunkWrite

        return ChunkWrite({c.invoice_id: None for c, _ in done}, {}, {})

    env: Any = Env({items[1].job_id})

    def work(c: Claimed) -> str:
        worked.append(c)
        return "text"

    outcomes = saved_as_they_finish(items, work, save, None, "extract_text", env)
    assert items[1] not in worked
    assert [c for c, _ in saved] == [items[0], items[2]]
    assert outcomes[items[1].invoice_id] == Lost(SELF_FENCED)
