-- The durable job lock, its lease and its sweep.

-- Acquire: one INSERT. The loser bounces off processing_jobs_one_running_per_invoice and
-- gets NULL. ON CONFLICT ... DO NOTHING avoids the subtransaction that the seed's
-- EXCEPTION WHEN unique_violation block opens on every call.
CREATE FUNCTION acquire_processing_lock(p_invoice_id uuid, p_attempt integer, p_owner text DEFAULT NULL)
RETURNS uuid
LANGUAGE sql
AS $$
    INSERT INTO processing_jobs (invoice_id, attempt, status, owner, started_at, heartbeat_at)
    VALUES (p_invoice_id, p_attempt, 'running', p_owner, clock_timestamp(), clock_timestamp())
    ON CONFLICT (invoice_id) WHERE status = 'running' DO NOTHING
    RETURNING id
$$;

CREATE FUNCTION heartbeat_processing_lock(p_job_id uuid)
RETURNS boolean
LANGUAGE sql
AS $$
    WITH beat AS (
        UPDATE processing_jobs SET heartbeat_at = clock_timestamp()
        WHERE id = p_job_id AND status = 'running'
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM beat)
$$;

CREATE FUNCTION finish_processing_lock(p_job_id uuid, p_status text, p_error text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('succeeded', 'failed') THEN
        RAISE EXCEPTION 'finish_processing_lock: status must be succeeded or failed, got %', p_status
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE processing_jobs
    SET status = p_status, finished_at = clock_timestamp(), error = p_error
    WHERE id = p_job_id AND status = 'running';
    RETURN FOUND;
END;
$$;

-- Flip running jobs whose last heartbeat is older than p_stale_after (database clock) to
-- failed. Two branches rather than "p_invoice_id IS NULL OR invoice_id = p_invoice_id", which
-- the planner cannot match to either index.
CREATE FUNCTION release_stale_locks(p_invoice_id uuid DEFAULT NULL,
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
        UPDATE processing_jobs
        SET status = 'failed', finished_at = clock_timestamp(),
            error = format('swept: no heartbeat since %s (stale after %s)', heartbeat_at, p_stale_after)
        WHERE status = 'running' AND heartbeat_at < clock_timestamp() - p_stale_after;
    ELSE
        UPDATE processing_jobs
        SET status = 'failed', finished_at = clock_timestamp(),
            error = format('swept: no heartbeat since %s (stale after %s)', heartbeat_at, p_stale_after)
        WHERE invoice_id = p_invoice_id AND status = 'running'
          AND heartbeat_at < clock_timestamp() - p_stale_after;
    END IF;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;

-- The audit trail is append-only: jobs are never deleted, and a finished job never changes,
-- so a zombie cannot resurrect or rewrite its own history.
CREATE FUNCTION processing_jobs_guard() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'processing_jobs rows are the audit trail and are never deleted'
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF OLD.status <> 'running' THEN
        RAISE EXCEPTION 'processing job % is already %, it cannot change', OLD.id, OLD.status
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER processing_jobs_append_only
    BEFORE UPDATE OR DELETE ON processing_jobs
    FOR EACH ROW EXECUTE FUNCTION processing_jobs_guard();
