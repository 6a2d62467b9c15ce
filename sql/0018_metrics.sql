-- Counters for the Prometheus metrics (engine/metrics.py), kept so that a scrape never scans a
-- table whose size grows with history (1M invoices, their jobs, postings and step events).
--
-- The writers never contend on a counter: a trigger only INSERTs a delta row
-- (metric_count_deltas), and inserts take no lock another writer waits for. A scrape folds the
-- committed deltas into metric_counts (fold_metric_counts, one folder at a time under a
-- transaction-scoped advisory lock) and reads both tables in one statement, so it sees either
-- the deltas or their fold, never both or neither. What is small by nature (invoices in flight,
-- held, running leases, the oldest due) is read live through partial indexes instead.
--
-- A row is one series: metric, label (a status, currency, stage, kind), and for a histogram the
-- bucket's upper bound `le` (a count of the observations in that bucket alone; the scrape makes
-- them cumulative). Counters and gauges use le = 'Infinity'. `amount` is a sum: money for
-- postings, seconds for stage durations, pages for OCR.
CREATE TABLE metric_counts (
    metric text NOT NULL,
    label  text NOT NULL DEFAULT '',
    le     double precision NOT NULL DEFAULT 'Infinity',
    n      bigint NOT NULL DEFAULT 0,
    amount numeric NOT NULL DEFAULT 0,
    PRIMARY KEY (metric, label, le)
);

CREATE TABLE metric_count_deltas (
    metric text NOT NULL,
    label  text NOT NULL DEFAULT '',
    le     double precision NOT NULL DEFAULT 'Infinity',
    n      bigint NOT NULL DEFAULT 0,
    amount numeric NOT NULL DEFAULT 0
);

-- The histogram buckets of a stage's duration, in seconds (the last one is +Inf).
CREATE FUNCTION stage_seconds_bucket(p_seconds double precision) RETURNS double precision
LANGUAGE sql IMMUTABLE
AS $$
    SELECT coalesce(min(b), 'Infinity')
    FROM unnest(ARRAY[0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300]::double precision[]) AS b
    WHERE p_seconds <= b
$$;

-- Invoices by status and by duplicate decision: -1 for the old value, +1 for the new one.
CREATE FUNCTION metric_deltas_of_invoices() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        IF TG_OP = 'DELETE' OR OLD.status IS DISTINCT FROM NEW.status THEN
            INSERT INTO metric_count_deltas (metric, label, n) VALUES ('invoices', OLD.status, -1);
        END IF;
        IF OLD.duplicate_status IS NOT NULL
           AND (TG_OP = 'DELETE' OR OLD.duplicate_status IS DISTINCT FROM NEW.duplicate_status) THEN
            INSERT INTO metric_count_deltas (metric, label, n) VALUES ('duplicate_decisions', OLD.duplicate_status, -1);
        END IF;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        IF TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM NEW.status THEN
            INSERT INTO metric_count_deltas (metric, label, n) VALUES ('invoices', NEW.status, 1);
        END IF;
        IF NEW.duplicate_status IS NOT NULL
           AND (TG_OP = 'INSERT' OR OLD.duplicate_status IS DISTINCT FROM NEW.duplicate_status) THEN
            INSERT INTO metric_count_deltas (metric, label, n) VALUES ('duplicate_decisions', NEW.duplicate_status, 1);
        END IF;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER invoices_metric_insert_delete AFTER INSERT OR DELETE ON invoices
    FOR EACH ROW EXECUTE FUNCTION metric_deltas_of_invoices();
-- The WHEN clause keeps the many updates that change neither column (fields, keys, stage) free
-- of any trigger call.
CREATE TRIGGER invoices_metric_update AFTER UPDATE OF status, duplicate_status ON invoices
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.duplicate_status IS DISTINCT FROM NEW.duplicate_status)
    EXECUTE FUNCTION metric_deltas_of_invoices();

-- A lease swept (release_stale_locks writes an error starting 'swept:').
CREATE FUNCTION metric_delta_of_swept_lease() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO metric_count_deltas (metric, n) VALUES ('leases_swept', 1);
    RETURN NULL;
END;
$$;
CREATE TRIGGER processing_jobs_metric_swept AFTER UPDATE OF status ON processing_jobs
    FOR EACH ROW
    WHEN (OLD.status = 'running' AND NEW.status = 'failed' AND NEW.error LIKE 'swept:%')
    EXECUTE FUNCTION metric_delta_of_swept_lease();

