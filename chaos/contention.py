"""Scenario: contention. Many runs race over overlapping chunks while reviews, sweeps, probes and
stuck peers press on the same rows (issue 25: a live holder is never hurt by someone else's wait).

One process, real PostgreSQL, the real stages and store, threads released together by a barrier.
A trial is one run: it claims a random, overlapping part of its wave's invoices (new ones,
copies of earlier originals, invoices a reviewer just released) and takes what it got through
every stage (`chunk_loop.process_chunk`), with its own store and LeaseKeeper, as a Dagster run
process would. Meanwhile, per wave:

* a sweeper runs the maintenance statements in a loop (the global sweep with the scenario's
  TTL, the reschedule of orphans), and a dead run leaves a lease with a back-dated heartbeat
  that the sweep must free;
* a reviewer acts on held invoices (not-duplicate, confirm-duplicate, approve, reject);
* stuck peers (the injected failures) hold an earlier original's row, or its dedupe advisory
  locks, for tens of milliseconds, so that deciding copies wait in the middle of their writes;
* a prober claims invoices whose holder is in the middle of a write (an instrumented store
  says which) and times the bounce.

Targets (violations when missed): no stage failed or raised because of someone else's claim or
wait, no live lease swept, no live invoice marked failed (a test-only trigger records any
invoice set failed while a running job holds it), no lease left held with no worker after a
run, a bounce off a holder mid-write under 50 ms (p95), and every safety invariant of
`check_common_invariants` (audited) and the watcher.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any
from uuid import UUID

import psycopg

from chaos.common import (
    ChaosContext,
    ScenarioResult,
    Watcher,
    check_common_invariants,
    install_audit,
    timed,
)
from invoice_pipeline.config import DEFAULT_MAX_DOCUMENT_BYTES
from invoice_pipeline.documents import ExtractedText
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.keys import decision_lock_ids
from invoice_pipeline.domain.matching import MatchCandidate
from invoice_pipeline.engine.chunk_loop import claim_chunk, process_chunk
from invoice_pipeline.engine.leases import LeaseKeeper
from invoice_pipeline.engine.records import ChunkWrite, Lease
from invoice_pipeline.engine.review import Actor, act
from invoice_pipeline.engine.stages import Claimed, Failed, Lost, StageEnv
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.resources import DocumentReader
from pipeline_support.factories import json_invoice

TTL = timedelta(seconds=3)
HEARTBEAT = timedelta(milliseconds=150)
NEW_PER_WAVE = 6
BOUNCE_TARGET_MS = 50.0
CONTENTION_WORDS = ("deadlock", "lock timeout", "LockNotAvailable", "DeadlockDetected", "canceling statement")
SELLERS = [("Nordwind Logistik GmbH", "DE811907980"), ("Blue Heron Consulting Ltd", "GB123456782")]

# Test-only instrumentation in the scenario's own database: any invoice set failed (or dead-
# lettered) while a running job holds it. The trigger's query takes a fresh snapshot, so it sees
# a claim that committed after the snapshot of the statement that marked the invoice.
LIVE_MARKED_FAILED_SQL = """
CREATE TABLE chaos_live_marked_failed (
    invoice_id uuid NOT NULL,
    job_id     uuid NOT NULL,
    new_status text NOT NULL,
    at         timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION chaos_live_marked_failed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_live_marked_failed (invoice_id, job_id, new_status)
    SELECT NEW.id, j.id, NEW.status FROM processing_jobs j WHERE j.invoice_id = NEW.id AND j.status = 'running';
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_live_marked_failed AFTER UPDATE OF status ON invoices FOR EACH ROW
    WHEN (NEW.status IN ('failed', 'needs_attention') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION chaos_live_marked_failed();
"""


class WritesInFlight:
    """Which invoices are inside a fenced write right now (dedupe waits included), per write."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writes: dict[UUID, int] = {}
        self._next = 0

    @contextmanager
    def writing(self, invoice_ids: Sequence[UUID]) -> Iterator[None]:
        with self._lock:
            self._next += 1
            token = self._next
            for invoice_id in invoice_ids:
                self._writes[invoice_id] = token
        try:
            yield
        finally:
            with self._lock:
                for invoice_id in invoice_ids:
                    if self._writes.get(invoice_id) == token:
                        del self._writes[invoice_id]

    def pick(self, rng: random.Random) -> tuple[UUID, int] | None:
        with self._lock:
            if not self._writes:
                return None
            invoice_id = rng.choice(sorted(self._writes))
            return invoice_id, self._writes[invoice_id]

    def still(self, invoice_id: UUID, token: int) -> bool:
        with self._lock:
            return self._writes.get(invoice_id) == token


class InstrumentedStore(InvoiceStore):
    """The real store, telling the prober which invoices are in the middle of a write."""

    def __init__(self, url: str, in_flight: WritesInFlight, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self.in_flight = in_flight
        write_once = self.database._write_chunk_once

        # Every part's chunk write goes through its database's one transaction attempt.
        def instrumented(items: Sequence[tuple[Lease, Any]], *rest: Any) -> ChunkWrite[Any]:
            with in_flight.writing([lease.invoice_id for lease, _ in items]):
                return write_once(items, *rest)

        self.database._write_chunk_once = instrumented  # type: ignore[method-assign,assignment]


class Reader:
    """The real document reader, in process (JSON documents: milliseconds)."""

    def __init__(self) -> None:
        self.inner = DocumentReader(isolate=False)

    def read_text(self, content: bytes, filename: str | None, max_bytes: int) -> ExtractedText:
        return self.inner.read_text(content, filename, max_bytes)

    def read_fields(self, extracted: ExtractedText) -> InvoiceFields:
        return self.inner.read_fields(extracted)


def stage_env(store: InvoiceStore) -> StageEnv:
    return StageEnv(
        store=store,
        parser=Reader(),
        max_document_bytes=DEFAULT_MAX_DOCUMENT_BYTES,
        max_stage_seconds=120,
        max_attempts=10**6,
        retry_base=timedelta(0),
    )


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Figures:
    """Counters and samples the threads add to; merged into the result at the end."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.claim_ms: list[float] = []
        self.bounce_ms: list[float] = []
        self.problems: list[str] = []

    def add(self, key: str, by: int = 1) -> None:
        with self.lock:
            self.counts[key] += by

    def problem(self, message: str) -> None:
        with self.lock:
            self.problems.append(message)


class Wave:
    """What one wave's threads share: the invoices, the stop signal, the start barrier."""

    def __init__(self, invoices: list[UUID], runs: int) -> None:
        self.invoices = invoices
        self.barrier = threading.Barrier(runs + 1)  # the runs and the stuck peer start together
        self.runs_done = threading.Event()


def make_documents(
    store: InvoiceStore, rng: random.Random, wave: int, originals: list[tuple[str, str, str, str | None]]
) -> list[UUID]:
    """The wave's new invoices: originals, exact copies and reformatted copies of earlier ones,
    and a few that a person must see (a negative total)."""
    ids = []
    for i in range(NEW_PER_WAVE):
        roll = rng.random()
        if originals and roll < 0.3:
            number, seller, total, vat = rng.choice(originals)
            doc = json_invoice(number, seller, total, vat_id=vat, po_number=f"resent-{wave}-{i}")
        elif originals and roll < 0.4:
            number, seller, total, vat = rng.choice(originals)
            digits = number.split("-")[1]
            doc = json_invoice(
                f"inv{int(digits)}", seller.upper(), total, vat_id=None, po_number=f"w{wave}-{i}"
            )
        elif roll < 0.45:
            doc = json_invoice(f"NEG-{wave:05d}{i}", total="-50.00", po_number=f"w{wave}-{i}")
        else:
            seller, vat = rng.choice(SELLERS)
            number, total = f"INV-{wave:05d}{i}", f"{rng.randint(100, 99999) / 100:.2f}"
            originals.append((number, seller, total, vat))
            doc = json_invoice(number, seller, total, vat_id=vat, po_number=f"w{wave}-{i}")
        ids.append(store.documents.store_document(doc, "acme", f"w{wave}-{i}.json").invoice_id)
    return ids


def racing_run(
    store: InvoiceStore,
    keeper: LeaseKeeper,
    owner: str,
    refs: list[tuple[UUID, int | None]],
    wave: Wave,
    figures: Figures,
) -> None:
    """One trial: claim a chunk, take it through every stage, release it; keep its leases alive."""
    wave.barrier.wait()
    began = time.perf_counter()
    chunk: list[Claimed] = []
    try:
        chunk = claim_chunk(store, refs, owner)
        with figures.lock:
            figures.claim_ms.append((time.perf_counter() - began) * 1000)
        figures.add("claims_requested", len(refs))
        figures.add("claimed", len(chunk))
        figures.add("bounced", len(refs) - len(chunk))
        for c in chunk:
            keeper.hold(c.job_id)
        result = process_chunk(stage_env(store), chunk)
        for report in result.reports:
            for invoice_id, outcome in report.outcomes.items():
                if isinstance(outcome, Lost):
                    figures.add("lost_outcomes")
                    figures.problem(
                        f"{owner}: live lease of {invoice_id} lost in {report.stage}: {outcome.detail}"
                    )
                elif isinstance(outcome, Failed):
                    figures.add("failed_outcomes")
                    if any(word in outcome.error for word in CONTENTION_WORDS):
                        figures.add("stages_failed_by_contention")
                    figures.problem(f"{owner}: {invoice_id} failed in {report.stage}: {outcome.error}")
        figures.add("completed", len(result.finished.written))
        if result.finished.lost or result.finished.failed:
            figures.problem(f"{owner}: completion refused: {result.finished.lost} {result.finished.failed}")
    except Exception as exc:  # a stage raised: the whole chunk would have failed its op
        figures.add("stage_exceptions")
        figures.problem(f"{owner}: the chunk's stages raised {type(exc).__name__}: {exc}")
        for c in chunk:
            store.claims.fail(
                c.job_id, f"chaos run raised: {exc}", max_attempts=10**6, retry_base=timedelta(0)
            )
    finally:
        for c in chunk:
            keeper.drop(c.job_id)


def sweeper(store: InvoiceStore, wave: Wave, figures: Figures) -> None:
    """The sensor's database part of maintenance, in a loop, until the wave's runs are done."""
    while True:
        figures.add("sweeps")
        figures.add("swept", store.maintenance.release_stale_locks())  # the store's TTL
        figures.add(
            "orphans_rescheduled",
            len(store.maintenance.reschedule_orphans(max_attempts=10**6, retry_base=timedelta(0))),
        )
        if wave.runs_done.wait(0.01):
            return


def prober(store: InvoiceStore, in_flight: WritesInFlight, wave: Wave, figures: Figures, seed: int) -> None:
    """Claims invoices whose holder is inside a write; times the bounce."""
    rng = random.Random(seed)
    samples = 0
    while not wave.runs_done.is_set() and samples < 12:
        picked = in_flight.pick(rng)
        if picked is None:
            wave.runs_done.wait(0.002)
            continue
        invoice_id, token = picked
        began = time.perf_counter()
        won = claim_chunk(store, [(invoice_id, None)], "probe")
        elapsed_ms = (time.perf_counter() - began) * 1000
        if won:
            # The holder released the invoice (it failed) before the probe came: hand it back.
            figures.add("probe_won")
            for c in won:
                store.claims.fail(
                    c.job_id, "chaos probe hands it back", max_attempts=10**6, retry_base=timedelta(0)
                )
            continue
        if in_flight.still(invoice_id, token):
            samples += 1
            with figures.lock:
                figures.bounce_ms.append(elapsed_ms)


def reviewer(store: InvoiceStore, rng: random.Random, figures: Figures, released: list[UUID]) -> None:
    """A person working the review queue while the runs race: each action takes the lock."""
    with psycopg.connect(store.database_url) as conn:
        rows = conn.execute(
            "SELECT id, duplicate_status FROM invoices WHERE status = 'needs_review' ORDER BY random() LIMIT 3"
        ).fetchall()
    actor = Actor("chaos-reviewer", "review:chaos")
    for invoice_id, duplicate_status in rows:
        if duplicate_status == "suspected":
            action = rng.choice(["not_duplicate", "confirm_duplicate", "reject"])
        else:
            action = rng.choice(["approve", "approve", "reject"])
        outcome = act(store, action, invoice_id, actor, "chaos review")  # type: ignore[arg-type]
        figures.add(f"review_{action}_{'applied' if outcome.done else 'refused'}")
        if outcome.done and outcome.to_status == "pending":
            released.append(invoice_id)


def stuck_peer(url: str, targets: list[tuple[UUID, tuple[int, ...]]], rng: random.Random, wave: Wave) -> int:
    """Holds an earlier original's row, or its dedupe advisory locks, for a moment, a few times:
    copies deciding against it wait in the middle of their writes. Returns how many holds."""
    holds = 0
    wave.barrier.wait()
    with psycopg.connect(url) as conn:
        while not wave.runs_done.is_set() and holds < 4 and targets:
            original, lock_ids = rng.choice(targets)
            if rng.random() < 0.5:
                conn.execute("SELECT 1 FROM invoices WHERE id = %s FOR UPDATE", (original,))
            else:
                for lock_id in lock_ids:
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_id,))
            wave.runs_done.wait(rng.uniform(0.02, 0.15))
            conn.rollback()
            holds += 1
            wave.runs_done.wait(rng.uniform(0.0, 0.05))
    return holds


def lock_targets(store: InvoiceStore, limit: int = 20) -> list[tuple[UUID, tuple[int, ...]]]:
    """Recent originals and the advisory locks a decision against them takes."""
    with psycopg.connect(store.database_url) as conn:
        rows = conn.execute(
            "SELECT id, org_id, fields FROM invoices WHERE duplicate_status = 'original' AND fields IS NOT NULL "
            "ORDER BY seq DESC LIMIT %s",
            (limit,),
        ).fetchall()
    targets = []
    for invoice_id, org_id, fields in rows:
        candidate = MatchCandidate.from_fields(str(invoice_id), org_id, InvoiceFields.from_json(fields))
        targets.append((invoice_id, decision_lock_ids(candidate.block, candidate.number)))
    return targets


def dead_run(store: InvoiceStore, invoice_id: UUID) -> None:
    """A run that claims and dies: its heartbeat is older than the TTL, nobody keeps it."""
    claimed = claim_chunk(store, [(invoice_id, None)], "dead-run")
    if claimed:
        with psycopg.connect(store.database_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE processing_jobs SET heartbeat_at = heartbeat_at - interval '1 hour' WHERE id = %s",
                (claimed[0].job_id,),
            )


def in_threads(targets: list[Callable[[], object]]) -> list[BaseException]:
    errors: list[BaseException] = []

    def guarded(target: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:
                errors.append(exc)

        return run

    threads = [threading.Thread(target=guarded(t), daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    return errors


def run(ctx: ChaosContext, params: dict[str, int], seed: int) -> ScenarioResult:
    trials, runs = params["trials"], params.get("runs", 4)
    result = ScenarioResult("contention", seed, dict(params))
    rng = random.Random(seed)
    url = ctx.new_database()
    install_audit(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(LIVE_MARKED_FAILED_SQL)
    in_flight = WritesInFlight()
    figures = Figures()
    waves = max(1, -(-trials // runs))
    with timed(result):
        setup = InvoiceStore(url, max_size=2)
        run_stores = [InstrumentedStore(url, in_flight, max_size=3, lock_ttl=TTL) for _ in range(runs)]
        keepers = [LeaseKeeper(s.claims.heartbeat_many, HEARTBEAT) for s in run_stores]
        sweep_store = InvoiceStore(url, max_size=1, lock_ttl=TTL)
        probe_store = InvoiceStore(url, max_size=1, lock_ttl=TTL)
        review_store = InvoiceStore(url, max_size=2, lock_ttl=TTL)
        deadlocks_before = _deadlocks(url)
        originals: list[tuple[str, str, str, str | None]] = []
        released: list[UUID] = []
        try:
            with Watcher(url) as watcher:
                for w in range(waves):
                    fresh = make_documents(setup, rng, w, originals)
                    pool = fresh + released
                    released.clear()
                    dead_run(setup, rng.choice(fresh))
                    plan = [
                        rng.sample(pool, k=rng.randint(max(1, len(pool) // 2), len(pool)))
                        for _ in range(runs)
                    ]
                    injected = race_one_wave(
                        Crew(url, run_stores, keepers, sweep_store, probe_store, review_store, in_flight),
                        w,
                        Wave(pool, runs),
                        plan,
                        random.Random(rng.random()),
                        figures,
                        released,
                        result,
                    )
                    result.failures_injected += injected
                    _after_wave(url, w, keepers, result, figures)
                _drain(setup, result, figures)
            watcher.report(result)
        finally:
            for keeper in keepers:
                keeper.stop()
            for s in [setup, sweep_store, probe_store, review_store, *run_stores]:
                s.close()
        result.trials = waves * runs
        _figures(
            url, result, figures, run_stores + [sweep_store, probe_store, review_store], deadlocks_before
        )
        result.figures["invoices_by_status"] = _check_invariants(url, result)
    ctx.cleanup()
    return result


@dataclass(frozen=True)
class Crew:
    """Who takes part in every wave: the runs' stores and keepers, the sweeper, prober, reviewer."""

    url: str
    run_stores: list[InstrumentedStore]
    keepers: list[LeaseKeeper]
    sweep_store: InvoiceStore
    probe_store: InvoiceStore
    review_store: InvoiceStore
    in_flight: WritesInFlight


def race_one_wave(
    crew: Crew,
    w: int,
    wave: Wave,
    plan: list[list[UUID]],
    rng: random.Random,
    figures: Figures,
    released: list[UUID],
    result: ScenarioResult,
) -> int:
    """The runs (one per planned chunk) and a stuck peer start together at the wave's barrier,
    with the sweeper, the prober and the reviewer working until the runs end. Returns the holds
    the stuck peer injected."""
    targets = lock_targets(crew.run_stores[0])
    holds: list[int] = []
    peer_rng, probe_seed, review_rng = (
        random.Random(rng.random()),
        rng.randrange(2**32),
        random.Random(rng.random()),
    )
    jobs: list[Callable[[], object]] = [
        partial(
            racing_run,
            crew.run_stores[slot],
            crew.keepers[slot],
            f"run-{w}-{slot}",
            [(i, None) for i in picked],
            wave,
            figures,
        )
        for slot, picked in enumerate(plan)
    ]
    jobs.append(lambda: holds.append(stuck_peer(crew.url, targets, peer_rng, wave)))
    background: list[Callable[[], object]] = [
        partial(sweeper, crew.sweep_store, wave, figures),
        partial(prober, crew.probe_store, crew.in_flight, wave, figures, probe_seed),
        partial(reviewer, crew.review_store, review_rng, figures, released),
    ]
    runs = threading.Thread(target=_when_runs_end, args=(jobs, wave, figures), daemon=True)
    runs.start()
    for exc in in_threads(background):
        result.violate(f"wave {w}: a background thread raised {type(exc).__name__}: {exc}")
    runs.join(600)
    return sum(holds)


# check_common_invariants assumes that no person acted. A person's action is a job of its own
# (succeeded), a rejection leaves a processed original unposted, and confirming or rejecting a
# suspected duplicate decides it: for the invoices a person acted on, these three checks (the
# same queries as in chaos/common.py, counted here) are replaced by review-aware ones below;
# every other invoice gets them unchanged.
REVIEW_AFFECTED = {
    "has no ledger posting": (
        "SELECT i.id FROM invoices i LEFT JOIN ledger_postings l ON l.invoice_id = i.id "
        "WHERE i.status = 'processed' AND i.duplicate_status = 'original' AND l.id IS NULL"
    ),
    "succeeded jobs": (
        "SELECT i.id FROM invoices i LEFT JOIN processing_jobs j ON j.invoice_id = i.id "
        "WHERE i.status = 'processed' GROUP BY i.id "
        "HAVING count(j.id) FILTER (WHERE j.status = 'succeeded') <> 1"
    ),
    "was decided without a person": (
        "SELECT i.id FROM invoices i LEFT JOIN approvals a ON a.invoice_id = i.id "
        "WHERE i.duplicate_status = 'suspected' AND (i.status <> 'needs_review' OR a.invoice_id IS NOT NULL)"
    ),
}


def _check_invariants(url: str, result: ScenarioResult) -> dict[str, int]:
    checked = ScenarioResult(result.name, result.seed, result.params)
    counts = check_common_invariants(url, checked, audited=True)
    with psycopg.connect(url) as conn:
        reviewed = {str(r[0]) for r in conn.execute("SELECT DISTINCT invoice_id FROM review_actions")}
        excused = sum(
            1
            for sql in REVIEW_AFFECTED.values()
            for (inv,) in conn.execute(sql).fetchall()
            if str(inv) in reviewed
        )
        for (inv,) in conn.execute(
            "SELECT i.id FROM invoices i JOIN ledger_postings l ON l.invoice_id = i.id "
            "LEFT JOIN approvals a ON a.invoice_id = i.id WHERE a.decision IS DISTINCT FROM 'approved'"
        ).fetchall():
            result.violate(f"invoice {inv} posted without an approval")
        for (inv,) in conn.execute(
            "SELECT r.invoice_id FROM review_actions r JOIN ledger_postings l ON l.invoice_id = r.invoice_id "
            "WHERE r.action IN ('reject', 'confirm_duplicate')"
        ).fetchall():
            result.violate(f"invoice {inv} posted although a person rejected it")
    kept = [
        message
        for message in checked.violations
        if not (any(part in message for part in REVIEW_AFFECTED) and any(inv in message for inv in reviewed))
    ]
    for message in kept:
        result.violate(message)
    unlisted = checked.figures.get("violation_count", 0) - excused - len(kept)
    for _ in range(max(0, unlisted)):
        result.violate("a violation of check_common_invariants beyond the first 50 it lists")
    result.figures["reviewed_invoices"] = len(reviewed)
    return counts


def _when_runs_end(jobs: list[Callable[[], object]], wave: Wave, figures: Figures) -> None:
    errors = in_threads(jobs)
    for exc in errors:
        figures.problem(f"a run thread raised {type(exc).__name__}: {exc}")
        figures.add("stage_exceptions")
    wave.runs_done.set()


def _after_wave(
    url: str, w: int, keepers: list[LeaseKeeper], result: ScenarioResult, figures: Figures
) -> None:
    """Every run of the wave has ended: none may leave a lease held, kept alive, or running."""
    for keeper in keepers:
        held = keeper.held()
        if held:
            figures.add("leases_held_with_no_worker", len(held))
            result.violate(f"wave {w}: {len(held)} lease(s) still heartbeated after their run ended")
            for job_id in held:
                keeper.drop(job_id)
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT id, owner FROM processing_jobs WHERE status = 'running' AND owner NOT IN ('dead-run')"
        ).fetchall()
    if rows:
        figures.add("leases_held_with_no_worker", len(rows))
        result.violate(f"wave {w}: {len(rows)} job(s) still running after their run ended: {rows[:3]}")


def _drain(store: InvoiceStore, result: ScenarioResult, figures: Figures) -> None:
    """What is left due (released by a reviewer, left by the dead runs) goes through, as the sensor would."""
    # The runs are over: every lease still running is a dead one's, stale to a TTL of 0.
    ended = InvoiceStore(store.database_url, max_size=1, lock_ttl=timedelta(0))
    try:
        ended.maintenance.release_stale_locks()
    finally:
        ended.close()
    store.maintenance.reschedule_orphans(max_attempts=10**6, retry_base=timedelta(0))
    for _ in range(10):
        with psycopg.connect(store.database_url) as conn:
            due = [
                r[0] for r in conn.execute("SELECT id FROM invoices WHERE status IN ('pending', 'failed')")
            ]
        if not due:
            return
        figures.add("drained", len(due))
        chunk = claim_chunk(store, [(i, None) for i in due], "drain")
        process_chunk(stage_env(store), chunk)
        store.maintenance.reschedule_orphans(max_attempts=10**6, retry_base=timedelta(0))
    result.violate("invoices still due after draining ten times")


def _deadlocks(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def _figures(
    url: str, result: ScenarioResult, figures: Figures, stores: list[InvoiceStore], deadlocks_before: int
) -> None:
    counts = figures.counts
    with psycopg.connect(url) as conn:
        live_swept = conn.execute(
            "SELECT count(*) FROM processing_jobs WHERE error LIKE 'swept:%%' AND owner <> 'dead-run'"
        ).fetchone()
        dead_swept = conn.execute(
            "SELECT count(*) FROM processing_jobs WHERE error LIKE 'swept:%%' AND owner = 'dead-run'"
        ).fetchone()
        marked = conn.execute(
            "SELECT invoice_id, job_id, new_status FROM chaos_live_marked_failed"
        ).fetchall()
    # The stores are closed: their sessions flush their statistics as they exit, and the server
    # publishes them within about half a second.
    time.sleep(0.6)
    contention: Counter[str] = Counter()
    for s in stores:
        contention.update(s.contention)
    bounce, claim = figures.bounce_ms, figures.claim_ms
    f = result.figures
    f.update(
        {
            "runs": result.trials,
            "claims_requested": counts["claims_requested"],
            "claimed": counts["claimed"],
            "bounced": counts["bounced"],
            "completed": counts["completed"],
            "claim_ms_p50": round(statistics.median(claim), 2) if claim else 0.0,
            "claim_ms_p95": round(percentile(claim, 0.95), 2),
            "bounce_probes_while_holder_mid_write": len(bounce),
            "bounce_ms_p50": round(statistics.median(bounce), 2) if bounce else 0.0,
            "bounce_ms_p95": round(percentile(bounce, 0.95), 2),
            "bounce_ms_p99": round(percentile(bounce, 0.99), 2),
            "bounce_ms_max": round(max(bounce), 2) if bounce else 0.0,
            "bounces_over_50ms": sum(1 for ms in bounce if ms >= BOUNCE_TARGET_MS),
            "probe_won": counts["probe_won"],
            "deadlocks": _deadlocks(url) - deadlocks_before,
            "contention_retries": dict(sorted(contention.items())),
            "stages_failed_by_contention": counts["stages_failed_by_contention"],
            "stages_failed_by_others_claims": counts["stages_failed_by_contention"]
            + counts["stage_exceptions"],
            "stage_exceptions": counts["stage_exceptions"],
            "failed_outcomes": counts["failed_outcomes"],
            "lost_outcomes": counts["lost_outcomes"],
            "live_leases_swept": int(live_swept[0]) if live_swept else 0,
            "dead_leases_swept": int(dead_swept[0]) if dead_swept else 0,
            "live_invoices_marked_failed": len(marked),
            "leases_held_with_no_worker": counts["leases_held_with_no_worker"],
            "sweeps": counts["sweeps"],
            "orphans_rescheduled": counts["orphans_rescheduled"],
            "drained": counts["drained"],
            "reviews": {
                k.removeprefix("review_"): v for k, v in sorted(counts.items()) if k.startswith("review_")
            },
        }
    )
    for message in figures.problems[:20]:
        result.violate(message)
    for key in (
        "stages_failed_by_others_claims",
        "failed_outcomes",
        "lost_outcomes",
        "live_leases_swept",
        "live_invoices_marked_failed",
    ):
        if f[key] and not any(key in v for v in result.violations):
            result.violate(f"{key} = {f[key]} (target 0)")
    for invoice_id, job_id, status in marked[:10]:
        result.violate(f"invoice {invoice_id} marked {status} while job {job_id} held it")
    if bounce and f["bounce_ms_p95"] >= BOUNCE_TARGET_MS:
        result.violate(
            f"a bounce off a holder mid-write took {f['bounce_ms_p95']} ms at p95 (target < 50 ms)"
        )
    if not bounce:
        result.violate("no bounce off a holder mid-write was measured")
