-- Read-only queries behind `invoice-pipeline status` / `show` and the report assets.

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
       (SELECT count(*) FROM duplicate_groups) AS groups
FROM invoices

-- name: attention_list
SELECT id AS invoice_id, org_id, status, coalesce(quarantine_code, '') AS code,
       coalesce(quarantine_reason, last_error, '') AS reason, source_filename AS filename
FROM invoices WHERE status IN ('quarantined', 'needs_attention')
ORDER BY status, seq

-- name: invoice_overview
SELECT i.id AS invoice_id, i.org_id, i.status, i.processing_stage, i.attempts, i.next_attempt_at,
       i.source_filename AS filename, i.document_sha256 AS sha256, i.last_error, i.quarantine_code,
       i.quarantine_reason, i.fields, i.duplicate_status, i.duplicate_of, i.duplicate_group_id,
       i.match_how, i.match_reasons, i.created_at
FROM invoices i WHERE i.id = %(invoice_id)s

-- name: demo_outcomes
SELECT i.source_filename AS filename, i.status, i.duplicate_status, i.duplicate_of,
       o.source_filename AS original_filename, i.match_how, coalesce(i.quarantine_code, '') AS code,
       coalesce(i.quarantine_reason, i.last_error, '') AS reason,
       a.decision AS approval, (l.id IS NOT NULL) AS posted
FROM invoices i
LEFT JOIN invoices o ON o.id = i.duplicate_of
LEFT JOIN approvals a ON a.invoice_id = i.id
LEFT JOIN ledger_postings l ON l.invoice_id = i.id
WHERE i.org_id = %(org_id)s
ORDER BY i.source_filename
