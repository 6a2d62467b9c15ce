-- Postings delivered to the books, exactly once by key (issue 56; docs/exports.md).
--
-- A transactional outbox: the statement that writes a ledger posting (post_to_ledger,
-- sql/queries/documents.sql) writes, in the same statement and so in the fenced posting
-- transaction, one `exports` row per enabled target of the org. Nothing else creates export
-- rows: a trigger refuses any export row whose posting was not written by the inserting
-- transaction itself. So a posting without its export rows, or an export of something not
-- posted, cannot exist.
--
-- Delivery uses the invoices' own durable-lock design on the export rows: an `export_jobs` row
-- with status 'running', under a partial unique index on export_id, IS the lock (taken with
-- INSERT ... ON CONFLICT DO NOTHING, like processing_jobs, sql/0002 and 0005); it is
-- heartbeated, swept by heartbeat age on the database clock, and every outcome is written
-- behind a fence (fence_export_jobs, the shape of fence_jobs, sql/0009) that locks the export
-- rows, then the job rows, and returns only the jobs still running: a swept deliverer (a
-- zombie) cannot mark anything delivered. The append-only guard of processing_jobs applies
-- to export_jobs as it is.

-- Where an org's postings go. Settings hold no secret: a webhook names the file its secret is
-- read from at delivery time.
CREATE TABLE export_targets (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id       text NOT NULL CHECK (org_id <> ''),
    name         text NOT NULL CHECK (name <> ''),
    kind         text NOT NULL CHECK (kind IN ('datev', 'webhook')),
    settings     jsonb NOT NULL,
    enabled      boolean NOT NULL DEFAULT true,
    batch_size   integer NOT NULL DEFAULT 100 CHECK (batch_size BETWEEN 1 AND 10000),
    max_attempts integer NOT NULL DEFAULT 8 CHECK (max_attempts >= 1),
    retry_base   interval NOT NULL DEFAULT '30 seconds' CHECK (retry_base >= interval '0'),
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (org_id, name)
);

-- A batch: the rows delivered together. A DATEV batch is one file named after the batch, whose
-- content is every row of the batch: a repeated delivery writes the same bytes.
CREATE TABLE export_batches (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq        bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    target_id  bigint NOT NULL REFERENCES export_targets (id),
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The outbox: one row per posting and target, never deleted.
CREATE TABLE exports (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq             bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    posting_id      uuid NOT NULL REFERENCES ledger_postings (id),
    invoice_id      uuid NOT NULL REFERENCES invoices (id),
    org_id          text NOT NULL,
    target_id       bigint NOT NULL REFERENCES export_targets (id),
    -- due (waiting or being delivered: a running export job says which) | delivered | dead
    status          text NOT NULL DEFAULT 'due' CHECK (status IN ('due', 'delivered', 'dead')),
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    batch_id        uuid REFERENCES export_batches (id),
    redrives        integer NOT NULL DEFAULT 0,
    -- The target's last answer (HTTP status and body, the file written, the error).
    answer          text,
    delivered_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (posting_id, target_id),
    CHECK ((status = 'delivered') = (delivered_at IS NOT NULL))
);
CREATE INDEX exports_due ON exports (target_id, next_attempt_at, seq) WHERE status = 'due';
CREATE INDEX exports_by_batch ON exports (batch_id, seq);

-- Only the posting's own transaction may create its export rows (AFTER, so the posting row the
-- same statement wrote is visible; xmin is the transaction that wrote it).
CREATE FUNCTION exports_only_with_their_posting() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM ledger_postings p
        WHERE p.id = NEW.posting_id AND p.xmin = pg_current_xact_id()::xid
    ) THEN
        RAISE EXCEPTION 'export rows are written only by the transaction that posts (posting %)', NEW.posting_id
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER exports_written_with_their_posting
    AFTER INSERT ON exports
    FOR EACH ROW EXECUTE FUNCTION exports_only_with_their_posting();

-- The lock of an export row: processing_jobs' shape and rules.
CREATE TABLE export_jobs (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    export_id    uuid NOT NULL REFERENCES exports (id),
    attempt      integer NOT NULL CHECK (attempt >= 1),
    status       text NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
    owner        text,
    started_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    heartbeat_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at  timestamptz,
    error        text,
    CHECK ((status = 'running') = (finished_at IS NULL))
);
CREATE UNIQUE INDEX export_jobs_one_running_per_export ON export_jobs (export_id) WHERE status = 'running';
CREATE INDEX export_jobs_running_by_heartbeat ON export_jobs (heartbeat_at) WHERE status = 'running';
CREATE INDEX export_jobs_by_export ON export_jobs (export_id, started_at);
CREATE INDEX export_jobs_by_owner ON export_jobs (owner);

CREATE TRIGGER export_jobs_append_only
    BEFORE UPDATE OR DELETE ON export_jobs
    FOR EACH ROW EXECUTE FUNCTION processing_jobs_guard();

