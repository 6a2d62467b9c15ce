-- Claims and leases (invoice_pipeline/engine/store/claims.py): taking an invoice's lock, alone
-- or a chunk at a time, heartbeating it, ending the job, and claiming due invoices for runs.

-- name: acquire_lock
SELECT acquire_processing_lock(%(invoice_id)s, %(attempt)s, %(owner)s) AS job_id

-- A finished invoice is never reopened: a request that read "not finished yet" just before
-- another holder completed it takes the lock after that commit, finds the invoice terminal here
-- and rolls its acquire back (see InvoiceStore.acquire).
-- name: mark_invoice_processing
UPDATE invoices
SET status = 'processing', attempts = GREATEST(attempts, %(attempt)s), requested_at = NULL,
    requested_by = NULL,
    updated_at = now()
WHERE id = %(invoice_id)s AND status NOT IN ('processed', 'needs_review', 'quarantined', 'needs_attention')
RETURNING id

-- name: heartbeat_lock
SELECT heartbeat_processing_lock(%(job_id)s) AS alive

-- name: finish_lock
SELECT finish_processing_lock(%(job_id)s, %(status)s, %(error)s) AS finished

-- A chunk's locks in one statement (see sql/0005): the invoices acquired, with their jobs.
-- name: acquire_locks
SELECT invoice_id, org_id, job_id, attempt
FROM acquire_processing_locks(%(invoice_ids)s::uuid[], %(attempts)s::integer[], %(owner)s)

-- One heartbeat for every lease a process holds; returns the ones still running. It never waits
-- (sql/0009): a job row locked by a write in flight (its own process's fenced write, say one
-- waiting inside a duplicate decision) is skipped and counted alive, because it is being
-- written, and the write heartbeats it as it commits (beat_at_commit, sql/queries/fence.sql).
-- So one blocked chunk never silences its siblings.
-- name: heartbeat_locks
WITH beat AS (
    UPDATE processing_jobs SET heartbeat_at = clock_timestamp()
    WHERE id IN (
        SELECT id FROM processing_jobs WHERE id = ANY(%(job_ids)s) AND status = 'running'
        ORDER BY id FOR UPDATE SKIP LOCKED
    )
)
SELECT id FROM processing_jobs WHERE id = ANY(%(job_ids)s) AND status = 'running'

-- name: current_holder
SELECT id AS job_id, invoice_id, attempt, owner, started_at, heartbeat_at,
       clock_timestamp() - heartbeat_at AS heartbeat_age
FROM processing_jobs
WHERE invoice_id = %(invoice_id)s AND status = 'running'

-- name: job_history
SELECT id AS job_id, invoice_id, attempt, status, owner, started_at, heartbeat_at, finished_at, error
FROM processing_jobs
WHERE invoice_id = %(invoice_id)s
ORDER BY attempt, started_at

-- name: jobs_of_owner
SELECT id AS job_id, invoice_id, attempt, status, owner, started_at, heartbeat_at, finished_at, error
FROM processing_jobs
WHERE owner = %(owner)s
ORDER BY started_at

-- The invoice row of a job, locked before the job is finished (the lock order): while it is held
-- no claim of the invoice can be in flight, so what the transaction reads next about its running
-- jobs is the truth.
-- name: lock_invoice_of_job
SELECT i.id FROM invoices i JOIN processing_jobs j ON j.invoice_id = i.id
WHERE j.id = %(job_id)s
FOR NO KEY UPDATE OF i

-- A held invoice ends needs_review: the pipeline went as far as it may without a person.
-- name: mark_processed
UPDATE invoices
SET status = CASE WHEN cardinality(review_reasons) > 0 THEN 'needs_review' ELSE 'processed' END,
    last_error = NULL, updated_at = now()
WHERE id = %(invoice_id)s

-- name: mark_quarantined
UPDATE invoices
SET status = 'quarantined', quarantine_code = %(code)s, quarantine_reason = %(reason)s,
    last_error = %(reason)s, updated_at = now()
WHERE id = %(invoice_id)s

-- After a failed attempt: retry later with exponential backoff, or give up. Applies to the given
-- invoices, which the caller has row-locked earlier in the same transaction (lock_orphans,
-- lock_invoice_of_job). Because a claim locks the invoice row before it inserts its job, no claim
-- of these invoices is in flight, and this statement's snapshot, taken after the locks were
-- granted, sees every claim that committed: an invoice a live job holds is never rescheduled.
-- name: reschedule_failed
WITH orphans AS (
    SELECT i.id, i.attempts,
           (SELECT j.error FROM processing_jobs j WHERE j.invoice_id = i.id
            ORDER BY j.attempt DESC, j.started_at DESC LIMIT 1) AS last_job_error
    FROM invoices i
    WHERE i.id = ANY(%(invoice_ids)s::uuid[]) AND i.status = 'processing'
      AND NOT EXISTS (SELECT 1 FROM processing_jobs j WHERE j.invoice_id = i.id AND j.status = 'running')
)
UPDATE invoices i
SET status = CASE WHEN o.attempts >= %(max_attempts)s THEN 'needs_attention' ELSE 'failed' END,
    next_attempt_at = now() + %(retry_base)s * power(2, GREATEST(o.attempts - 1, 0)),
    last_error = coalesce(%(error)s, o.last_job_error, i.last_error),
    updated_at = now()
FROM orphans o
WHERE i.id = o.id
RETURNING i.id AS invoice_id, i.status, i.attempts, i.next_attempt_at, i.last_error

-- The sensor's query. Marks what it returns as requested, so the next tick moves on to newer
-- work. A request is made once: if its run never claims the invoice (the launch was lost, or
-- the run died before claiming), the sweep schedule expires the request as a failed attempt
-- (expire_requests), and the retry is requested under the next attempt's run key — Dagster
-- would skip the same key forever, failures included. A caller may pass request_timeout to
-- re-request sooner (NULL: never). requested_by names the run the request waits for (see
-- 0004_request_owner.sql); a caller that knows it per invoice only after planning sets it with
-- assign_request_owners in the same transaction.
-- name: claim_due_invoices
WITH due AS (
    SELECT id FROM invoices
    WHERE status IN ('pending', 'failed') AND next_attempt_at <= now()
      AND (requested_at IS NULL OR requested_at < now() - %(request_timeout)s::interval)
    ORDER BY next_attempt_at, seq
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE invoices i SET requested_at = now(), requested_by = %(requested_by)s
FROM due WHERE i.id = due.id
RETURNING i.id AS invoice_id, i.org_id, i.attempts + 1 AS attempt, i.redrives AS redrive, i.seq

-- name: assign_request_owners
UPDATE invoices i SET requested_by = o.owner
FROM unnest(%(invoice_ids)s::uuid[], %(owners)s::text[]) AS o(id, owner)
WHERE i.id = o.id
