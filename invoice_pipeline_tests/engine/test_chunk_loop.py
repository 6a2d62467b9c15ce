"""The chunk loop (invoice_pipeline/engine/chunk_loop.py) on its own, on a real PostgreSQL, with
a real LeaseKeeper: what the celery task relies on when it drives every stage in one step.

* a chunk run through every stage is released, each stage's hook called once, no lease left
  heartbeated;
* a chunk whose stage raises (a systemic error) is released at once: its jobs failed and its
  invoices rescheduled, each reported to the hook, no lease left running or heartbeated.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest

from invoice_pipeline.engine.chunk_loop import ChunkHooks, ChunkLoop
from invoice_pipeline.engine.leases import LeaseKeeper
from invoice_pipeline.engine.records import Rescheduled
from invoice_pipeline.engine.stages import STAGES, Stage, StageReport
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.engine.test_stages import Reader, stage_env
from pipeline_support.factories import json_invoice

TTL = timedelta(minutes=5)


def database_gone(filename: str) -> None:
    """The first document's read meets an unreachable database: a systemic error."""
    raise psycopg.OperationalError("the database went away")


@pytest.fixture
def keeper(store: InvoiceStore) -> Iterator[LeaseKeeper]:
    keeper = LeaseKeeper(store.claims.heartbeat_many, timedelta(seconds=30), TTL)
    yield keeper
    keeper.stop()


def test_a_chunk_run_through_every_stage_is_released_with_one_hook_call_per_stage(
    store: InvoiceStore, keeper: LeaseKeeper
) -> None:
    ids = [
        store.documents.store_document(json_invoice(f"CL-{n}"), "acme", f"{n}.json").invoice_id
        for n in range(2)
    ]
    loop = ChunkLoop(store, max_attempts=3, retry_base=timedelta(minutes=1), keeper=keeper)
    claims = loop.claim([(i, None) for i in ids], "test-chunk-loop")
    assert keeper.held() == {c.job_id for c in claims}, "claimed leases are heartbeated"
    stages: list[str] = []

    def stage_done(stage: Stage, report: StageReport) -> None:
        stages.append(stage.name)

    result = loop.run(stage_env(store, Reader()), claims, ChunkHooks(stage_done))

    assert stages == [s.name for s in STAGES]
    assert set(result.finished.written) == set(ids)
    assert keeper.held() == frozenset(), "no lease is heartbeated after the release"
    for invoice_id in ids:
        state = store.documents.invoice_state(invoice_id)
        assert state is not None and state.status == "processed", state


def test_a_chunk_whose_stage_raises_is_released_at_once(store: InvoiceStore, keeper: LeaseKeeper) -> None:
    """Without the release, the jobs stayed 'running' until the sweep, their invoices not rescheduled."""
    ids = [
        store.documents.store_document(json_invoice(f"CL-{n}"), "acme", f"{n}.json").invoice_id
        for n in range(2)
    ]
    loop = ChunkLoop(store, max_attempts=3, retry_base=timedelta(minutes=1), keeper=keeper)
    claims = loop.claim([(i, None) for i in ids], "test-chunk-loop")
    released: list[Rescheduled] = []

    with pytest.raises(psycopg.OperationalError, match="the database went away"):
        loop.run(
            stage_env(store, Reader(on_read_text=database_gone)), claims, ChunkHooks(released=released.append)
        )

    assert sorted(r.invoice_id for r in released) == sorted(ids)
    assert keeper.held() == frozenset(), "no lease is heartbeated after the failure"
    for invoice_id in ids:
        assert store.claims.current_holder(invoice_id) is None, "no lease is left running without a worker"
        state = store.documents.invoice_state(invoice_id)
        assert state is not None and state.status == "failed" and state.attempts == 1, state
        assert "chunk failed: OperationalError: the database went away" in (state.last_error or "")
