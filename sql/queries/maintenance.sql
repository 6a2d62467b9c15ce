-- The sweep (invoice_pipeline/engine/store/maintenance.py): stale locks released, orphans
-- rescheduled, requests no run will claim released or expired.

-- name: release_stale_locks
SELECT release_stale_locks(%(invoice_id)s, %(stale_after)s) AS released

-- The contract's sweep (sql/0002), for the invoices a chunk is about to claim: a dead holder's
-- lock goes at once, without waiting for the sensor's next sweep.
-- name: release_stale_locks_of
SELECT coalesce(sum(release_stale_locks(id, %(stale_after)s::interval)), 0) AS released
FROM unnest(%(invoice_ids)s::uuid[]) AS id

-- Invoices left 'processing' with no running job (their holder died and was swept), row-locked
-- for the reschedule that follows in the same transaction. SKIP LOCKED: a row someone is
-- writing (a claim, a review) is left to the next sweep, never waited for. What this statement
-- read about running jobs is only a preselection: its snapshot may predate a claim that
-- committed before the row lock was granted, so reschedule_failed checks again.
-- name: lock_orphans
SELECT i.id FROM invoices i
WHERE i.status = 'processing'
  AND NOT EXISTS (SELECT 1 FROM processing_jobs j WHERE j.invoice_id = i.id AND j.status = 'running')
ORDER BY i.id
FOR NO KEY UPDATE OF i SKIP LOCKED

-- Open requests, one row per owner: the sweep asks Dagster about each owner's run once.
-- name: open_request_owners
SELECT requested_by AS owner, count(*) AS invoices, now() - min(requested_at) AS age
FROM invoices
WHERE requested_at IS NOT NULL AND status IN ('pending', 'failed') AND requested_by IS NOT NULL
GROUP BY requested_by
ORDER BY min(requested_at)

-- Release the unclaimed requests of a run that ended or died. With count_attempt (the request
-- used a run key, which Dagster never runs twice) it is a failed attempt, retried under the
-- next attempt's key with backoff, or dead-lettered; without, the invoice is simply due again.
-- min_age spares a request whose run may still be about to appear. Rows are locked in id order and
-- a row someone holds (a claim in flight) is skipped, never waited for: the next sweep sees it.
-- name: release_requests
UPDATE invoices i
SET requested_at = NULL,
    requested_by = NULL,
    attempts = i.attempts + CASE WHEN %(count_attempt)s THEN 1 ELSE 0 END,
    status = CASE WHEN NOT %(count_attempt)s THEN i.status
                  WHEN i.attempts + 1 >= %(max_attempts)s THEN 'needs_attention'
                  ELSE 'failed' END,
    next_attempt_at = CASE WHEN %(count_attempt)s THEN now() + %(retry_base)s * power(2, i.attempts)
                           ELSE i.next_attempt_at END,
    last_error = %(reason)s,
    updated_at = now()
WHERE i.id IN (
    SELECT r.id FROM invoices r
    WHERE r.requested_by = %(owner)s AND r.requested_at IS NOT NULL AND r.status IN ('pending', 'failed')
      AND r.requested_at < now() - %(min_age)s::interval
      AND NOT EXISTS (SELECT 1 FROM processing_jobs j WHERE j.invoice_id = r.id AND j.status = 'running')
    ORDER BY r.id
    FOR NO KEY UPDATE OF r SKIP LOCKED
)
RETURNING i.id AS invoice_id, i.status, i.attempts, i.next_attempt_at, i.last_error

-- Requests older than the timeout whose invoice no run has claimed.
-- name: stale_requests
SELECT id FROM invoices
WHERE status IN ('pending', 'failed') AND requested_at < now() - %(request_timeout)s::interval
ORDER BY requested_at
LIMIT 1000

-- Count an unclaimed request as a failed attempt: retry later under a new run key, or give up.
-- Like release_requests, it skips a row someone holds instead of waiting for it.
-- name: expire_requests
UPDATE invoices i
SET requested_at = NULL,
    requested_by = NULL,
    attempts = i.attempts + 1,
    status = CASE WHEN i.attempts + 1 >= %(max_attempts)s THEN 'needs_attention' ELSE 'failed' END,
    next_attempt_at = now() + %(retry_base)s * power(2, i.attempts),
    last_error = format('run requested at %%s never claimed the invoice (launch lost, or the run died first)',
                        i.requested_at),
    updated_at = now()
WHERE i.id IN (
    SELECT r.id FROM invoices r
    WHERE r.id = ANY(%(invoice_ids)s) AND r.status IN ('pending', 'failed')
      AND r.requested_at < now() - %(request_timeout)s::interval
      AND NOT EXISTS (SELECT 1 FROM processing_jobs j WHERE j.invoice_id = r.id AND j.status = 'running')
    ORDER BY r.id
    FOR NO KEY UPDATE OF r SKIP LOCKED
)
RETURNING i.id AS invoice_id, i.status, i.attempts, i.next_attempt_at, i.last_error
