-- Queries for the durable job lock. Loaded by name by invoice_pipeline.db.sqlfiles.

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
-- written and the fence heartbeats it. So one blocked chunk never silences its siblings.
-- name: heartbeat_locks
WITH beat AS (
    UPDATE processing_jobs SET heartbeat_at = clock_timestamp()
    WHERE id IN (
        SELECT id FROM processing_jobs WHERE id = ANY(%(job_ids)s) AND status = 'running'
        ORDER BY id FOR UPDATE SKIP LOCKED
    )
)
SELECT id FROM processing_jobs WHERE id = ANY(%(job_ids)s) AND status = 'running'

-- name: release_stale_locks
SELECT release_stale_locks(%(invoice_id)s, %(stale_after)s) AS released

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

-- Fencing: every write a step makes runs in a transaction that first passes this statement.
-- fence_jobs (sql/0009) locks the invoice row, then the job row (the lock order), and checks
-- that the job is still the running one. The row locks last until the write commits: a sweep
-- skips a row being written, and a write that comes after a sweep finds no running row and is
-- refused: no zombie write can land. It also counts as a heartbeat: a holder that is writing
-- is alive.
-- name: fence
SELECT fenced_job_id AS id FROM fence_jobs(ARRAY[%(job_id)s]::uuid[])
WHERE fenced_invoice_id = %(invoice_id)s

-- The fence for a chunk: every lease of the chunk in one statement, inside the transaction that
-- writes the stage's results. Returns the jobs still running; the others were swept or finished,
-- and nothing is written for their invoices.
-- name: fence_chunk
SELECT fenced_job_id AS id FROM fence_jobs(%(job_ids)s::uuid[])

-- The invoice row of a job, locked before the job is finished (the lock order): while it is held
-- no claim of the invoice can be in flight, so what the transaction reads next about its running
-- jobs is the truth.
-- name: lock_invoice_of_job
SELECT i.id FROM invoices i JOIN processing_jobs j ON j.invoice_id = i.id
WHERE j.id = %(job_id)s
FOR NO KEY UPDATE OF i

-- Why a fence refused: for the LeaseLost message.
-- name: job_status
SELECT status, error FROM processing_jobs WHERE id = %(job_id)s
