-- Queries the pipeline's steps run. Every write here is executed after `fence` in the same
-- transaction (see locks.sql), so it lands only while its job holds the lock.

-- name: insert_document
INSERT INTO documents (sha256, content, size_bytes)
VALUES (%(sha256)s, %(content)s, %(size_bytes)s)
ON CONFLICT (sha256) DO NOTHING

-- name: insert_invoice_for_document
INSERT INTO invoices (org_id, document_sha256, source_filename)
VALUES (%(org_id)s, %(sha256)s, %(filename)s)
ON CONFLICT (org_id, document_sha256) WHERE document_sha256 IS NOT NULL DO NOTHING
RETURNING id

-- name: invoice_for_document
SELECT id FROM invoices WHERE org_id = %(org_id)s AND document_sha256 = %(sha256)s

-- name: invoice_state
SELECT id AS invoice_id, org_id, status, processing_stage, attempts, next_attempt_at,
       last_error, quarantine_code, quarantine_reason
FROM invoices WHERE id = %(invoice_id)s

-- name: count_step_executions
SELECT count(*) AS n FROM step_events
WHERE invoice_id = %(invoice_id)s AND step = %(step)s AND event = 'executed'

-- name: save_extracted_text
INSERT INTO extracted_texts (invoice_id, job_id, format, method, page_count, text, structured)
VALUES (%(invoice_id)s, %(job_id)s, %(format)s, %(method)s, %(page_count)s, %(text)s, %(structured)s)
ON CONFLICT (invoice_id) DO UPDATE
SET job_id = EXCLUDED.job_id, format = EXCLUDED.format, method = EXCLUDED.method,
    page_count = EXCLUDED.page_count, text = EXCLUDED.text, structured = EXCLUDED.structured,
    created_at = clock_timestamp()

-- name: save_fields
UPDATE invoices
SET fields = %(fields)s, invoice_number = %(invoice_number)s, document_type = %(document_type)s,
    currency = %(currency)s, payable_total = %(payable_total)s, issue_date = %(issue_date)s,
    seller_name = %(seller_name)s, seller_vat_id = %(seller_vat_id)s, updated_at = now()
WHERE id = %(invoice_id)s

-- name: load_duplicate_decision
SELECT id AS invoice_id, duplicate_status AS status, duplicate_group_id AS group_id,
       duplicate_of AS original_id, business_key, match_how AS how, match_score AS score,
       coalesce(match_reasons, '{}') AS reasons
FROM invoices WHERE id = %(invoice_id)s AND duplicate_status IS NOT NULL

-- Every advisory lock a chunk's decisions need, taken first and in sorted order (sql/0003).
-- name: take_dedupe_locks
SELECT take_dedupe_locks(%(lock_ids)s::bigint[])

-- Takes the decision's advisory locks, then reads its candidates (see the function in sql/0007).
-- name: locked_duplicate_candidates
SELECT id, org_id, fields
FROM locked_duplicate_candidates(%(lock_ids)s::bigint[], %(org_id)s, %(invoice_id)s, %(block_keys)s::bigint[],
                                 %(number_key)s)

-- The three decisions. Each applies only to an undecided invoice (a re-executed step finds its
-- decision made and keeps it) and returns the decision as load_duplicate_decision reads it, so
-- deciding costs no extra round trip inside the locked transaction.
-- name: mark_original
UPDATE invoices
SET duplicate_status = 'original', duplicate_of = NULL, business_key = %(business_key)s,
    business_key_hash = %(business_key_hash)s, vendor_key = %(vendor_key)s, block_key = %(block_key)s,
    number_key = %(number_key)s,
    match_how = NULL, match_score = NULL, match_reasons = NULL, updated_at = now()
WHERE id = %(invoice_id)s AND duplicate_status IS NULL
RETURNING id AS invoice_id, duplicate_status AS status, duplicate_group_id AS group_id,
          duplicate_of AS original_id, business_key, match_how AS how, match_score AS score,
          coalesce(match_reasons, '{}') AS reasons