-- Postings and their amount, per currency.
CREATE FUNCTION metric_delta_of_posting() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO metric_count_deltas (metric, label, n, amount) VALUES ('postings', NEW.currency, 1, NEW.amount);
    ELSE
        INSERT INTO metric_count_deltas (metric, label, n, amount) VALUES ('postings', OLD.currency, -1, -OLD.amount);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER ledger_postings_metric AFTER INSERT OR DELETE ON ledger_postings
    FOR EACH ROW EXECUTE FUNCTION metric_delta_of_posting();

-- A stage's duration for one invoice: from its 'started' breadcrumb to its 'executed' one (the
-- result saved), in the same job. Found through step_events_by_invoice.
CREATE FUNCTION metric_delta_of_stage() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_started timestamptz;
    v_seconds double precision;
BEGIN
    SELECT max(s.at) INTO v_started FROM step_events s
    WHERE s.invoice_id = NEW.invoice_id AND s.step = NEW.step AND s.job_id = NEW.job_id AND s.event = 'started';
    IF v_started IS NOT NULL THEN
        v_seconds := greatest(extract(epoch FROM NEW.at - v_started)::double precision, 0);
        INSERT INTO metric_count_deltas (metric, label, le, n, amount)
        VALUES ('stage_seconds', NEW.step, stage_seconds_bucket(v_seconds), 1, v_seconds);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER step_events_metric AFTER INSERT ON step_events
    FOR EACH ROW WHEN (NEW.event = 'executed') EXECUTE FUNCTION metric_delta_of_stage();

-- Documents read by OCR and their pages (n = documents, amount = pages), each time one is read,
-- and the OCR seconds its pages took (documents/ocr.py records them per page in `structured`).
-- A layout that cannot be read counts no seconds: a metric never refuses the pipeline's write.
CREATE FUNCTION metric_delta_of_ocr() RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_seconds numeric := 0;
BEGIN
    INSERT INTO metric_count_deltas (metric, n, amount) VALUES ('ocr', 1, coalesce(NEW.page_count, 0));
    BEGIN
        SELECT coalesce(sum((p ->> 'seconds')::numeric), 0) INTO v_seconds
        FROM jsonb_array_elements(NEW.structured::jsonb -> 'ocr' -> 'pages') AS p;
    EXCEPTION WHEN others THEN
        v_seconds := 0;
    END;
    INSERT INTO metric_count_deltas (metric, amount) VALUES ('ocr_seconds', coalesce(v_seconds, 0));
    RETURN NULL;
END;
$$;
CREATE TRIGGER extracted_texts_metric AFTER INSERT OR UPDATE ON extracted_texts
    FOR EACH ROW WHEN (NEW.method LIKE 'ocr%') EXECUTE FUNCTION metric_delta_of_ocr();

-- Fold the committed deltas into metric_counts. One folder at a time: another one returns 0 at
-- once (its scrape still reads a consistent total, see above). Returns the deltas folded.
CREATE FUNCTION fold_metric_counts() RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_folded bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended('invoice_pipeline.fold_metric_counts', 0)) THEN
        RETURN 0;
    END IF;
    WITH moved AS (
        DELETE FROM metric_count_deltas RETURNING metric, label, le, n, amount
    ), summed AS (
        SELECT metric, label, le, sum(n) AS n, sum(amount) AS amount, count(*) AS deltas
        FROM moved GROUP BY metric, label, le
    ), folded AS (
        INSERT INTO metric_counts AS c (metric, label, le, n, amount)
        SELECT metric, label, le, n, amount FROM summed
        ON CONFLICT (metric, label, le) DO UPDATE
        SET n = c.n + EXCLUDED.n, amount = c.amount + EXCLUDED.amount
    )
    SELECT coalesce(sum(deltas), 0) INTO v_folded FROM summed;
    RETURN v_folded;
END;
$$;

-- What already exists when this migration runs (scanned once, here). Stage durations and OCR
-- are counted from now on.
INSERT INTO metric_counts (metric, label, n)
SELECT 'invoices', status, count(*) FROM invoices GROUP BY status;
INSERT INTO metric_counts (metric, label, n)
SELECT 'duplicate_decisions', duplicate_status, count(*) FROM invoices
WHERE duplicate_status IS NOT NULL GROUP BY duplicate_status;
INSERT INTO metric_counts (metric, n)
SELECT 'leases_swept', count(*) FROM processing_jobs WHERE status = 'failed' AND error LIKE 'swept:%';
INSERT INTO metric_counts (metric, label, n, amount)
SELECT 'postings', currency, count(*), sum(amount) FROM ledger_postings GROUP BY currency;
