"""metrics_scrape: one Prometheus scrape (`invoice-pipeline metrics`, /metrics) over 1M invoices.

The history is bulk-generated with the metric triggers on (sql/0018_metrics.sql), so the
counters hold what the pipeline's writes would have left: invoices in every status (most of them
processed, a backlog due, some held with reasons, dead letters), one finished job per invoice
(some swept), a posting per processed invoice in three currencies. The first scrape folds the
generated deltas (timed apart: it happens once); then each round times a whole scrape through
prometheus-client (fold, reads, exposition), after a few new invoices and postings so that every
scrape has deltas to fold, as in production. Target: <= 200 ms at 1M (issue 42).

Also: what the triggers cost the writes they count, as one UPDATE of 10,000 invoices' status
with the metric triggers on and off.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from benchmarks.harness import BenchContext, BenchResult, register
from invoice_pipeline.engine.metrics import exposition, registry_for
from invoice_pipeline.engine.store import InvoiceStore

NAME = "metrics_scrape"
TARGET_MS = 200.0

# Shares of the history by status (the rest is processed); needs_review ones carry reasons.
ADD_INVOICES = """
INSERT INTO invoices (org_id, status, next_attempt_at, review_since, review_reasons, duplicate_status,
                      duplicate_of, created_at, updated_at)
SELECT 'bench',
       CASE WHEN g %% 100 = 0 THEN 'pending' WHEN g %% 100 = 1 THEN 'quarantined'
            WHEN g %% 200 = 2 THEN 'needs_review' WHEN g %% 500 = 3 THEN 'failed'
            WHEN g %% 1000 = 4 THEN 'needs_attention' WHEN g %% 1000 = 5 THEN 'processing'
            ELSE 'processed' END,
       now() - interval '1 hour', now() - (g %% 1000) * interval '1 minute',
       CASE WHEN g %% 200 = 2 THEN ARRAY[CASE WHEN g %% 400 = 2 THEN 'amount_over_limit: over 10,000'
                                              ELSE 'new_vendor: first invoice' END] END,
       'original', NULL,
       now() - interval '30 days', now() - interval '30 days'
FROM generate_series(%(first)s, %(last)s) AS g
"""
ADD_JOBS = """
INSERT INTO processing_jobs (invoice_id, attempt, status, owner, started_at, heartbeat_at, finished_at, error)
SELECT id, 1, 'failed', 'bench', now() - interval '30 days', now() - interval '30 days',
       now() - interval '30 days', 'boom'
FROM invoices WHERE seq BETWEEN %(first)s AND %(last)s
"""
SWEEP_SOME = """
INSERT INTO processing_jobs (invoice_id, attempt, status, owner, started_at, heartbeat_at)
SELECT id, 2, 'running', 'bench', now() - interval '1 hour', now() - interval '1 hour'
FROM invoices WHERE seq %% 1000 = 7 AND seq BETWEEN %(first)s AND %(last)s
"""
ADD_POSTINGS = """
INSERT INTO ledger_postings (invoice_id, job_id, org_id, amount, currency)
SELECT i.id, j.id, 'bench', (i.seq %% 5000) + 0.5, (ARRAY['EUR', 'USD', 'GBP'])[1 + i.seq %% 3]
FROM invoices i JOIN processing_jobs j ON j.invoice_id = i.id AND j.attempt = 1
WHERE i.status = 'processed' AND i.seq BETWEEN %(first)s AND %(last)s
"""
METRIC_TRIGGERS = ("invoices_metric_insert_delete", "invoices_metric_update")


def _bulk(conn: psycopg.Connection[Any], first: int, last: int) -> None:
    span = {"first": first, "last": last}
    conn.execute(ADD_INVOICES, span)
    conn.execute(ADD_JOBS, span)
    conn.execute(ADD_POSTINGS, span)
    conn.execute(SWEEP_SOME, span)
    conn.execute("SELECT release_stale_locks(NULL, interval '1 minute')")


def _status_update_ms(conn: psycopg.Connection[Any], triggers_on: bool) -> float:
    """One UPDATE of 10,000 processed invoices to quarantined and back, rolled back."""
    with conn.transaction(force_rollback=True):
        if not triggers_on:
            for trigger in METRIC_TRIGGERS:
                conn.execute(f"ALTER TABLE invoices DISABLE TRIGGER {trigger}")
        t = time.perf_counter()
        conn.execute(
            "UPDATE invoices SET status = 'quarantined' WHERE seq IN "
            "(SELECT seq FROM invoices WHERE status = 'processed' ORDER BY seq LIMIT 10000)"
        )
        return (time.perf_counter() - t) * 1000


@register(NAME, "one Prometheus scrape over 1M invoices (target <= 200 ms); the triggers' write cost")
def run(ctx: BenchContext) -> BenchResult:
    size: int = ctx.pick(100_000, 1_000_000)
    rounds: int = ctx.pick(10, 30)
    result = BenchResult(
        NAME,
        f"A whole scrape (fold, reads, exposition) over {size:,} invoices, one job and a posting each, "
        f"median of {rounds} rounds each after new writes; target <= {TARGET_MS:.0f} ms at 1M.",
        params={"invoices": size, "rounds": rounds},
    )
    url = ctx.database(NAME)
    store = InvoiceStore(url, min_size=1, max_size=2)
    label = f"{size:,}"
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            t0 = time.monotonic()
            step = 250_000
            for first in range(1, size + 1, step):
                _bulk(conn, first, min(first + step - 1, size))
            for table in ("invoices", "processing_jobs", "ledger_postings"):
                conn.execute(f"VACUUM ANALYZE {table}")
            generated = time.monotonic() - t0
            ctx.log(f"{label} invoices generated in {generated:.0f} s")
            result.notes.append(
                f"Generating {label} invoices with their jobs and postings took {generated:.0f} s."
            )

            t = time.perf_counter()
            folded = store.metrics.fold_metric_counts()
            result.figure(f"first fold of the generated deltas @{label}", "ms").add(
                (time.perf_counter() - t) * 1000
            )
            result.notes.append(
                f"The first fold moved {folded:,} deltas (once; later scrapes fold what came since)."
            )
            conn.execute("VACUUM ANALYZE metric_count_deltas")

            registry = registry_for(store)
            for r in range(rounds + 3):
                # New work since the last scrape: 20 invoices, 10 of them posted.
                _bulk(conn, size + r * 20 + 1, size + r * 20 + 20)
                t = time.perf_counter()
                text = exposition(registry)
                ms = (time.perf_counter() - t) * 1000
                if r >= 3:  # warm-up: plans, buffers, the pool's connection
                    result.figure(f"scrape @{label}", "ms").add(ms)
            processed = conn.execute("SELECT count(*) FROM invoices WHERE status = 'processed'").fetchone()
            assert processed is not None
            line = f'invoice_pipeline_invoices{{status="processed"}} {float(processed[0])}'
            result.check("the scrape's processed count equals a recount", line in text.decode(), line)

            for on in (True, False, True, False, True, False):
                result.figure(f"UPDATE 10k invoices' status, triggers {'on' if on else 'off'}", "ms").add(
                    _status_update_ms(conn, on)
                )
    finally:
        store.close()
    median = result.get(f"scrape @{label}").median
    result.check(
        f"scrape <= {TARGET_MS:.0f} ms @{label}", median <= TARGET_MS, f"median {median:.1f} ms", fatal=False
    )
    return result
