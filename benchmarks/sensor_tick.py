"""sensor_tick: store.claims.claim_due_invoices(limit=100) as the invoice table grows.

The table holds a constant 200 due (pending) invoices plus a growing number of processed ones,
so only the history grows. The query should go through the partial index `invoices_due`, whose
entries are only the pending/failed rows, and cost the same at 1k and 100k invoices.
claim_due_invoices marks what it returns as requested: requested_at is reset between rounds.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import psycopg

from benchmarks.harness import (
    BenchContext,
    BenchResult,
    cell,
    explain,
    index_names,
    pivot,
    plot_lines,
    register,
    server_execution_ms,
)
from invoice_pipeline.db.sqlfiles import query
from invoice_pipeline.engine.store import InvoiceStore

NAME = "sensor_tick"
DUE = 200
LIMIT = 100
REQUEST_TIMEOUT = timedelta(minutes=10)

ADD_PROCESSED = """
INSERT INTO invoices (org_id, status, attempts, next_attempt_at, created_at, updated_at)
SELECT 'bench', 'processed', 1, now() - interval '30 days', now() - interval '30 days', now() - interval '30 days'
FROM generate_series(1, %s)
"""
ADD_DUE = """
INSERT INTO invoices (org_id, status, next_attempt_at)
SELECT 'bench', 'pending', now() - interval '1 minute' FROM generate_series(1, %s)
"""
RESET_REQUESTS = "UPDATE invoices SET requested_at = NULL WHERE requested_at IS NOT NULL"


@register(NAME, "the sensor's claim_due_invoices(limit=100) with 1k / 10k / 100k invoices")
def run(ctx: BenchContext) -> BenchResult:
    sizes = [1_000, 10_000, 100_000]
    rounds = ctx.pick(15, 50)
    result = BenchResult(
        NAME,
        f"Median time of store.claims.claim_due_invoices(limit={LIMIT}) with {DUE} due invoices and the rest "
        "processed, as the table grows.",
        params={"invoices": sizes, "due": DUE, "limit": LIMIT, "rounds": rounds},
    )
    labels = [f"{n:,}" for n in sizes]
    url = ctx.database("sensor_tick")
    store = InvoiceStore(url, min_size=1, max_size=1)
    params: dict[str, Any] = {"limit": LIMIT, "request_timeout": REQUEST_TIMEOUT, "requested_by": None}
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(ADD_DUE, (DUE,))
            total = DUE
            for size, label in zip(sizes, labels, strict=True):
                conn.execute(ADD_PROCESSED, (size - total,))
                total = size
                conn.execute("VACUUM ANALYZE invoices")
                for r in range(rounds + 3):
                    conn.execute(RESET_REQUESTS)
                    t = time.perf_counter()
                    claimed = store.claims.claim_due_invoices(LIMIT, REQUEST_TIMEOUT)
                    client_ms = (time.perf_counter() - t) * 1000
                    if len(claimed) != LIMIT:
                        raise AssertionError(f"claimed {len(claimed)} invoices, expected {LIMIT}")
                    conn.execute(RESET_REQUESTS)
                    with conn.transaction(force_rollback=True):
                        server_ms = server_execution_ms(conn, query("claim_due_invoices"), params)
                    if r < 3:
                        continue  # warm-up: buffers and the pool's connection
                    result.figure(f"@{label}: client", "ms").add(client_ms)
                    result.figure(f"@{label}: server", "ms").add(server_ms)
                conn.execute(RESET_REQUESTS)
                plan = explain(conn, query("claim_due_invoices"), params)
                result.explains[f"claim_due_invoices @{label} invoices"] = plan
                used = index_names(plan)
                result.check(
                    f"uses invoices_due @{label}",
                    "invoices_due" in used,
                    "indexes: " + (", ".join(used) or "none (sequential scan)"),
                    fatal=False,
                )
                # What the plan would be without the index the planner preferred: DDL is
                # transactional, so the DROP is rolled back with the EXPLAIN.
                result.explains[
                    f"claim_due_invoices @{label} invoices, invoices_by_status dropped (rolled back)"
                ] = explain(
                    conn, query("claim_due_invoices"), params, [("DROP INDEX invoices_by_status", ())]
                )
    finally:
        store.close()
    for side in ("client", "server"):
        result.ratio(f"{side} {labels[-1]} / {labels[0]}", f"@{labels[-1]}: {side}", f"@{labels[0]}: {side}")
    result.tables.append(
        pivot(
            "claim_due_invoices, median ms (min–max)",
            ["client", "server"],
            labels,
            lambda row, col: cell(result.find(f"@{col}: {row}")),
        )
    )
    scanned = {c.detail for c in result.checks}
    result.notes.append(
        "Index choice for the due CTE: " + "; ".join(sorted(scanned)) + ". When the planner prefers "
        "invoices_by_status (status = ANY('{pending,failed}')) it too reads only the due rows, then sorts them; "
        "invoices_due would return them already in (next_attempt_at, seq) order. Both are O(due rows). "
        "The outer UPDATE joins back to invoices by id: watch its plan (hash join over a sequential scan of "
        "the whole table on small tables, nested loop on invoices_pkey on large ones) in the plans below."
    )
    result.notes.append(
        "client = store.claims.claim_due_invoices wall time (pool checkout + check + transaction + sort); "
        "server = EXPLAIN ANALYZE execution time of the same query in a rolled-back transaction."
    )
    result.plots.append(
        plot_lines(
            ctx.out_dir / "sensor_tick.png",
            f"claim_due_invoices(limit={LIMIT}) vs table size",
            "invoices in table",
            "ms (median, min–max)",
            {
                s: ([float(n) for n in sizes], [result.get(f"@{lab}: {s}") for lab in labels])
                for s in ("client", "server")
            },
            logx=True,
        )
    )
    return result