-- An exact copy joins its original's group (made on first use; the original joins it too).
-- name: mark_duplicate
WITH undecided AS (
    SELECT id FROM invoices WHERE id = %(invoice_id)s AND duplicate_status IS NULL
), grp AS (
    INSERT INTO duplicate_groups (org_id, business_key, original_invoice_id)
    SELECT %(org_id)s, %(business_key)s, %(original_id)s FROM undecided
    ON CONFLICT (original_invoice_id) DO UPDATE SET org_id = EXCLUDED.org_id
    RETURNING id
), original AS (
    UPDATE invoices SET duplicate_group_id = grp.id, updated_at = now()
    FROM grp WHERE invoices.id = %(original_id)s
)
UPDATE invoices
SET duplicate_status = 'duplicate', duplicate_of = %(original_id)s, duplicate_group_id = (SELECT id FROM grp),
    business_key = %(business_key)s, business_key_hash = %(business_key_hash)s,
    vendor_key = %(vendor_key)s, block_key = %(block_key)s, number_key = %(number_key)s,
    match_how = %(how)s, match_score = %(score)s, match_reasons = %(reasons)s, updated_at = now()
WHERE id = %(invoice_id)s AND duplicate_status IS NULL
RETURNING id AS invoice_id, duplicate_status AS status, duplicate_group_id AS group_id,
          duplicate_of AS original_id, business_key, match_how AS how, match_score AS score,
          coalesce(match_reasons, '{}') AS reasons

-- A copy only by tolerance: it names its original but joins no group until a person confirms it.
-- name: mark_suspected
UPDATE invoices
SET duplicate_status = 'suspected', duplicate_of = %(original_id)s, duplicate_group_id = NULL,
    business_key = %(business_key)s, business_key_hash = %(business_key_hash)s,
    vendor_key = %(vendor_key)s, block_key = %(block_key)s, number_key = %(number_key)s,
    match_how = %(how)s, match_score = %(score)s, match_reasons = %(reasons)s, updated_at = now()
WHERE id = %(invoice_id)s AND duplicate_status IS NULL
RETURNING id AS invoice_id, duplicate_status AS status, duplicate_group_id AS group_id,
          duplicate_of AS original_id, business_key, match_how AS how, match_score AS score,
          coalesce(match_reasons, '{}') AS reasons

-- name: save_approval
INSERT INTO approvals (invoice_id, job_id, decision, rule)
VALUES (%(invoice_id)s, %(job_id)s, %(decision)s, %(rule)s)
ON CONFLICT (invoice_id) DO NOTHING

-- name: hold_for_review
UPDATE invoices SET review_reasons = %(reasons)s, updated_at = now() WHERE id = %(invoice_id)s

-- name: load_review_reasons
SELECT review_reasons FROM invoices WHERE id = %(invoice_id)s AND cardinality(review_reasons) > 0

-- name: post_to_ledger
INSERT INTO ledger_postings (invoice_id, job_id, org_id, amount, currency)
VALUES (%(invoice_id)s, %(job_id)s, %(org_id)s, %(amount)s, %(currency)s)
ON CONFLICT (invoice_id) DO NOTHING

-- name: load_ledger_posting
SELECT id AS posting_id, invoice_id, amount, currency, posted_at FROM ledger_postings
WHERE invoice_id = %(invoice_id)s

-- A held invoice ends needs_review: the pipeline went as far as it may without a person.
-- name: mark_processed
UPDATE invoices
SET status = CASE WHEN cardinality(review_reasons) > 0 THEN 'needs_review' ELSE 'processed' END,
    last_error = NULL, updated_at = now()
WHERE id = %(invoice_id)s

-- name: mark_quarantined
UPDATE invoices
SET status = 'quarantined', quarantine_code = %(code)s, quarantine_reason = %(reason)s,
    last_error = %(reason)s, updated_at = now()
WHERE id = %(invoice_id)s

