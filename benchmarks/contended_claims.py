"""contended_claims: 8 processes fight over 100 invoices; prove no invoice ever had two holders.

Each process repeatedly picks a random invoice and tries our acquire; when it wins it brackets
its critical section with two database-clock readings (taken after the acquire returned and
before the finish is sent), heartbeats in between, and finishes. Proof of mutual exclusion:
1. per invoice, the winners' critical sections [start, end] (database clock) never overlap;
2. per invoice, the jobs' own [started_at, finished_at] intervals never overlap;
3. a sampler polling `... WHERE status = 'running' GROUP BY invoice_id HAVING count(*) > 1`
   during the run never sees a second running row.

A negative control runs the same loop with a check-then-insert acquire and the unique index
dropped, to show the checks do catch double holders when the lock is broken.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from benchmarks.harness import BenchContext, BenchResult, Gang, Sampler, WorkerContext, register
from invoice_pipeline.db.sqlfiles import query

NAME = "contended_claims"
PROCESSES = 8
INVOICES = 100
OWNER = "bench-contended"

DOUBLE_HOLDERS = """
SELECT (SELECT count(*) FROM processing_jobs WHERE status = 'running'),
       (SELECT count(*) FROM (SELECT invoice_id FROM processing_jobs WHERE status = 'running'
                              GROUP BY 1 HAVING count(*) > 1) AS d)
"""
# Sorted by start per invoice, any overlap shows up between neighbours (the earliest-starting
# member of an overlapping pair overlaps its successor), so lag() is a complete check. The start
# is heartbeat_at, not started_at: every winner heartbeats exactly once, after its acquire
# returned, whereas started_at is clock_timestamp() evaluated in the INSERT's VALUES *before*
# the unique index arbitrates, so it can precede the previous holder's finish (see notes).
JOB_OVERLAPS = """
SELECT count(*) FILTER (WHERE heartbeat_at < prev_end),
       count(*) FILTER (WHERE started_at < prev_end),
       coalesce(extract(epoch FROM max(prev_end - started_at) FILTER (WHERE started_at < prev_end)), 0)
