-- The Prometheus scrape (invoice_pipeline/engine/store/metrics.py). No statement here reads a
-- table whose size grows with history: the counters come from metric_counts and its deltas
-- (sql/0018_metrics.sql), the rest from partial indexes over what is small by nature.

-- name: fold_metric_counts
SELECT fold_metric_counts()

-- The folded counters plus the deltas not folded yet, in one snapshot.
-- name: metric_totals
SELECT metric, label, le, sum(n)::bigint AS n, sum(amount) AS amount
FROM (
    SELECT metric, label, le, n, amount FROM metric_counts
    UNION ALL
    SELECT metric, label, le, n, amount FROM metric_count_deltas
) AS c
GROUP BY metric, label, le
ORDER BY metric, label, le

-- Invoices not finished, by status and the last stage a holder started (invoices_by_status:
-- the cost follows the backlog, not the table).
-- name: in_flight_by_stage
SELECT status, coalesce(processing_stage, '') AS stage, count(*) AS n
FROM invoices WHERE status IN ('pending', 'processing', 'failed')
GROUP BY 1, 2 ORDER BY 1, 2

-- Held invoices by the code their reasons start with (invoices_review_queue).
-- name: held_by_reason
SELECT coalesce(substring(r FROM '^[a-z][a-z0-9_]*'), '') AS reason, count(*) AS n
FROM invoices i CROSS JOIN LATERAL unnest(coalesce(i.review_reasons, '{}')) AS r
WHERE i.status = 'needs_review'
GROUP BY 1 ORDER BY 1

-- Each through one end of a partial index: invoices_due, invoices_review_queue,
-- processing_jobs_one_running_per_invoice. Ages are 0 when nothing waits.
-- name: queue_gauges
SELECT (SELECT count(*) FROM invoices
        WHERE status IN ('pending', 'failed') AND next_attempt_at <= now()) AS due,
       coalesce(extract(epoch FROM now() - (
           SELECT min(next_attempt_at) FROM invoices
           WHERE status IN ('pending', 'failed') AND next_attempt_at <= now())), 0)::float8 AS oldest_due_seconds,
       coalesce(extract(epoch FROM now() - (
           SELECT min(review_since) FROM invoices WHERE status = 'needs_review')), 0)::float8 AS oldest_held_seconds,
       (SELECT count(*) FROM processing_jobs WHERE status = 'running') AS leases_running
