-- Claiming a chunk of invoices in one statement.
--
-- The set-returning companion of acquire_processing_lock (0002), with the same meaning per
-- invoice: the partial unique index on processing_jobs (invoice_id) WHERE status = 'running' is
-- the lock, and an invoice someone holds is skipped, not an error. It also does what
-- InvoiceStore.acquire does after the insert: an invoice that is already finished, or rests
-- until a person acts, is never reopened.
--
-- Order of events, per invoice, in id order (so two overlapping chunks wait on each other
-- instead of deadlocking):
--   1. lock the invoice row, re-reading its status as of now (READ COMMITTED re-checks the
--      WHERE on the newest version): a holder that completed the invoice while this statement
--      waited has made it terminal, and it is skipped;
--   2. insert the running job; ON CONFLICT DO NOTHING is the lock's "no";
--   3. mark the invoice processing for the jobs that were inserted.
-- The rows come back in arrival order (invoices.seq), the order the stages work them in.
-- p_attempts may hold NULLs (or be NULL): those invoices take their next attempt.
CREATE FUNCTION acquire_processing_locks(p_invoice_ids uuid[], p_attempts integer[], p_owner text)
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
        ORDER BY i.id
        FOR UPDATE OF i
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
    -- In arrival order: the stages work a chunk in this order, so of two copies in one chunk the
    -- one that arrived first is decided first, and becomes the original.
    SELECT t.invoice_id, m.org_id, t.id, t.attempt
    FROM taken t JOIN marked m ON m.id = t.invoice_id
    ORDER BY m.seq
$$;