-- Invoices left 'processing' with no running job (their holder died and was swept), row-locked
-- for the reschedule that follows in the same transaction. SKIP LOCKED: a row someone is
-- writing (a claim, a review) is left to the next sweep, never waited for. What this statement
-- read about running jobs is only a preselection: its snapshot may predate a claim that
-- committed before the row lock was granted, so reschedule_failed checks again.
-- name: lock_orphans
SELECT i.id FROM invoices i
WHERE i.status = 'processing'
  AND NOT EXISTS (SELECT 1 FROM processing_jobs j WHERE j.invoice_id = i.id AND j.status = 'running')
ORDER BY i.id
FOR NO KEY UPDATE OF i SKIP LOCKED

-- After a failed attempt: retry later with exponential backoff, or give up. Applies to the given
-- invoices, which the caller has row-locked earlier in the same transaction (lock_orphans,
-- lock_invoice_of_job). Because a claim locks the invoice row before it inserts its job, no claim
-- of these invoices is in flight, and this statement's snapshot, taken after the locks were
-- granted, sees every claim that committed: an invoice a live job holds is never rescheduled.
-- name: reschedule_failed
WITH orphans AS (
    SELECT i.id, i.attempts,
           (SELECT j.error FROM processing_jobs j WHERE j.invoice_id = i.id
            ORDER BY j.attempt DESC, j.started_at DESC LIMIT 1) AS last_job_error
    FROM invoices i
    WHERE i.id = ANY(%(invoice_ids)s::uuid[]) AND i.status = 'processing'
      AND NOT EXISTS (SELECT 1 FROM processing_jobs j WHERE j.invoice_id = i.id AND j.status = 'running')
)
UPDATE invoices i
SET status = CASE WHEN o.attempts >= %(max_attempts)s THEN 'needs_attention' ELSE 'failed' END,
    next_attempt_at = now() + %(retry_base)s * power(2, GREATEST(o.attempts - 1, 0)),
    last_error = coalesce(%(error)s, o.last_job_error, i.last_error),
    updated_at = now()
FROM orphans o
WHERE i.id = o.id
RETURNING i.id AS invoice_id, i.status, i.attempts, i.next_attempt_at, i.last_error

