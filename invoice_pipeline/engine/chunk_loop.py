"""The chunk loop, written once: claim a chunk, run the stages under its leases, release it.

Every way of working invoices goes through `ChunkLoop`:
- the Dagster ops call its steps one op at a time (`claim`, `resume`, `run_stage`, `release`,
  and `release_after_failure` on an op's last try), because Dagster runs one op per stage;
- the celery task calls `run`, which drives every stage in one go and releases a failed chunk;
- the benchmarks, the chaos suite and the tests call `process_chunk`, the stages and the
  completion with nothing around them (`work` without a keeper), so the ratio between it and a
  Dagster run measures Dagster alone.

The lease protocol lives here and nowhere else: a claimed lease is heartbeated (`LeaseKeeper.hold`)
from its claim until the stage that ends it (quarantined, failed, lost) or the release; the
release stops the heartbeat before the fenced completion (a beat racing it would find the job
finished and report a live lease lost); a chunk that fails releases its leases at once, so their
retries do not wait for the sweep. What a caller does at each boundary (log, materialize assets)
comes in as `ChunkHooks`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from uuid import UUID

from invoice_pipeline.engine.leases import LeaseKeeper
from invoice_pipeline.engine.records import ChunkWrite, Rescheduled, describe_error
from invoice_pipeline.engine.stages import (
    STAGES,
    Claimed,
    Failed,
    Lost,
    Quarantined,
    Stage,
    StageEnv,
    StageReport,
    run_stage,
)
from invoice_pipeline.engine.store import InvoiceStore


def _ignore(*_: object) -> None:
    return None


@dataclass(frozen=True)
class ChunkHooks:
    """What a caller does at the loop's boundaries; each does nothing unless given."""

    # After each stage, its leases settled: report its outcomes, materialize its assets.
    stage_done: Callable[[Stage, StageReport], None] = _ignore
    # An invoice of a failed chunk, released and rescheduled (or dead-lettered): its fate.
    released: Callable[[Rescheduled], None] = _ignore
    # The failed chunk's leases could not be released (the database is what failed): the sweep
    # releases them after their TTL.
    release_failed: Callable[[Exception], None] = _ignore


NO_HOOKS = ChunkHooks()


@dataclass(frozen=True)
class ChunkResult:
    reports: tuple[StageReport, ...]
    finished: ChunkWrite[None]


def claim_chunk(store: InvoiceStore, refs: Sequence[tuple[UUID, int | None]], owner: str) -> list[Claimed]:
    """Take the locks of a chunk in one statement, after sweeping its leases stale past the
    store's TTL; invoices held elsewhere or finished are left out."""
    store.maintenance.release_stale_locks_of([invoice_id for invoice_id, _ in refs])
    return [
        Claimed(row.invoice_id, row.org_id, row.job_id, row.attempt, owner)
        for row in store.claims.acquire_many(refs, owner)
    ]


@dataclass(frozen=True)
class Resumed:
    """A chunk's leases as a new owner holds them, and why each invoice it could not take was refused."""

    claims: tuple[Claimed, ...]
    refused: tuple[str, ...]


