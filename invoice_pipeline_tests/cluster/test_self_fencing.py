"""Self-fencing without a network: the keeper's judgement and the stages' use of it."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

from invoice_pipeline.engine.leases import LeaseKeeper
from invoice_pipeline.engine.stages import SELF_FENCED, Claimed, Lost, saved_as_they_finish
from pipeline_support.helpers import wait_for


def _failing_beat(job_ids: list[uuid.UUID]) -> set[uuid.UUID]:
    raise ConnectionError("link down")


def test_a_lease_not_renewed_for_most_of_the_ttl_may_not_be_held() -> None:
    keeper = LeaseKeeper(_failing_beat, timedelta(seconds=0.05), timedelta(seconds=0.6))
    job = uuid.uuid4()
    keeper.hold(job)
    try:
        assert keeper.may_hold(job)
        # 2/3 of the TTL without a renewal: bounded wait, then the keeper says no.
        wait_for(lambda: not keeper.may_hold(job), timeout=5, what="self-fencing")
    finally:
        keeper.stop()


def test_renewed_leases_stay_held_and_lost_ones_do_not() -> None:
    alive: set[uuid.UUID] = set()
    keeper = LeaseKeeper(lambda ids: set(ids) & alive, timedelta(seconds=0.05), timedelta(seconds=0.6))
    kept, lost = uuid.uuid4(), uuid.uuid4()
    alive.add(kept)
    keeper.hold(kept)
    keeper.hold(lost)
    try:
        wait_for(lambda: not keeper.may_hold(lost), timeout=5, what="the lost lease")
        time.sleep(0.6)  # a whole TTL: renewals keep the live lease
        assert keeper.may_hold(kept)
    finally:
        keeper.stop()


def test_stages_start_no_document_and_save_nothing_for_a_fenced_lease() -> None:
    class Env:  # only may_hold is read by saved_as_they_finish's self-fencing
        def __init__(self, fenced: set[uuid.UUID]) -> None:
            self.may_hold = lambda job_id: job_id not in fenced

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