-- The sensor's query. Marks what it returns as requested, so the next tick moves on to newer
-- work. A request is made once: if its run never claims the invoice (the launch was lost, or
-- the run died before claiming), the sweep schedule expires the request as a failed attempt
-- (expire_requests), and the retry is requested under the next attempt's run key — Dagster
-- would skip the same key forever, failures included. A caller may pass request_timeout to
-- re-request sooner (NULL: never). requested_by names the run the request waits for (see
-- 0004_request_owner.sql); a caller that knows it per invoice only after planning sets it with
-- assign_request_owners in the same transaction.
-- name: claim_due_invoices
WITH due AS (
    SELECT id FROM invoices
    WHERE status IN ('pending', 'failed') AND next_attempt_at <= now()
      AND (requested_at IS NULL OR requested_at < now() - %(request_timeout)s::interval)
    ORDER BY next_attempt_at, seq
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE invoices i SET requested_at = now(), requested_by = %(requested_by)s
FROM due WHERE i.id = due.id
RETURNING i.id AS invoice_id, i.org_id, i.attempts + 1 AS attempt, i.redrives AS redrive, i.seq

-- name: assign_request_owners
UPDATE invoices i SET requested_by = o.owner
FROM unnest(%(invoice_ids)s::uuid[], %(owners)s::text[]) AS o(id, owner)
WHERE i.id = o.id

-- Open requests, one row per owner: the sweep asks Dagster about each owner's run once.
-- name: open_request_owners
SELECT requested_by AS owner, count(*) AS invoices, now() - min(requested_at) AS age
FROM invoices
WHERE requested_at IS NOT NULL AND status IN ('pending', 'failed') AND requested_by IS NOT NULL
GROUP BY requested_by
ORDER BY min(requested_at)

-- Release the unclaimed requests of a run that ended or died. With count_attempt (the request
-- used a run key, which Dagster never runs twice) it is a failed attempt, retried under the
-- next attempt's key with backoff, or dead-lettered; without, the invoice is simply due again.
-- min_age spares a request whose run may still be about to appear. Rows are locked in id order and
-- a row someone holds (a claim in flight) is skipped, never waited for: the next sweep sees it.
-- name: release_requests
UPDATE invoices i
SET requested_at = NULL,
    requested_by = NULL,
    attempts = i.attempts + CASE WHEN %(count_attempt)s THEN 1 ELSE 0 END,
    status = CASE WHEN NOT %(count_attempt)s THEN i.status
                  WHEN i.attempts + 1 >= %(max_attempts)s THEN 'needs_attention'
                  ELSE 'failed' END,
    next_attempt_at = CASE WHEN %(count_attempt)s THEN now() + %(retry_base)s * power(2, i.attempts)
                           ELSE i.next_attempt_at END,
    last_error = %(reason)s,
    updated_at = now()
WHERE i.id IN (
    SELECT r.id FROM invoices r
    WHERE r.requested_by = %(owner)s AND r.requested_at IS NOT NULL AND r.status IN ('pending', 'failed')
      AND r.requested_at < now() - %(min_age)s::interval
      AND NOT EXISTS (SELECT 1 FROM processing_jobs j WHERE j.invoice_id = r.id AND j.status = 'running')
    ORDER BY r.id
    FOR NO KEY UPDATE OF r SKIP LOCKED
)
RETURNING i.id AS invoice_id, i.status, i.attempts, i.next_attempt_at, i.last_error

-- How the given invoices stand now: `invoice-pipeline process` reports and exits by it.
-- name: status_counts_of
SELECT status, count(*) AS n FROM invoices WHERE id = ANY(%(invoice_ids)s::uuid[]) GROUP BY status ORDER BY status

-- Requests older than the timeout whose invoice no run has claimed.
-- name: stale_requests
SELECT id FROM invoices
WHERE status IN ('pending', 'failed') AND requested_at < now() - %(request_timeout)s::interval
ORDER BY requested_at
LIMIT 1000

-- Count an unclaimed request as a failed attempt: retry later under a new run key, or give up.
-- Like release_requests, it skips a row someone holds instead of waiting for it.
-- name: expire_requests
UPDATE invoices i
SET requested_at = NULL,
    requested_by = NULL,
    attempts = i.attempts + 1,
    status = CASE WHEN i.attempts + 1 >= %(max_attempts)s THEN 'needs_attention' ELSE 'failed' END,
    next_attempt_at = now() + %(retry_base)s * power(2, i.attempts),
    last_error = format('run requested at %%s never claimed the invoice (launch lost, or the run died first)',
                        i.requested_at),
    updated_at = now()
WHERE i.id IN (
    SELECT r.id FROM invoices r
    WHERE r.id = ANY(%(invoice_ids)s) AND r.status IN ('pending', 'failed')
      AND r.requested_at < now() - %(request_timeout)s::interval
      AND NOT EXISTS (SELECT 1 FROM processing_jobs j WHERE j.invoice_id = r.id AND j.status = 'running')
    ORDER BY r.id
    FOR NO KEY UPDATE OF r SKIP LOCKED
)
RETURNING i.id AS invoice_id, i.status, i.attempts, i.next_attempt_at, i.last_error

-- Data migrations (invoice_pipeline/db/rekey.py).
-- name: decided_invoices_to_rekey
SELECT id, org_id, fields FROM invoices
WHERE duplicate_status IS NOT NULL AND fields IS NOT NULL
ORDER BY seq

-- name: rekey_invoice
UPDATE invoices
SET business_key = %(business_key)s, business_key_hash = %(business_key_hash)s,
    vendor_key = %(vendor_key)s, block_key = %(block_key)s
WHERE id = %(invoice_id)s

-- The number key came with 0007; invoices decided before it get theirs.
-- name: set_number_key
UPDATE invoices SET number_key = %(number_key)s WHERE id = %(invoice_id)s
