-- Read-only queries behind `invoice-pipeline status` / `show` / `process`, the report assets and
-- the asset checks (invoice_pipeline/engine/store/reporting.py).

-- name: count_by_status
SELECT status, count(*) AS n FROM invoices GROUP BY status ORDER BY status

-- name: count_by_stage
SELECT coalesce(processing_stage, '(not started)') AS stage, count(*) AS n
FROM invoices WHERE status IN ('pending', 'processing', 'failed') GROUP BY 1 ORDER BY 1

-- name: lock_summary
SELECT count(*) AS held,
       min(started_at) AS oldest_started_at,
       max(clock_timestamp() - heartbeat_at) AS stalest_heartbeat_age
FROM processing_jobs WHERE status = 'running'

-- name: duplicate_summary
SELECT count(*) FILTER (WHERE duplicate_status = 'original') AS originals,
       count(*) FILTER (WHERE duplicate_status = 'duplicate') AS duplicates,
       count(*) FILTER (WHERE duplicate_status = 'suspected') AS suspected,
       (SELECT count(*) FROM duplicate_groups) AS groups
FROM invoices

-- Every org that has invoices, the one ingested into last first (a demo's org is named
-- demo-<timestamp>): `status` lists them.
-- name: count_by_org
SELECT org_id, count(*) AS invoices, count(*) FILTER (WHERE status = 'needs_review') AS held
FROM invoices GROUP BY org_id ORDER BY max(seq) DESC

-- name: attention_list
SELECT id AS invoice_id, org_id, status,
       coalesce(quarantine_code, CASE WHEN status = 'needs_review' THEN 'review' END, '') AS code,
       coalesce(quarantine_reason, array_to_string(review_reasons, '; '), last_error, '') AS reason,
       source_filename AS filename
FROM invoices WHERE status IN ('quarantined', 'needs_attention', 'needs_review')
ORDER BY status, seq

-- name: invoice_overview
SELECT i.id AS invoice_id, i.org_id, i.status, i.processing_stage, i.attempts, i.next_attempt_at,
       i.source_filename AS filename, i.document_sha256 AS sha256, i.last_error, i.quarantine_code,
       i.quarantine_reason, i.fields, i.duplicate_status, i.duplicate_of, i.duplicate_group_id,
       i.match_how, i.match_reasons, i.review_reasons, i.created_at
FROM invoices i WHERE i.id = %(invoice_id)s

-- name: demo_outcomes
SELECT i.source_filename AS filename, i.status, i.duplicate_status, i.duplicate_of,
       o.source_filename AS original_filename, i.match_how, coalesce(i.quarantine_code, '') AS code,
       coalesce(i.quarantine_reason, array_to_string(i.review_reasons, '; '), i.last_error, '') AS reason,
       a.decision AS approval, (l.id IS NOT NULL) AS posted
FROM invoices i
LEFT JOIN invoices o ON o.id = i.duplicate_of
LEFT JOIN approvals a ON a.invoice_id = i.id
LEFT JOIN ledger_postings l ON l.invoice_id = i.id
WHERE i.org_id = %(org_id)s
ORDER BY i.source_filename

-- How the given invoices stand now: `invoice-pipeline process` reports and exits by it.
-- name: status_counts_of
SELECT status, count(*) AS n FROM invoices WHERE id = ANY(%(invoice_ids)s::uuid[]) GROUP BY status ORDER BY status

-- What a chunk amounts to, for its assets' metadata.
-- name: totals_by_currency
SELECT currency, count(*) AS invoices, sum(payable_total) AS total
FROM invoices
WHERE id = ANY(%(invoice_ids)s::uuid[]) AND currency IS NOT NULL AND payable_total IS NOT NULL
GROUP BY currency ORDER BY currency

-- name: vendor_spend
SELECT l.org_id, coalesce(i.seller_name, '(unknown)') AS vendor,
       date_trunc('month', coalesce(i.issue_date, l.posted_at::date))::date AS month,
       l.currency, sum(l.amount) AS amount, count(*) AS invoices
FROM ledger_postings l JOIN invoices i ON i.id = l.invoice_id
GROUP BY 1, 2, 3, 4 ORDER BY 1, 3, 2

-- name: duplicate_report
SELECT g.id AS group_id, g.org_id, o.id AS original_id, o.source_filename AS original_file,
       d.id AS duplicate_id, d.source_filename AS duplicate_file, d.match_how AS how,
       d.match_score AS score, array_to_string(d.match_reasons, '; ') AS reasons,
       d.payable_total AS amount_at_risk, d.currency
FROM duplicate_groups g
JOIN invoices o ON o.id = g.original_invoice_id
JOIN invoices d ON d.duplicate_group_id = g.id AND d.duplicate_status = 'duplicate'
ORDER BY g.created_at, d.seq

-- One row per held invoice and reason, for the pandas report asset.
-- name: review_queue_report
SELECT i.id::text AS invoice_id, i.org_id, substring(r FROM '^[a-z][a-z0-9_]*') AS reason,
       i.payable_total AS amount, i.currency,
       extract(epoch FROM now() - coalesce(i.review_since, i.updated_at)) / 86400.0 AS age_days
FROM invoices i CROSS JOIN LATERAL unnest(coalesce(i.review_reasons, '{}')) AS r
WHERE i.status = 'needs_review'
ORDER BY i.review_since, i.seq

-- name: processing_latency
SELECT i.id AS invoice_id, i.org_id, i.status, i.attempts,
       extract(epoch FROM (max(j.finished_at) - i.created_at)) AS seconds_to_done
FROM invoices i JOIN processing_jobs j ON j.invoice_id = i.id
WHERE i.status IN ('processed', 'quarantined', 'needs_attention', 'needs_review')
GROUP BY i.id

-- Invariant checks: each returns the offending ids; empty means the invariant holds.
-- name: check_posted_twice
SELECT invoice_id::text AS id FROM ledger_postings GROUP BY invoice_id HAVING count(*) > 1

-- An exact or suspected copy must never reach the ledger: that is paying one invoice twice.
-- name: check_copies_posted
SELECT i.id::text AS id FROM invoices i JOIN ledger_postings l ON l.invoice_id = i.id
WHERE i.duplicate_status IN ('duplicate', 'suspected')

-- name: check_stale_running_locks
SELECT id::text AS id FROM processing_jobs
WHERE status = 'running' AND heartbeat_at < clock_timestamp() - %(ttl)s

-- name: check_groups_without_one_original
SELECT g.id::text AS id
FROM duplicate_groups g
LEFT JOIN invoices o ON o.id = g.original_invoice_id AND o.duplicate_status = 'original'
WHERE o.id IS NULL
   OR (SELECT count(*) FROM invoices i WHERE i.duplicate_group_id = g.id AND i.duplicate_status = 'original') > 1
   OR EXISTS (SELECT 1 FROM invoices d WHERE d.duplicate_group_id = g.id AND d.duplicate_status = 'duplicate'
              AND d.duplicate_of <> g.original_invoice_id)

-- name: check_stuck_invoices
SELECT id::text AS id FROM invoices
WHERE status IN ('pending', 'processing', 'failed') AND created_at < now() - %(threshold)s

-- name: check_review_queue_age
SELECT id::text AS id FROM invoices
WHERE status = 'needs_review' AND coalesce(review_since, updated_at) < now() - %(max_age)s::interval
ORDER BY review_since, seq
