-- The fence (0009) heartbeats only a lease whose heartbeat is more than a second old.
--
-- Every fenced write of a chunk refreshed every job row's heartbeat: a stage writes a chunk
-- several times (results saved as they finish, breadcrumbs), so a chunk of 250 rewrote 250 job
-- rows a dozen times, and heartbeat_at is indexed (the sweep's index), so each was a new row
-- version with new index entries: a third of the database's time in `invoice-pipeline process`.
-- The fence still locks every job row (the sweep skips a row being written) and returns only
-- the running ones; a heartbeat younger than a second is as good as a new one for a TTL of
-- seconds, and it is what the heartbeat thread keeps fresh anyway.
CREATE OR REPLACE FUNCTION fence_jobs(p_job_ids uuid[])
RETURNS TABLE (fenced_job_id uuid, fenced_invoice_id uuid)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM 1 FROM invoices i
    WHERE i.id IN (SELECT j.invoice_id FROM processing_jobs j WHERE j.id = ANY(p_job_ids) AND j.status = 'running')
    ORDER BY i.id
    FOR NO KEY UPDATE OF i;
    RETURN QUERY
        WITH locked AS (
            SELECT r.id, r.invoice_id, r.heartbeat_at FROM processing_jobs r
            WHERE r.id = ANY(p_job_ids) AND r.status = 'running'
            ORDER BY r.id FOR UPDATE OF r
        ), beat AS (
            UPDATE processing_jobs j SET heartbeat_at = clock_timestamp()
            FROM locked l
            WHERE j.id = l.id AND l.heartbeat_at < clock_timestamp() - interval '1 second'
        )
        SELECT l.id, l.invoice_id FROM locked l;
END;
$$;