@dataclass(frozen=True)
class ChunkLoop:
    """claim → stages → lease hold and drop → release, over one store and one process's keeper.

    Without a keeper (`process_chunk`), nobody heartbeats the leases: the caller does, or the
    chunk is short enough not to need it.
    """

    store: InvoiceStore
    # How a failed chunk's invoices are rescheduled (store.fail).
    max_attempts: int
    retry_base: timedelta
    keeper: LeaseKeeper | None = None

    def hold(self, claims: Sequence[Claimed]) -> None:
        """Heartbeat these leases from now until they are dropped, also while other chunks work."""
        if self.keeper is not None:
            for c in claims:
                self.keeper.hold(c.job_id)

    def drop(self, claims: Sequence[Claimed]) -> None:
        if self.keeper is not None:
            for c in claims:
                self.keeper.drop(c.job_id)

    def claim(self, refs: Sequence[tuple[UUID, int | None]], owner: str) -> list[Claimed]:
        """`claim_chunk`, its leases held."""
        claims = claim_chunk(self.store, refs, owner)
        self.hold(claims)
        return claims

    def resume(self, claims: Sequence[Claimed], owner: str) -> Resumed:
        """A chunk's leases as `owner` holds them, held: a job `owner` runs is adopted, a free
        invoice is claimed afresh (next attempt), and one held elsewhere (another, maybe live,
        process), finished or gone is refused."""
        resumed: list[Claimed] = []
        refused: list[str] = []
        for c in claims:
            holder = self.store.claims.current_holder(c.invoice_id)
            if holder is not None and holder.owner == owner:
                resumed.append(replace(c, job_id=holder.job_id, attempt=holder.attempt, owner=owner))
                continue
            if holder is None:
                fresh = claim_chunk(self.store, [(c.invoice_id, None)], owner)
                if fresh:
                    resumed.extend(fresh)
                    continue
                holder = self.store.claims.current_holder(c.invoice_id)
            state = self.store.documents.invoice_state(c.invoice_id)
            why = (
                f"held by {holder.describe()}"
                if holder
                else f"it is already {state.status if state else 'gone'}"
            )
            refused.append(f"{c.invoice_id}: {why}")
        self.hold(resumed)
        return Resumed(tuple(resumed), tuple(refused))

    def run_stage(
        self, stage: Stage, env: StageEnv, chunk: Sequence[Claimed], hooks: ChunkHooks = NO_HOOKS
    ) -> StageReport:
        """One stage over the chunk (`stages.run_stage`); the leases it ended (quarantined,
        failed) or lost are no longer heartbeated; then the caller's hook."""
        report = run_stage(stage, env, chunk)
        self.drop(
            [c for c in chunk if isinstance(report.outcomes.get(c.invoice_id), Quarantined | Failed | Lost)]
        )
        hooks.stage_done(stage, report)
        return report

    def release(self, chunk: Sequence[Claimed]) -> ChunkWrite[None]:
        """Release every lock as succeeded and mark each invoice processed (or needs_review).

        The heartbeat stops first: a beat racing the completion would find the job finished and
        report a live lease lost. The fenced completion proves the holder alive by itself.
        """
        self.drop(chunk)
        return self.store.claims.complete_many([c.lease for c in chunk])

    def release_after_failure(
        self, claims: Sequence[Claimed], error: str, hooks: ChunkHooks = NO_HOOKS
    ) -> None:
        """Release a failed chunk's leases at once and schedule their retries (or dead-letter them).

        Best effort: when the database is what failed, this fails too (`hooks.release_failed`),
        and the sweep releases the leases after their TTL.
        """
        self.drop(claims)
        try:
            for c in claims:
                outcome = self.store.claims.fail(
                    c.job_id, error, max_attempts=self.max_attempts, retry_base=self.retry_base
                )
                if outcome is not None:
                    hooks.released(outcome)
        except Exception as exc:
            hooks.release_failed(exc)

    def work(self, env: StageEnv, chunk: Sequence[Claimed], hooks: ChunkHooks = NO_HOOKS) -> ChunkResult:
        """Every stage over a claimed chunk, then its release. An error escapes with the leases
        as they are: the caller releases them (`run`) or leaves them to the sweep."""
        reports = []
        for stage in STAGES:
            report = self.run_stage(stage, env, chunk, hooks)
            reports.append(report)
            chunk = report.survivors
        return ChunkResult(tuple(reports), self.release(chunk))

    def run(self, env: StageEnv, claims: Sequence[Claimed], hooks: ChunkHooks = NO_HOOKS) -> ChunkResult:
        """`work` over claimed leases, and a chunk that fails released at once (fenced: only
        leases still ours), so a retry, on any host, claims them afresh."""
        try:
            return self.work(env, claims, hooks)
        except BaseException as exc:
            self.release_after_failure(claims, f"chunk failed: {describe_error(exc)}", hooks)
            raise
        finally:
            self.drop(claims)


def process_chunk(env: StageEnv, chunk: Sequence[Claimed]) -> ChunkResult:
    """Every stage over a claimed chunk, then its release: the pipeline with nothing around it."""
    return ChunkLoop(env.store, env.max_attempts, env.retry_base).work(env, chunk)