-- Claim one batch of a target: the oldest batch with due rows nobody holds (a batch an earlier
-- attempt made: its rows keep their batch, so a DATEV file is rewritten with the same bytes),
-- else a new batch of up to p_limit due rows without one. The export rows are locked in id
-- order before their jobs are inserted (the lock order of sql/0009: the subject row, then its
-- job); a row another claim holds is skipped, a row with a running job is left out.
CREATE FUNCTION claim_export_batch(p_target_id bigint, p_limit integer, p_owner text)
RETURNS TABLE (export_id uuid, job_id uuid, attempt integer, batch_id uuid)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_batch uuid;
BEGIN
    SELECT e.batch_id INTO v_batch FROM exports e
    WHERE e.target_id = p_target_id AND e.status = 'due' AND e.batch_id IS NOT NULL
      AND e.next_attempt_at <= now()
      AND NOT EXISTS (SELECT 1 FROM export_jobs j WHERE j.export_id = e.id AND j.status = 'running')
    ORDER BY e.seq LIMIT 1
    FOR NO KEY UPDATE SKIP LOCKED;
    IF v_batch IS NULL THEN
        PERFORM 1 FROM exports e
        WHERE e.target_id = p_target_id AND e.status = 'due' AND e.batch_id IS NULL
          AND e.next_attempt_at <= now()
        LIMIT 1;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        INSERT INTO export_batches (target_id) VALUES (p_target_id) RETURNING id INTO v_batch;
        UPDATE exports e SET batch_id = v_batch
        WHERE e.id IN (
            SELECT f.id FROM exports f
            WHERE f.target_id = p_target_id AND f.status = 'due' AND f.batch_id IS NULL
              AND f.next_attempt_at <= now()
            ORDER BY f.seq LIMIT p_limit
            FOR NO KEY UPDATE SKIP LOCKED
        );
    END IF;
    RETURN QUERY
        WITH rows AS (
            SELECT e.id FROM exports e
            WHERE e.batch_id = v_batch AND e.status = 'due'
            ORDER BY e.id
            FOR NO KEY UPDATE SKIP LOCKED
        ), taken AS (
            INSERT INTO export_jobs (export_id, attempt, status, owner)
            SELECT r.id, x.attempts + 1, 'running', p_owner
            FROM rows r JOIN exports x ON x.id = r.id
            ON CONFLICT (export_id) WHERE status = 'running' DO NOTHING
            RETURNING export_jobs.export_id, export_jobs.id, export_jobs.attempt
        ), counted AS (
            UPDATE exports e SET attempts = t.attempt
            FROM taken t WHERE e.id = t.export_id
        )
        SELECT t.export_id, t.id, t.attempt, v_batch FROM taken t;
END;
$$;

-- The fence of a delivery's outcome: fence_jobs' shape for export rows. Locks the export rows of
-- the running jobs, then the job rows, in id order, and returns the jobs still running. A job
-- swept meanwhile is not returned, and nothing is written for its row.
CREATE FUNCTION fence_export_jobs(p_job_ids uuid[])
RETURNS TABLE (fenced_job_id uuid, fenced_export_id uuid)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM 1 FROM exports e
    WHERE e.id IN (SELECT j.export_id FROM export_jobs j WHERE j.id = ANY(p_job_ids) AND j.status = 'running')
    ORDER BY e.id
    FOR NO KEY UPDATE OF e;
    RETURN QUERY
        SELECT r.id, r.export_id FROM export_jobs r
        WHERE r.id = ANY(p_job_ids) AND r.status = 'running'
        ORDER BY r.id FOR UPDATE OF r;
END;
$$;

-- The sweep of export jobs: release_stale_locks' rule (heartbeat older than the TTL, database
-- clock), skipping a row a fenced write holds (that holder is alive). A row whose attempts
-- reach its target's limit this way (a worker that dies on it every time) is dead-lettered.
CREATE FUNCTION release_stale_export_locks(p_stale_after interval)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_count integer;
BEGIN
    IF p_stale_after IS NULL OR p_stale_after < interval '0' THEN
        RAISE EXCEPTION 'release_stale_export_locks: p_stale_after must be a non-negative interval, got %', p_stale_after
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    WITH swept AS (
        UPDATE export_jobs j
        SET status = 'failed', finished_at = clock_timestamp(),
            error = format('swept: no heartbeat since %s (stale after %s)', j.heartbeat_at, p_stale_after)
        WHERE j.id IN (
            SELECT s.id FROM export_jobs s
            WHERE s.status = 'running' AND s.heartbeat_at < clock_timestamp() - p_stale_after
            ORDER BY s.id FOR UPDATE SKIP LOCKED
        )
        RETURNING j.export_id, j.error
    ), dead AS (
        UPDATE exports e SET status = 'dead', answer = s.error
        FROM swept s, export_targets t
        WHERE e.id = s.export_id AND t.id = e.target_id AND e.status = 'due'
          AND e.attempts >= t.max_attempts
    )
    SELECT count(*) INTO v_count FROM swept;
    RETURN v_count;
END;
$$;
