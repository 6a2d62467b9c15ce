-- The tables. Every other column of invoices is nullable or defaulted, so
-- INSERT INTO invoices (org_id) VALUES ('acme') RETURNING id works.

-- Original bytes, content-addressed: stored before any parsing can fail.
CREATE TABLE documents (
    sha256      text PRIMARY KEY CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    content     bytea NOT NULL,
    size_bytes  integer NOT NULL CHECK (size_bytes >= 0),
    received_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE invoices (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    seq                bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    org_id             text NOT NULL CHECK (org_id <> ''),
    document_sha256    text REFERENCES documents (sha256),
    source_filename    text,
    -- Lifecycle: pending -> processing -> processed | quarantined | failed (retry due at
    -- next_attempt_at) -> ... -> needs_attention once attempts run out.
    status             text NOT NULL DEFAULT 'pending'
                       CHECK (status IN ('pending', 'processing', 'processed', 'failed',
                                         'quarantined', 'needs_attention')),
    processing_stage   text,          -- breadcrumb: the last step a holder started
    attempts           integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at    timestamptz NOT NULL DEFAULT now(),
    requested_at       timestamptz,   -- when the sensor last asked Dagster for a run
    last_error         text,
    quarantine_code    text,
    quarantine_reason  text,
    -- Extracted fields: the whole record, plus the columns that queries filter on.
    fields             jsonb,
    invoice_number     text,
    document_type      text CHECK (document_type IN ('invoice', 'credit_note')),
    currency           text,
    payable_total      numeric,
    issue_date         date,
    seller_name        text,
    seller_vat_id      text,
    -- Duplicate detection.
    vendor_key         text,
    business_key       text,
    business_key_hash  bigint,
    duplicate_status   text CHECK (duplicate_status IN ('original', 'duplicate')),
    duplicate_group_id uuid,
    duplicate_of       uuid REFERENCES invoices (id),
    match_how          text,
    match_score        numeric,
    match_reasons      text[],
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    CHECK ((duplicate_status = 'duplicate') = (duplicate_of IS NOT NULL))
);

-- The same bytes ingested twice for one org are one invoice.
CREATE UNIQUE INDEX invoices_one_per_document
    ON invoices (org_id, document_sha256) WHERE document_sha256 IS NOT NULL;
-- Last line of defence behind the advisory lock: one original per business key and amount per
-- org. The amount is part of it because the same seller and number with a different total is
-- a different invoice, not a copy (it is an original too, recorded with why it looks alike).
CREATE UNIQUE INDEX invoices_one_original_per_key
    ON invoices (org_id, business_key, payable_total, currency) WHERE duplicate_status = 'original';
-- Fuzzy-match candidates are originals of the same org and vendor, or with the same amount.
CREATE INDEX invoices_originals_by_vendor
    ON invoices (org_id, vendor_key) WHERE duplicate_status = 'original';
CREATE INDEX invoices_originals_by_amount
    ON invoices (org_id, payable_total) WHERE duplicate_status = 'original';
-- The sensor's query: work that is due.
CREATE INDEX invoices_due
    ON invoices (next_attempt_at, seq) WHERE status IN ('pending', 'failed');
CREATE INDEX invoices_by_status ON invoices (status);

CREATE TABLE processing_jobs (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    invoice_id   uuid NOT NULL REFERENCES invoices (id),
    attempt      integer NOT NULL CHECK (attempt >= 1),
    status       text NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
    owner        text,
    started_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    heartbeat_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at  timestamptz,
    error        text,
    CHECK ((status = 'running') = (finished_at IS NULL))
);

-- The lock itself: at most one running job per invoice.
CREATE UNIQUE INDEX processing_jobs_one_running_per_invoice
    ON processing_jobs (invoice_id) WHERE status = 'running';
-- The global sweep reads only running rows, however long the history grows.
CREATE INDEX processing_jobs_running_by_heartbeat
    ON processing_jobs (heartbeat_at) WHERE status = 'running';
CREATE INDEX processing_jobs_by_invoice ON processing_jobs (invoice_id, started_at);
-- The sweep schedule asks which jobs a (possibly dead) Dagster run held.
CREATE INDEX processing_jobs_by_owner ON processing_jobs (owner);

-- Step outputs, each written by a fenced statement and read back when a retry fast-forwards.
CREATE TABLE extracted_texts (
    invoice_id  uuid PRIMARY KEY REFERENCES invoices (id),
    job_id      uuid NOT NULL REFERENCES processing_jobs (id),
    format      text NOT NULL,
    method      text NOT NULL,
    page_count  integer,
    text        text NOT NULL,
    structured  text,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE duplicate_groups (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id              text NOT NULL,
    business_key        text NOT NULL,
    original_invoice_id uuid NOT NULL UNIQUE REFERENCES invoices (id),
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
ALTER TABLE invoices
    ADD CONSTRAINT invoices_duplicate_group_fk FOREIGN KEY (duplicate_group_id) REFERENCES duplicate_groups (id);

CREATE TABLE approvals (
    invoice_id uuid PRIMARY KEY REFERENCES invoices (id),
    job_id     uuid NOT NULL REFERENCES processing_jobs (id),
    decision   text NOT NULL CHECK (decision IN ('approved', 'rejected')),
    rule       text NOT NULL,
    decided_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- UNIQUE (invoice_id): an invoice can reach the ledger once, whatever the pipeline does.
CREATE TABLE ledger_postings (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    invoice_id uuid NOT NULL UNIQUE REFERENCES invoices (id),
    job_id     uuid NOT NULL REFERENCES processing_jobs (id),
    org_id     text NOT NULL,
    amount     numeric NOT NULL,
    currency   text NOT NULL,
    posted_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- What every step did, per job: the evidence that a retry fast-forwarded instead of redoing work.
CREATE TABLE step_events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    invoice_id uuid NOT NULL REFERENCES invoices (id),
    job_id     uuid NOT NULL REFERENCES processing_jobs (id),
    step       text NOT NULL,
    event      text NOT NULL CHECK (event IN ('executed', 'skipped')),
    at         timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX step_events_by_invoice ON step_events (invoice_id, step);
