-- The fence (invoice_pipeline/engine/store/base.py): every write a pipeline step or a review
-- action makes runs in a transaction that first passes `fence` or `fence_chunk`, so it lands
-- only while its job holds the lock.

-- Fencing: every write a step makes runs in a transaction that first passes this statement.
-- fence_jobs (sql/0009) locks the invoice row, then the job row (the lock order), and checks
-- that the job is still the running one. The row locks last until the write commits: a sweep
-- skips a row being written, and a write that comes after a sweep finds no running row and is
-- refused: no zombie write can land. It also counts as a heartbeat: a holder that is writing
-- is alive. A write beats again as it commits (beat_at_commit): whatever it waited for after
-- its fence does not age its lease.
-- name: fence
SELECT fenced_job_id AS id FROM fence_jobs(ARRAY[%(job_id)s]::uuid[])
WHERE fenced_invoice_id = %(invoice_id)s

-- The fence for a chunk: every lease of the chunk in one statement, inside the transaction that
-- writes the stage's results. Returns the jobs still running; the others were swept or finished,
-- and nothing is written for their invoices.
-- name: fence_chunk
SELECT fenced_job_id AS id FROM fence_jobs(%(job_ids)s::uuid[])

-- A fenced write's last statement before it commits: the heartbeat of its jobs still running.
-- The fence beat them when the write began (sql/0013: only a beat older than a second), but a
-- write may then wait on a row (up to the store's lock_timeout) or a dedupe lock, and the
-- keeper's heartbeat skips a row being written: without this beat the job's committed
-- heartbeat would come out of the write as old as the wait, and a claim right after the commit
-- would sweep the live lease. The rows are this transaction's already (the fence locked them),
-- so it waits for nothing; the same one-second rule as the fence spares the index a new row
-- version on every quick write.
-- name: beat_at_commit
UPDATE processing_jobs SET heartbeat_at = clock_timestamp()
WHERE id = ANY(%(job_ids)s::uuid[]) AND status = 'running'
  AND heartbeat_at < clock_timestamp() - interval '1 second'

-- Why a fence refused: for the LeaseLost message.
-- name: job_status
SELECT status, error FROM processing_jobs WHERE id = %(job_id)s

-- The stage's result for these invoices was saved: written in the transaction that saved it.
-- name: record_executed
INSERT INTO step_events (invoice_id, job_id, step, event)
SELECT invoice_id, job_id, %(step)s, 'executed'
FROM unnest(%(invoice_ids)s::uuid[], %(job_ids)s::uuid[]) AS c(invoice_id, job_id)
