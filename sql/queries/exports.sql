-- Export targets and the delivery of the outbox (invoice_pipeline/engine/store/exports.py,
-- sql/0025; docs/exports.md). Export rows are written only with their posting (post_to_ledger,
-- documents.sql); here they are claimed, heartbeated, fenced, swept, reported and redriven.

-- name: add_target
INSERT INTO export_targets (org_id, name, kind, settings, batch_size, max_attempts, retry_base)
VALUES (%(org_id)s, %(name)s, %(kind)s, %(settings)s, %(batch_size)s, %(max_attempts)s, %(retry_base)s)
RETURNING id, org_id, name, kind, settings, enabled, batch_size, max_attempts, retry_base

-- name: targets
SELECT id, org_id, name, kind, settings, enabled, batch_size, max_attempts, retry_base
FROM export_targets
WHERE (%(org_id)s::text IS NULL OR org_id = %(org_id)s)
ORDER BY org_id, name

-- name: set_target_enabled
UPDATE export_targets SET enabled = %(enabled)s
WHERE org_id = %(org_id)s AND name = %(name)s
RETURNING id

-- The targets with rows due now (the sensor's question and `export run`'s plan).
-- name: targets_due
SELECT t.id, t.org_id, t.name, t.kind, t.settings, t.enabled, t.batch_size, t.max_attempts, t.retry_base
FROM export_targets t
WHERE EXISTS (
    SELECT 1 FROM exports e
    WHERE e.target_id = t.id AND e.status = 'due' AND e.next_attempt_at <= now()
      AND NOT EXISTS (SELECT 1 FROM export_jobs j WHERE j.export_id = e.id AND j.status = 'running')
)
ORDER BY t.id

-- name: claim_batch
SELECT export_id, job_id, attempt, batch_id
FROM claim_export_batch(%(target_id)s, %(limit)s, %(owner)s)

-- One heartbeat for every export lease of a process; returns the jobs still running. Never waits
-- (SKIP LOCKED): a job row a fenced write holds is being written and counts alive.
-- name: heartbeat_export_locks
WITH beat AS (
    UPDATE export_jobs SET heartbeat_at = clock_timestamp()
    WHERE id IN (
        SELECT id FROM export_jobs WHERE id = ANY(%(job_ids)s) AND status = 'running'
        ORDER BY id FOR UPDATE SKIP LOCKED
    )
)
SELECT id FROM export_jobs WHERE id = ANY(%(job_ids)s) AND status = 'running'

-- The leases a deliverer (a Dagster delivery run) took: the sweep's reconciler judges the run by them.
-- name: export_jobs_of_owner
SELECT id AS job_id, export_id, status, error,
       extract(epoch FROM clock_timestamp() - coalesce(finished_at, heartbeat_at))::float8 AS idle_seconds
FROM export_jobs
WHERE owner = %(owner)s
ORDER BY started_at

-- name: release_stale_export_locks
SELECT release_stale_export_locks(%(stale_after)s)

-- What a target needs to deliver a batch: every row of the batch (a DATEV file holds them all,
-- whatever each one's status), with its posting, invoice and vendor. In seq order: the order a
-- file lists them in never changes.
-- name: batch_items
SELECT e.id AS export_id, e.posting_id, e.invoice_id, e.seq, p.amount, p.currency, p.invoice_number,
       p.issue_date, p.due_date, p.iban, p.vendor_id, p.registered_name, p.registered_vat_id,
       p.printed_seller_name, p.printed_seller_vat_id, p.payment_means, p.correction_choice,
       p.corrects_invoice_id, p.posted_at, i.document_sha256, i.document_type,
       coalesce((SELECT array_agg(vi.kind || ':' || vi.shown ORDER BY vi.kind, vi.value)
                 FROM vendor_identifiers vi
                 WHERE vi.org_id = p.org_id AND vi.vendor_id = p.vendor_id AND vi.kind <> 'name'),
                '{}') AS vendor_identifiers
FROM exports e
JOIN ledger_postings p ON p.id = e.posting_id
JOIN invoices i ON i.id = e.invoice_id
WHERE e.batch_id = %(batch_id)s
ORDER BY e.seq

-- name: batch_created_at
SELECT created_at FROM export_batches WHERE id = %(batch_id)s

-- The fence of an outcome (sql/0025 fence_export_jobs): the jobs still running, their rows locked.
-- name: fence_exports
SELECT fenced_job_id AS job_id, fenced_export_id AS export_id FROM fence_export_jobs(%(job_ids)s::uuid[])

-- name: mark_delivered
UPDATE exports SET status = 'delivered', delivered_at = clock_timestamp(), answer = %(answer)s
WHERE id = %(export_id)s

-- A failed attempt: due again after the target's backoff, or dead once its attempts reach the limit.
-- name: mark_failed
UPDATE exports e
SET status = CASE WHEN %(final)s OR e.attempts >= t.max_attempts THEN 'dead' ELSE 'due' END,
    next_attempt_at = now() + t.retry_base * power(2, GREATEST(e.attempts - 1, 0)),
    answer = %(answer)s
FROM export_targets t
WHERE e.id = %(export_id)s AND t.id = e.target_id
RETURNING e.status

-- name: finish_export_job
UPDATE export_jobs SET status = %(status)s, finished_at = clock_timestamp(), error = %(error)s
WHERE id = %(job_id)s AND status = 'running'

-- Per target: rows due (waiting or being delivered), delivered, dead-lettered.
-- name: status
SELECT t.org_id, t.name, t.kind, t.enabled,
       count(e.id) FILTER (WHERE e.status = 'due') AS due,
       count(e.id) FILTER (WHERE e.status = 'due' AND EXISTS (
           SELECT 1 FROM export_jobs j WHERE j.export_id = e.id AND j.status = 'running')) AS in_flight,
       count(e.id) FILTER (WHERE e.status = 'delivered') AS delivered,
       count(e.id) FILTER (WHERE e.status = 'dead') AS dead,
       min(e.next_attempt_at) FILTER (WHERE e.status = 'due') AS next_due
FROM export_targets t LEFT JOIN exports e ON e.target_id = t.id
WHERE (%(org_id)s::text IS NULL OR t.org_id = %(org_id)s)
GROUP BY t.id ORDER BY t.org_id, t.name

-- name: dead_letters
SELECT e.id AS export_id, e.invoice_id, t.org_id, t.name AS target, e.attempts, e.answer
FROM exports e JOIN export_targets t ON t.id = e.target_id
WHERE e.status = 'dead' AND (%(org_id)s::text IS NULL OR t.org_id = %(org_id)s)
ORDER BY e.seq

-- Redrive dead letters: due again now, attempts from zero, in the batch they were in (a DATEV
-- file is written again with the same name and bytes).
-- name: requeue
UPDATE exports e SET status = 'due', attempts = 0, next_attempt_at = now(), redrives = e.redrives + 1
FROM export_targets t
WHERE t.id = e.target_id AND e.status = 'dead'
  AND (%(org_id)s::text IS NULL OR t.org_id = %(org_id)s)
  AND (%(target)s::text IS NULL OR t.name = %(target)s)
  AND (%(export_ids)s::uuid[] IS NULL OR e.id = ANY(%(export_ids)s::uuid[]))
RETURNING e.id
