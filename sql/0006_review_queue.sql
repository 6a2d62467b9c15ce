-- People in the loop: per-org review policies, the audit trail of what people did, redrives.
--
-- A person's action (approve, reject, not-duplicate, confirm-duplicate, requeue) takes the
-- invoice's processing lock with acquire_processing_lock (0002) and writes fenced, like a
-- pipeline stage: no review races a running pipeline or another reviewer. What it did is
-- appended to review_actions.

-- What each org wants a person to see (invoice_pipeline/domain/review.py: ReviewPolicy). An org
-- without a row gets the default: no approval limit, any currency, no age limit.
CREATE TABLE review_policies (
    org_id             text PRIMARY KEY CHECK (org_id <> ''),
    auto_approve_limit numeric CHECK (auto_approve_limit >= 0),
    home_currency      text CHECK (home_currency ~ '^[A-Z]{3}$'),
    stale_after_days   integer CHECK (stale_after_days >= 1),
    updated_by         text NOT NULL,
    updated_at         timestamptz NOT NULL DEFAULT now()
);

-- A requeue is a redrive: attempts start over, so the attempt number alone would give the run
-- the run key of an earlier attempt, which Dagster skips forever. The run key carries this too.
ALTER TABLE invoices ADD COLUMN redrives integer NOT NULL DEFAULT 0 CHECK (redrives >= 0);

-- Since when an invoice waits for a person: set by the database whenever it enters needs_review,
-- whoever put it there, so the queue's age needs no cooperation from every writer.
ALTER TABLE invoices ADD COLUMN review_since timestamptz;
UPDATE invoices SET review_since = updated_at WHERE status = 'needs_review';

CREATE FUNCTION invoices_review_since() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.review_since := now();
    RETURN NEW;
END;
$$;

CREATE TRIGGER invoices_enter_review
    BEFORE UPDATE OF status ON invoices
    FOR EACH ROW
    WHEN (NEW.status = 'needs_review' AND OLD.status IS DISTINCT FROM 'needs_review')
    EXECUTE FUNCTION invoices_review_since();

-- The queue a person works through, oldest first.
CREATE INDEX invoices_review_queue ON invoices (review_since, seq) WHERE status = 'needs_review';

-- Who did what to which invoice, when, and why. Append-only, like processing_jobs: a trigger
-- refuses UPDATE and DELETE. `actor` is the OS user (`os-user:alice`) or the Dagster run
-- (`dagster-run:<id>`, with the name the person typed in the launchpad, if any); `job_id` is the
-- processing lock the action held while it wrote.
CREATE TABLE review_actions (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    invoice_id     uuid NOT NULL REFERENCES invoices (id),
    job_id         uuid NOT NULL REFERENCES processing_jobs (id),
    action         text NOT NULL CHECK (action IN ('approve', 'reject', 'not_duplicate',
                                                   'confirm_duplicate', 'requeue')),
    actor          text NOT NULL CHECK (actor <> ''),
    note           text,
    from_status    text NOT NULL,
    to_status      text NOT NULL,
    -- The reasons the invoice was held for, as they were: the invoice row forgets them once
    -- a person has decided.
    review_reasons text[],
    detail         text,
    at             timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX review_actions_by_invoice ON review_actions (invoice_id, at);

CREATE FUNCTION review_actions_guard() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION 'review_actions rows are the audit trail and are never changed or deleted'
        USING ERRCODE = 'restrict_violation';
END;
$$;

CREATE TRIGGER review_actions_append_only
    BEFORE UPDATE OR DELETE ON review_actions
    FOR EACH ROW EXECUTE FUNCTION review_actions_guard();
