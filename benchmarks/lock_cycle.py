"""lock_cycle: acquire -> heartbeat -> finish, our durable lock against the alternatives.

Variants (each process cycles over its own invoices, so the uncontended rounds never collide):
- ours: the three SQL functions through the named queries InvoiceStore uses (acquire_lock,
  heartbeat_lock, finish_lock); `mark_invoice_processing` is left out because no other variant
  has an equivalent invoice-row write.
- exception: the seed's plpgsql `EXCEPTION WHEN unique_violation` acquire, same heartbeat/finish.
- bare_sql: INSERT + UPDATE + UPDATE on processing_jobs, no functions: the three-round-trip floor.
- for_update: `SELECT ... FOR UPDATE SKIP LOCKED` on the invoice row, transaction held across
  the cycle (BEGIN, SELECT, COMMIT). Not durable: the lock dies with the transaction.
- advisory: session pg_try_advisory_lock / pg_advisory_unlock. Not durable either.

Then the contended case: every process hammers ONE invoice with ours vs the EXCEPTION form;
a loser of the EXCEPTION form pays a subtransaction (and assigns transaction ids and leaves a
dead heap tuple), a loser of ON CONFLICT pays neither.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any
from uuid import UUID

import psycopg

from benchmarks.harness import (
    BenchContext,
    BenchResult,
    Gang,
    WorkerContext,
    cell,
    next_xid,
    percentile,
    pivot,
    plot_lines,
    register,
    wal_lsn,
)
from invoice_pipeline.db.sqlfiles import query

NAME = "lock_cycle"
VARIANTS = ("ours", "exception", "bare_sql", "for_update", "advisory")
CONTENDED_VARIANTS = ("ours", "exception")
OWNER = "bench-lock-cycle"

# The seed's acquire, recreated only in the benchmark database for comparison.
EXCEPTION_FUNCTION = """
CREATE FUNCTION acquire_processing_lock_exception(p_invoice_id uuid, p_attempt int, p_owner text DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v uuid;
BEGIN
    INSERT INTO processing_jobs (invoice_id, attempt, status, owner, started_at, heartbeat_at)
    VALUES (p_invoice_id, p_attempt, 'running', p_owner, clock_timestamp(), clock_timestamp())
    RETURNING id INTO v;
    RETURN v;
EXCEPTION WHEN unique_violation THEN
    RETURN NULL;
END;
$$
"""

ACQUIRE_EXCEPTION = "SELECT acquire_processing_lock_exception(%(invoice_id)s, %(attempt)s, %(owner)s)"
BARE_INSERT = """
INSERT INTO processing_jobs (invoice_id, attempt, status, owner, started_at, heartbeat_at)
VALUES (%s, 1, 'running', %s, clock_timestamp(), clock_timestamp())
RETURNING id
"""
BARE_HEARTBEAT = (
    "UPDATE processing_jobs SET heartbeat_at = clock_timestamp() WHERE id = %s AND status = 'running'"
)
BARE_FINISH = """
UPDATE processing_jobs SET status = 'succeeded', finished_at = clock_timestamp()
WHERE id = %s AND status = 'running'
"""
FOR_UPDATE = "SELECT id FROM invoices WHERE id = %s FOR UPDATE SKIP LOCKED"


# -- one cycle per variant (run in the worker processes) ---------------------------------------


def _acquire(conn: psycopg.Connection[Any], statement: str, invoice: UUID) -> UUID | None:
    row = conn.execute(statement, {"invoice_id": invoice, "attempt": 1, "owner": OWNER}).fetchone()
    return None if row is None else row[0]


def _heartbeat_finish(conn: psycopg.Connection[Any], job: UUID) -> None:
    conn.execute(query("heartbeat_lock"), {"job_id": job})
    conn.execute(query("finish_lock"), {"job_id": job, "status": "succeeded", "error": None})


def cycle_ours(conn: psycopg.Connection[Any], invoice: UUID, key: int) -> bool:
    job = _acquire(conn, query("acquire_lock"), invoice)
    if job is None:
        return False
    _heartbeat_finish(conn, job)
    return True


def cycle_exception(conn: psycopg.Connection[Any], invoice: UUID, key: int) -> bool:
    job = _acquire(conn, ACQUIRE_EXCEPTION, invoice)
    if job is None:
        return False
    _heartbeat_finish(conn, job)
    return True


def cycle_bare(conn: psycopg.Connection[Any], invoice: UUID, key: int) -> bool:
    row = conn.execute(BARE_INSERT, (invoice, OWNER)).fetchone()
    assert row is not None
    conn.execute(BARE_HEARTBEAT, (row[0],))
    conn.execute(BARE_FINISH, (row[0],))
    return True


def cycle_for_update(conn: psycopg.Connection[Any], invoice: UUID, key: int) -> bool:
    with conn.transaction():
        return conn.execute(FOR_UPDATE, (invoice,)).fetchone() is not None


def cycle_advisory(conn: psycopg.Connection[Any], invoice: UUID, key: int) -> bool:
    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
    if not (row and row[0]):
        return False
    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
    return True


CYCLES: dict[str, Callable[[psycopg.Connection[Any], UUID, int], bool]] = {
    "ours": cycle_ours,
    "exception": cycle_exception,
    "bare_sql": cycle_bare,
    "for_update": cycle_for_update,
    "advisory": cycle_advisory,
}


def uncontended_task(
    w: WorkerContext, *, variant: str, invoices: list[UUID], keys: list[int], duration: float
) -> dict[str, Any]:
    cycle = CYCLES[variant]
    latencies: list[float] = []
    n = len(invoices)
    i = 0
    t0 = w.start_together()
    deadline = t0 + duration
    now = t0
    while now < deadline:
        if not cycle(w.conn, invoices[i % n], keys[i % n]):
            raise AssertionError(f"{variant}: uncontended acquire of {invoices[i % n]} failed")
        i += 1
        t = time.monotonic()
        latencies.append(t - now)
        now = t
    return {"cycles": len(latencies), "elapsed": now - t0, "latencies": latencies}


def contended_task(w: WorkerContext, *, variant: str, invoice: UUID, duration: float) -> dict[str, Any]:
    """Hammer one invoice: lose most attempts, finish the ones won."""
    statement = query("acquire_lock") if variant == "ours" else ACQUIRE_EXCEPTION
    lose: list[float] = []
    wins = 0
    t0 = w.start_together()
    deadline = t0 + duration
    now = t0
    while now < deadline:
        job = _acquire(w.conn, statement, invoice)
        if job is not None:
            _heartbeat_finish(w.conn, job)
            wins += 1
            now = time.monotonic()
        else:
            t = time.monotonic()
            lose.append(t - now)
            now = t
    return {"attempts": wins + len(lose), "wins": wins, "elapsed": now - t0, "lose_latencies": lose}


# -- the benchmark (parent process) ------------------------------------------------------------


def _relation_bytes(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_relation_size('processing_jobs')").fetchone()
    assert row is not None
    return int(row[0])


@register(NAME, "acquire/heartbeat/finish: ours vs EXCEPTION form, bare SQL, FOR UPDATE, advisory")
def run(ctx: BenchContext) -> BenchResult:
    levels: list[int] = [1, 4, 8]
    rounds = ctx.pick(3, 5)
    duration = ctx.pick(0.5, 2.5)
    per_worker = ctx.pick(200, 1000)
    result = BenchResult(
        NAME,
        "Per-cycle latency and cycles/s of acquire → heartbeat → finish at 1, 4 and 8 processes "
        "(spawned, one connection each, started together by a Barrier); each process cycles over its own "
        "invoices. Then 8 processes contending for ONE invoice with the ON CONFLICT vs EXCEPTION acquire.",
        params={
            "processes": levels,
            "rounds": rounds,
            "seconds_per_round": duration,
            "invoices_per_process": per_worker,
        },
    )
    url = ctx.database("lock_cycle")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(EXCEPTION_FUNCTION)
        rows = conn.execute(
            "INSERT INTO invoices (org_id) SELECT 'bench' FROM generate_series(1, %s) RETURNING id, seq",
            (per_worker * max(levels) + 1,),
        ).fetchall()
        invoices = [r[0] for r in rows]
        # Any 64-bit number per invoice does for the advisory variant; offset away from 0.
        keys = [1_000_000 + int(r[1]) for r in rows]
        hot = invoices.pop()
        keys.pop()
        conn.execute("VACUUM ANALYZE invoices")

        for n in levels:
            ctx.log(f"{n} process(es)")
            with Gang(n, url) as gang:
                work = [
                    {"invoices": invoices[i::n][:per_worker], "keys": keys[i::n][:per_worker]}
                    for i in range(n)
                ]
                for r in range(rounds):
                    # Rotate the order each round so drift (autovacuum, cache) favours no variant.
                    order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]
                    for variant in order:
                        xid0, wal0 = next_xid(conn), wal_lsn(conn)
                        out = gang.run(
                            uncontended_task, [{**w, "variant": variant, "duration": duration} for w in work]
                        )
                        xid1, wal1 = next_xid(conn), wal_lsn(conn)
                        cycles = sum(o["cycles"] for o in out)
                        elapsed = max(o["elapsed"] for o in out)
                        lat = [x for o in out for x in o["latencies"]]
                        label = f"{variant} @{n}"
                        result.figure(f"{label}: cycles/s", "cycles/s", "higher").add(cycles / elapsed)
                        result.figure(f"{label}: latency p50", "ms").add(statistics.median(lat) * 1000)
                        result.figure(f"{label}: latency p95", "ms").add(percentile(lat, 95) * 1000)
                        if n == 1:
                            result.figure(f"{variant}: xids per cycle", "xids").add((xid1 - xid0) / cycles)
                            result.figure(f"{variant}: WAL per cycle", "bytes").add((wal1 - wal0) / cycles)
                if n == max(levels):
                    ctx.log("contended: 8 processes, one invoice")
                    for r in range(rounds):
                        for variant in CONTENDED_VARIANTS[r % 2 :] + CONTENDED_VARIANTS[: r % 2]:
                            xid0, size0 = next_xid(conn), _relation_bytes(conn)
                            out = gang.run(
                                contended_task, {"variant": variant, "invoice": hot, "duration": duration}
                            )
                            xid1, size1 = next_xid(conn), _relation_bytes(conn)
                            attempts = sum(o["attempts"] for o in out)
                            wins = sum(o["wins"] for o in out)
                            elapsed = max(o["elapsed"] for o in out)
                            lose = [x for o in out for x in o["lose_latencies"]]
                            label = f"contended {variant}"
                            result.figure(f"{label}: attempts/s", "attempts/s", "higher").add(
                                attempts / elapsed
                            )
                            result.figure(f"{label}: wins/s", "wins/s", "higher").add(wins / elapsed)
                            result.figure(f"{label}: losing attempt p50", "ms").add(
                                statistics.median(lose) * 1000 if lose else float("nan")
                            )
                            result.figure(f"{label}: losing attempt p95", "ms").add(
                                percentile(lose, 95) * 1000 if lose else float("nan")
                            )
                            # Per attempt, so the two forms compare though they win different counts.
                            result.figure(f"{label}: xids per attempt", "xids").add((xid1 - xid0) / attempts)
                            result.figure(f"{label}: heap growth per 1k attempts", "bytes").add(
                                (size1 - size0) / attempts * 1000
                            )

    for variant in VARIANTS[1:]:
        for n in levels:
            result.ratio(
                f"{variant} / ours cycles/s @{n}", f"{variant} @{n}: cycles/s", f"ours @{n}: cycles/s"
            )
    result.ratio(
        "contended exception / ours attempts/s",
        "contended exception: attempts/s",
        "contended ours: attempts/s",
    )
    result.ratio(
        "contended exception / ours losing p50",
        "contended exception: losing attempt p50",
        "contended ours: losing attempt p50",
    )

    cols = [f"{m} @{n}" for m in ("cycles/s", "p50 ms", "p95 ms") for n in levels]
    metric = {"cycles/s": "cycles/s", "p50 ms": "latency p50", "p95 ms": "latency p95"}

    def cycle_cell(variant: str, col: str) -> str:
        m, n = col.rsplit(" @", 1)
        return cell(result.find(f"{variant} @{n}: {metric[m]}"))

    result.tables.append(pivot("variant (uncontended)", VARIANTS, cols, cycle_cell))
    result.tables.append(
        pivot(
            "variant (1 process)",
            VARIANTS,
            ["xids per cycle", "WAL bytes per cycle"],
            lambda v, c: cell(
                result.find(f"{v}: {'xids per cycle' if c.startswith('xids') else 'WAL per cycle'}")
            ),
        )
    )
    contended_cols = [
        "attempts/s",
        "wins/s",
        "losing attempt p50",
        "losing attempt p95",
        "xids per attempt",
        "heap growth per 1k attempts",
    ]
    result.tables.append(
        pivot(
            "contended, 8 procs, 1 invoice",
            CONTENDED_VARIANTS,
            contended_cols,
            lambda v, c: cell(result.find(f"contended {v}: {c}")),
        )
    )
    result.notes += [
        "ours, exception and bare_sql are 3 autocommit statements = 3 commits, each flushing WAL "
        "(synchronous_commit=on): the durable row lock pays for surviving a crash of the holder. "
        "for_update is BEGIN/SELECT/COMMIT; advisory is 2 statements and writes nothing.",
        "xids per cycle: the EXCEPTION form assigns one more transaction id per call than ON CONFLICT "
        "(the subtransaction opened by the EXCEPTION block gets its own xid because it inserts).",
        "Contended: a losing ON CONFLICT attempt finds the conflict in the index before inserting; a losing "
        "EXCEPTION attempt inserts a heap tuple, fails on the index, rolls back the subtransaction and leaves "
        "a dead tuple (heap growth) and burnt xids (wraparound pressure) behind.",
    ]
    xs = [float(n) for n in levels]
    result.plots.append(
        plot_lines(
            ctx.out_dir / "lock_cycle_throughput.png",
            "Lock cycle throughput (uncontended)",
            "processes",
            "cycles/s",
            {v: (xs, [result.get(f"{v} @{n}: cycles/s") for n in levels]) for v in VARIANTS},
            logy=True,
        )
    )
    result.plots.append(
        plot_lines(
            ctx.out_dir / "lock_cycle_latency.png",
            "Lock cycle latency p50 (uncontended)",
            "processes",
            "ms per cycle",
            {v: (xs, [result.get(f"{v} @{n}: latency p50") for n in levels]) for v in VARIANTS},
            logy=True,
        )
    )
    return result