FROM (
    SELECT started_at, heartbeat_at,
           lag(finished_at) OVER (PARTITION BY invoice_id ORDER BY heartbeat_at) AS prev_end
    FROM processing_jobs WHERE owner = %s
) AS j
"""
# The broken acquire for the negative control: check, then insert, no unique index behind it.
UNPROTECTED_ACQUIRE = """
INSERT INTO processing_jobs (invoice_id, attempt, status, owner, started_at, heartbeat_at)
SELECT %(invoice_id)s, %(attempt)s, 'running', %(owner)s, clock_timestamp(), clock_timestamp()
WHERE NOT EXISTS (SELECT 1 FROM processing_jobs WHERE invoice_id = %(invoice_id)s AND status = 'running')
RETURNING id
"""


def claim_task(
    w: WorkerContext, *, invoices: list[UUID], duration: float, seed: int, protected: bool
) -> dict[str, Any]:
    rng = random.Random(seed * 1000 + w.index)
    acquire = query("acquire_lock") if protected else UNPROTECTED_ACQUIRE
    conn = w.conn
    attempts = 0
    won: list[tuple[UUID, UUID, datetime, datetime]] = []
    t0 = w.start_together()
    deadline = t0 + duration
    while time.monotonic() < deadline:
        invoice = rng.choice(invoices)
        attempts += 1
        row = conn.execute(acquire, {"invoice_id": invoice, "attempt": 1, "owner": OWNER}).fetchone()
        job = None if row is None else row[0]
        if job is None:
            continue
        start = conn.execute("SELECT clock_timestamp()").fetchone()
        beat = conn.execute("SELECT heartbeat_processing_lock(%s), clock_timestamp()", (job,)).fetchone()
        assert start is not None and beat is not None
        if not beat[0]:
            raise AssertionError(f"job {job} lost its lock while holding it")
        won.append((invoice, job, start[0], beat[1]))
        conn.execute(query("finish_lock"), {"job_id": job, "status": "succeeded", "error": None})
    return {"attempts": attempts, "won": won, "elapsed": time.monotonic() - t0}


def overlapping_sections(won: list[tuple[UUID, UUID, datetime, datetime]]) -> int:
    by_invoice: dict[UUID, list[tuple[datetime, datetime]]] = defaultdict(list)
    for invoice, _job, start, end in won:
        by_invoice[invoice].append((start, end))
    overlaps = 0
    for sections in by_invoice.values():
        sections.sort()
        overlaps += sum(1 for a, b in zip(sections, sections[1:], strict=False) if b[0] < a[1])
    return overlaps


class DoubleHolderSampler:
    def __init__(self) -> None:
        self.samples = 0
        self.busy_samples = 0
        self.violations = 0

    def __call__(self, conn: psycopg.Connection[Any]) -> None:
        row = conn.execute(DOUBLE_HOLDERS).fetchone()
        assert row is not None
        self.samples += 1
        self.busy_samples += int(row[0] > 0)
        self.violations += int(row[1])


def _round(
    url: str, gang: Gang, invoices: list[UUID], duration: float, seed: int, protected: bool
) -> tuple[list[dict[str, Any]], DoubleHolderSampler, tuple[int, int, float]]:
    sampler = DoubleHolderSampler()
    with Sampler(url, sampler, interval=0.005):
        out = gang.run(
            claim_task, {"invoices": invoices, "duration": duration, "seed": seed, "protected": protected}
        )
    with psycopg.connect(url) as conn:
        row = conn.execute(JOB_OVERLAPS, (OWNER,)).fetchone()
        assert row is not None
    return out, sampler, (int(row[0]), int(row[1]), float(row[2]))


@register(NAME, "8 processes acquiring random invoices of 100: throughput and proof of no double holder")
def run(ctx: BenchContext) -> BenchResult:
    rounds = ctx.pick(3, 5)
    duration = ctx.pick(1.0, 4.0)
    result = BenchResult(
        NAME,
        f"{PROCESSES} processes, {INVOICES} invoices; each process repeatedly tries our acquire on a random "
        "invoice and finishes what it wins. Mutual exclusion is checked three ways (see checks).",
        params={
            "processes": PROCESSES,
            "invoices": INVOICES,
            "rounds": rounds,
            "seconds_per_round": duration,
        },
    )
    url = ctx.database("contended_claims")
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "INSERT INTO invoices (org_id) SELECT 'bench' FROM generate_series(1, %s) RETURNING id",
            (INVOICES,),
        ).fetchall()
    invoices = [r[0] for r in rows]
    total_wins = total_attempts = sections_overlap = job_overlaps = started_before_prev_end = 0
    max_early = 0.0
    samples = busy = violations = 0
    with Gang(PROCESSES, url) as gang:
        for r in range(rounds):
            out, sampler, (overlaps_db, early_starts, early_by) = _round(
                url, gang, invoices, duration, r, protected=True
            )
            attempts = sum(o["attempts"] for o in out)
            won = [w for o in out for w in o["won"]]
            elapsed = max(o["elapsed"] for o in out)
            result.figure("attempts/s", "attempts/s", "higher").add(attempts / elapsed)
            result.figure("wins/s", "wins/s", "higher").add(len(won) / elapsed)
            result.figure("win rate", "%", "higher").add(100 * len(won) / attempts)
            result.figure("wins per round", "wins", "higher").add(len(won))
            total_wins += len(won)
            total_attempts += attempts
            sections_overlap += overlapping_sections(won)
            # Cumulative over all rounds: the query reads every job of the run.
            job_overlaps, started_before_prev_end, max_early = overlaps_db, early_starts, early_by
            samples += sampler.samples
            busy += sampler.busy_samples
            violations += sampler.violations
    result.check(
        "critical sections never overlap (per invoice, DB clock)",
        sections_overlap == 0,
        f"{sections_overlap} overlaps among {total_wins} critical sections",
    )
    result.check(
        "job rows never overlap (heartbeat_at..finished_at)",
        job_overlaps == 0,
        f"{job_overlaps} overlaps among {total_wins} jobs",
    )
    result.check(
        "never two running rows for one invoice (sampled)",
        violations == 0 and busy > 0,
        f"{violations} violations in {samples} samples, {busy} of which saw running jobs",
    )
    result.notes.append(f"Totals over {rounds} rounds: {total_attempts} attempts, {total_wins} wins.")
    result.notes.append(
        f"{started_before_prev_end} of {total_wins} jobs have started_at before the previous job's finished_at "
        f"(by up to {max_early * 1000:.2f} ms). Not a double holder: started_at is clock_timestamp() "
        "evaluated in the acquire's VALUES list before ON CONFLICT arbitrates (and waits for the previous "
        "holder's finish to commit), so it records when the attempt began, not when the lock was granted."
    )

    # Negative control: the same loop with a broken lock must be caught by the same checks.
    ctx.log("negative control: check-then-insert without the unique index")
    control_url = ctx.database("contended_control")
    with psycopg.connect(control_url, autocommit=True) as conn:
        conn.execute("DROP INDEX processing_jobs_one_running_per_invoice")
        rows = conn.execute(
            "INSERT INTO invoices (org_id) SELECT 'bench' FROM generate_series(1, %s) RETURNING id",
            (INVOICES,),
        ).fetchall()
    with Gang(PROCESSES, control_url) as gang:
        out, sampler, (overlaps_db, _, _) = _round(
            control_url, gang, [r[0] for r in rows], duration, 99, protected=False
        )
    won = [w for o in out for w in o["won"]]
    caught = overlapping_sections(won) + overlaps_db + sampler.violations
    result.notes.append(
        "Negative control (check-then-insert acquire, unique index dropped, same 8×100 loop, 1 round): "
        f"{overlapping_sections(won)} overlapping critical sections, {overlaps_db} overlapping job intervals, "
        f"{sampler.violations} sampled double holders among {len(won)} wins — "
        + (
            "the checks do detect a broken lock."
            if caught
            else "no race happened to be caught in this round, so this run does not demonstrate the checks' power."
        )
    )
    return result
