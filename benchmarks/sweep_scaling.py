"""sweep_scaling: release_stale_locks must cost the same with 10k or 1M finished jobs in history.

History is bulk-generated as finished rows (the append-only trigger forbids turning running
rows into history by UPDATE, and DELETE altogether), five jobs per invoice. Five "live" running
jobs with fresh heartbeats stay throughout. Each round inserts fresh stale running rows (a
finished row cannot be put back to running), then times the global sweep (5 stale) and a
per-invoice sweep (1 stale), through InvoiceStore and as the server's own execution time.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any
from uuid import UUID

import psycopg

from benchmarks.harness import (
    BenchContext,
    BenchResult,
    cell,
    explain,
    fmt,
    index_names,
    nested_plans,
    pivot,
    plot_lines,
    register,
    server_execution_ms,
)
from invoice_pipeline.engine.store import InvoiceStore

NAME = "sweep_scaling"
JOBS_PER_INVOICE = 5
STALE = 5
STALE_AFTER = timedelta(minutes=15)

ADD_INVOICES = """
INSERT INTO invoices (org_id, status, next_attempt_at, created_at, updated_at)
SELECT 'bench', 'processed', now() - interval '30 days', now() - interval '30 days', now() - interval '30 days'
FROM generate_series(1, %s)
"""
# Finished rows straight away: history the trigger would never let us create by UPDATE.
ADD_HISTORY = """
INSERT INTO processing_jobs (invoice_id, attempt, status, owner, started_at, heartbeat_at, finished_at, error)
SELECT i.id, a, CASE WHEN a < %(per)s THEN 'failed' ELSE 'succeeded' END, 'bench-history',
       t.s, t.s + interval '1 minute', t.s + interval '2 minutes',
       CASE WHEN a < %(per)s THEN 'boom' END
FROM invoices i
CROSS JOIN generate_series(1, %(per)s) AS a
CROSS JOIN LATERAL (SELECT now() - interval '30 days' + (i.seq * %(per)s + a) * interval '1 second' AS s) AS t
WHERE i.seq > %(after_seq)s
"""
ADD_RUNNING = """
INSERT INTO processing_jobs (invoice_id, attempt, status, owner, started_at, heartbeat_at)
SELECT id, 1, 'running', %s, clock_timestamp() - %s::interval, clock_timestamp() - %s::interval
FROM unnest(%s::uuid[]) AS id
"""
# What release_stale_locks runs, branch by branch (sql/0002_lock_functions.sql), for EXPLAIN.
GLOBAL_UPDATE = """
UPDATE processing_jobs
SET status = 'failed', finished_at = clock_timestamp(),
    error = format('swept: no heartbeat since %%s (stale after %%s)', heartbeat_at, %(stale)s::interval)
WHERE status = 'running' AND heartbeat_at < clock_timestamp() - %(stale)s::interval
"""
PER_INVOICE_UPDATE = """
UPDATE processing_jobs
SET status = 'failed', finished_at = clock_timestamp(),
    error = format('swept: no heartbeat since %%s (stale after %%s)', heartbeat_at, %(stale)s::interval)
WHERE invoice_id = %(invoice)s AND status = 'running'
  AND heartbeat_at < clock_timestamp() - %(stale)s::interval
