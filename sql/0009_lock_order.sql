-- Liveness under contention (issue 25): one lock order, and nobody waits on a live holder.
--
-- The lock order (README, "The SQL contract", "Lock order"), the same for every transaction:
--   1. dedupe advisory locks, ascending (take_dedupe_locks, sql/0003);
--   2. invoice rows, ascending id, FOR NO KEY UPDATE (the mode an UPDATE takes, so the
--      FOR KEY SHARE locks of foreign-key checks never conflict with it);
--   3. job rows (processing_jobs), ascending id.
-- Before this migration a claim went invoice -> job while a fenced write went job -> invoice:
-- a claim that should have bounced could deadlock with the holder, and the holder could be the
-- one aborted.
--
-- And the statements that must never wait on a live holder (the heartbeat, the sweep, a claim
-- that bounces) do not: a job row locked by a write in flight is skipped (SKIP LOCKED) and
-- counts as alive, because it is being written; a claim bounces off a running job it can see
-- without touching that job's rows.

-- Acquire one invoice's lock (a person's action takes it; so does InvoiceStore.acquire).
-- Same meaning as in 0002: the loser gets NULL. New: a job that was already running when the
-- call began is bounced off at once, without waiting for a write its holder has in flight; and
-- the invoice row is locked before the job row is inserted (the lock order).
CREATE OR REPLACE FUNCTION acquire_processing_lock(p_invoice_id uuid, p_attempt integer, p_owner text DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_job_id uuid;
BEGIN
    IF EXISTS (SELECT 1 FROM processing_jobs j WHERE j.invoice_id = p_invoice_id AND j.status = 'running') THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM invoices i WHERE i.id = p_invoice_id FOR NO KEY UPDATE;
    INSERT INTO processing_jobs (invoice_id, attempt, status, owner, started_at, heartbeat_at)
    VALUES (p_invoice_id, p_attempt, 'running', p_owner, clock_timestamp(), clock_timestamp())
    ON CONFLICT (invoice_id) WHERE status = 'running' DO NOTHING
    RETURNING id INTO v_job_id;
    RETURN v_job_id;
END;
$$;

-- A chunk's locks in one statement (0005), in the lock order: each invoice row (ascending id),
-- then its job. New: an invoice whose running job the statement's snapshot already sees is left
-- out before any row is locked. That is the bounce, and it waits for nothing: not for the
-- holder's fenced write in flight (which holds the invoice row and the job row), nor for the
-- deadlock detector. A holder whose claim committed after the snapshot is still caught by the
-- partial unique index, after a short wait for the invoice row.
CREATE OR REPLACE FUNCTION acquire_processing_locks(p_invoice_ids uuid[], p_attempts integer[], p_owner text)
RETURNS TABLE (invoice_id uuid, org_id text, job_id uuid, attempt integer)
LANGUAGE sql
AS $$
    WITH wanted AS (
        SELECT DISTINCT ON (w.id) w.id, w.attempt
        FROM unnest(p_invoice_ids, coalesce(p_attempts, '{}'::integer[])) WITH ORDINALITY
             AS w(id, attempt, ord)
        WHERE w.id IS NOT NULL
        ORDER BY w.id, w.ord
    ), open AS (
        SELECT i.id, i.org_id, coalesce(w.attempt, i.attempts + 1) AS attempt
        FROM invoices i JOIN wanted w ON w.id = i.id
        -- Only invoices waiting for work: new, retrying, or left 'processing' by a dead holder.
        -- Whatever rests (processed, held for a person, quarantined, dead-lettered) stays put.
        WHERE i.status IN ('pending', 'failed', 'processing')
          AND NOT EXISTS (SELECT 1 FROM processing_jobs j WHERE j.invoice_id = i.id AND j.status = 'running')
        ORDER BY i.id
        FOR NO KEY UPDATE OF i
    ), taken AS (
        INSERT INTO processing_jobs (invoice_id, attempt, status, owner, started_at, heartbeat_at)
        SELECT o.id, o.attempt, 'running', p_owner, clock_timestamp(), clock_timestamp()
        FROM open o
        ORDER BY o.id
        ON CONFLICT (invoice_id) WHERE status = 'running' DO NOTHING
        RETURNING processing_jobs.invoice_id, processing_jobs.id, processing_jobs.attempt
    ), marked AS (
        UPDATE invoices i
        SET status = 'processing', attempts = GREATEST(i.attempts, t.attempt), requested_at = NULL,
            requested_by = NULL, updated_at = now()
        FROM taken t
        WHERE i.id = t.invoice_id
        RETURNING i.id, i.org_id, i.seq
    )
    SELECT t.invoice_id, m.org_id, t.id, t.attempt
    FROM taken t JOIN marked m ON m.id = t.invoice_id
    ORDER BY m.seq
$$;

-- The fence of a write (one job or a chunk's), in the lock order: the invoice rows of the jobs
-- still running, then the job rows, which it heartbeats. Returns the jobs still running; the
-- others were swept or finished, and nothing may be written for their invoices. The row locks
-- last until the write commits: a sweep cannot slip in between (it skips a row being written),
-- and a claim of the same invoice waits for the invoice row instead of deadlocking with it.
CREATE FUNCTION fence_jobs(p_job_ids uuid[])
RETURNS TABLE (fenced_job_id uuid, fenced_invoice_id uuid)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM 1 FROM invoices i
    WHERE i.id IN (SELECT j.invoice_id FROM processing_jobs j WHERE j.id = ANY(p_job_ids) AND j.status = 'running')
    ORDER BY i.id
    FOR NO KEY UPDATE OF i;
    RETURN QUERY
        WITH fenced AS (
            UPDATE processing_jobs j SET heartbeat_at = clock_timestamp()
            WHERE j.id IN (
                SELECT r.id FROM processing_jobs r
                WHERE r.id = ANY(p_job_ids) AND r.status = 'running'
                ORDER BY r.id FOR UPDATE OF r
            )
            RETURNING j.id, j.invoice_id
        )
        SELECT f.id, f.invoice_id FROM fenced f;
END;
$$;

-- One lease's heartbeat (0002), that never waits: a row locked by its own holder's write in
-- flight is being written, so it is alive (the fence heartbeats it when it commits).
CREATE OR REPLACE FUNCTION heartbeat_processing_lock(p_job_id uuid)
RETURNS boolean
LANGUAGE sql
AS $$
    WITH beat AS (
        UPDATE processing_jobs SET heartbeat_at = clock_timestamp()
        WHERE id IN (SELECT id FROM processing_jobs WHERE id = p_job_id AND status = 'running'
                     FOR UPDATE SKIP LOCKED)
    )
    SELECT EXISTS (SELECT 1 FROM processing_jobs WHERE id = p_job_id AND status = 'running')
$$;

-- The sweep (0002), that never waits on a live holder: a job row locked by a write in flight
-- is skipped. Its holder is alive (it is writing, and the fence heartbeats it); a holder frozen
-- inside a transaction is ended by idle_in_transaction_session_timeout, kept below the lease
-- TTL (InvoiceStore), and the next sweep takes its lock. Rows are locked in id order.
CREATE OR REPLACE FUNCTION release_stale_locks(p_invoice_id uuid DEFAULT NULL,
                                               p_stale_after interval DEFAULT '15 minutes')
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_count integer;
BEGIN
    IF p_stale_after IS NULL OR p_stale_after < interval '0' THEN
        RAISE EXCEPTION 'release_stale_locks: p_stale_after must be a non-negative interval, got %', p_stale_after
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_invoice_id IS NULL THEN
        UPDATE processing_jobs j
        SET status = 'failed', finished_at = clock_timestamp(),
            error = format('swept: no heartbeat since %s (stale after %s)', j.heartbeat_at, p_stale_after)
        WHERE j.id IN (
            SELECT s.id FROM processing_jobs s
            WHERE s.status = 'running' AND s.heartbeat_at < clock_timestamp() - p_stale_after
            ORDER BY s.id FOR UPDATE SKIP LOCKED
        );
    ELSE
        UPDATE processing_jobs j
        SET status = 'failed', finished_at = clock_timestamp(),
            error = format('swept: no heartbeat since %s (stale after %s)', j.heartbeat_at, p_stale_after)
        WHERE j.id IN (
            SELECT s.id FROM processing_jobs s
            WHERE s.invoice_id = p_invoice_id AND s.status = 'running'
              AND s.heartbeat_at < clock_timestamp() - p_stale_after
            FOR UPDATE SKIP LOCKED
        );
    END IF;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;