"""
SWEEP = "SELECT release_stale_locks(%s, %s)"


def _uses_index(plan: str) -> bool:
    return bool(index_names(plan)) and "Seq Scan on processing_jobs" not in plan


def _add_stale(conn: psycopg.Connection[Any], invoices: list[UUID]) -> None:
    conn.execute(ADD_RUNNING, ("bench-stale", timedelta(hours=1), timedelta(hours=1), invoices))


@register(NAME, "release_stale_locks (global, per invoice) with 10k / 100k / 1M finished jobs")
def run(ctx: BenchContext) -> BenchResult:
    sizes: list[int] = ctx.pick([10_000, 100_000], [10_000, 100_000, 1_000_000])
    rounds = ctx.pick(15, 40)
    result = BenchResult(
        NAME,
        "Median time of release_stale_locks over rounds, global and per invoice, as the history of "
        f"finished jobs grows ({JOBS_PER_INVOICE} per invoice), with {STALE} stale + 5 live running jobs.",
        params={"history_rows": sizes, "rounds": rounds, "stale_per_round": STALE},
    )
    url = ctx.database("sweep_scaling")
    store = InvoiceStore(url, min_size=1, max_size=1, lock_ttl=STALE_AFTER)
    labels = [f"{n:,}" for n in sizes]
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            # Victims (stale every round) and live holders: invoices outside the history.
            rows = conn.execute(
                "INSERT INTO invoices (org_id) SELECT 'bench' FROM generate_series(1, %s) RETURNING id",
                (STALE + 1 + 5,),
            ).fetchall()
            ids = [r[0] for r in rows]
            victims, single, live = ids[:STALE], ids[STALE], ids[STALE + 1 :]
            conn.execute(ADD_RUNNING, ("bench-live", timedelta(0), timedelta(0), live))
            max_seq_row = conn.execute("SELECT max(seq) FROM invoices").fetchone()
            assert max_seq_row is not None
            after_seq = int(max_seq_row[0])
            history = 0
            for size, label in zip(sizes, labels, strict=True):
                t0 = time.monotonic()
                add = (size - history) // JOBS_PER_INVOICE
                conn.execute(ADD_INVOICES, (add,))
                conn.execute(ADD_HISTORY, {"per": JOBS_PER_INVOICE, "after_seq": after_seq})
                after_seq += add
                history = size
                conn.execute("VACUUM ANALYZE invoices")
                conn.execute("VACUUM ANALYZE processing_jobs")
                ctx.log(f"history {label}: generated in {time.monotonic() - t0:.1f} s")
                result.notes.append(
                    f"Generating history up to {label} rows took {time.monotonic() - t0:.1f} s."
                )

                for r in range(rounds + 3):
                    warmup = r < 3  # plan caching inside the function, buffers, pool connection
                    _add_stale(conn, victims)
                    t = time.perf_counter()
                    released = store.maintenance.release_stale_locks()
                    global_ms = (time.perf_counter() - t) * 1000
                    _add_stale(conn, [single])
                    t = time.perf_counter()
                    released_one = store.maintenance.release_stale_locks(single)
                    single_ms = (time.perf_counter() - t) * 1000
                    if released != STALE or released_one != 1:
                        raise AssertionError(
                            f"sweep released {released} and {released_one}, expected {STALE} and 1"
                        )
                    _add_stale(conn, victims)
                    global_server = server_execution_ms(conn, SWEEP, (None, STALE_AFTER))
                    _add_stale(conn, [single])
                    single_server = server_execution_ms(conn, SWEEP, (single, STALE_AFTER))
                    if warmup:
                        continue
                    result.figure(f"global @{label}: client", "ms").add(global_ms)
                    result.figure(f"global @{label}: server", "ms").add(global_server)
                    result.figure(f"per-invoice @{label}: client", "ms").add(single_ms)
                    result.figure(f"per-invoice @{label}: server", "ms").add(single_server)
                left = conn.execute(
                    "SELECT count(*) FROM processing_jobs WHERE status = 'running' AND owner = 'bench-live'"
                ).fetchone()
                result.check(
                    f"live jobs untouched @{label}",
                    left is not None and left[0] == len(live),
                    f"{left[0] if left else 0} of {len(live)} live running jobs still running after every sweep",
                )

                stale_setup = [
                    (ADD_RUNNING, ("bench-stale", timedelta(hours=1), timedelta(hours=1), victims))
                ]
                single_setup = [
                    (ADD_RUNNING, ("bench-stale", timedelta(hours=1), timedelta(hours=1), [single]))
                ]
                plan_global = explain(conn, GLOBAL_UPDATE, {"stale": STALE_AFTER}, stale_setup)
                plan_single = explain(
                    conn, PER_INVOICE_UPDATE, {"stale": STALE_AFTER, "invoice": single}, single_setup
                )
                result.explains[f"global sweep UPDATE @{label} history rows"] = plan_global
                result.explains[f"per-invoice sweep UPDATE @{label} history rows"] = plan_single
                result.check(
                    f"global sweep uses an index @{label}",
                    _uses_index(plan_global),
                    _index_names(plan_global),
                    fatal=False,
                )
                result.check(
                    f"per-invoice sweep uses an index @{label}",
                    _uses_index(plan_single),
                    _index_names(plan_single),
                    fatal=False,
                )
            # The plans PostgreSQL really runs inside the plpgsql function, at the largest size.
            with conn.transaction(force_rollback=True):
                _add_stale(conn, victims)
                with nested_plans(conn) as plans:
                    conn.execute(SWEEP, (None, STALE_AFTER))
            inner = [p for p in plans if "UPDATE processing_jobs" in p or "Update on processing_jobs" in p]
            if inner:
                result.explains[f"inside release_stale_locks (auto_explain) @{labels[-1]}"] = "\n\n".join(
                    inner
                )
    finally:
        store.close()

    big, small = labels[-1], labels[0]
    for which in ("global", "per-invoice"):
        for side in ("client", "server"):
            result.ratio(
                f"{which} {side} {big} / {small}", f"{which} @{big}: {side}", f"{which} @{small}: {side}"
            )
    result.tables.append(
        pivot(
            "sweep, median ms (min–max)",
            ["global: client", "global: server", "per-invoice: client", "per-invoice: server"],
            labels,
            lambda row, col: cell(result.find(f"{row.split(':')[0]} @{col}: {row.split(': ')[1]}")),
        )
    )
    ratio = result.ratios[1].median
    result.notes += [
        "client = store.maintenance.release_stale_locks wall time (pool checkout + check + round trip + "
        "function); server = EXPLAIN ANALYZE execution time of the same SELECT release_stale_locks(...).",
        f"Ratios pair round i of the largest size with round i of the smallest (sizes run one after the "
        f"other); global server-side {big}/{small} = {fmt(ratio)}×.",
    ]
    result.plots.append(
        plot_lines(
            ctx.out_dir / "sweep_scaling.png",
            "release_stale_locks vs history size",
            "finished jobs in history",
            "ms (median, min–max)",
            {
                f"{w} ({s})": ([float(n) for n in sizes], [result.get(f"{w} @{lab}: {s}") for lab in labels])
                for w in ("global", "per-invoice")
                for s in ("client", "server")
            },
            logx=True,
        )
    )
    return result


def _index_names(plan: str) -> str:
    return "index: " + (", ".join(index_names(plan)) or "none")
