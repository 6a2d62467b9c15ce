-- A person's actions on held, dead-lettered and quarantined invoices
-- (invoice_pipeline/engine/store/review.py). Every write here runs after `fence` (fence.sql) in
-- the same transaction, under a processing lock the action took with acquire_processing_lock: a
-- review never races a pipeline run or another reviewer.

-- name: review_policies
SELECT org_id, auto_approve_limit, home_currency, stale_after_days, default_currency, register_einvoice_vendors,
       einvoice_country
FROM review_policies WHERE org_id = ANY(%(org_ids)s::text[])

-- name: set_review_policy
INSERT INTO review_policies (org_id, auto_approve_limit, home_currency, stale_after_days, default_currency,
                             register_einvoice_vendors, einvoice_country, updated_by)
VALUES (%(org_id)s, %(auto_approve_limit)s, %(home_currency)s, %(stale_after_days)s, %(default_currency)s,
        %(register_einvoice_vendors)s, %(einvoice_country)s, %(updated_by)s)
ON CONFLICT (org_id) DO UPDATE
SET auto_approve_limit = EXCLUDED.auto_approve_limit, home_currency = EXCLUDED.home_currency,
    stale_after_days = EXCLUDED.stale_after_days, default_currency = EXCLUDED.default_currency,
    register_einvoice_vendors = EXCLUDED.register_einvoice_vendors, einvoice_country = EXCLUDED.einvoice_country,
    updated_by = EXCLUDED.updated_by, updated_at = now()

-- The invoices an action may apply to: by id, or by filter (org, status, reason code, age).
-- A reason matches the code a review reason starts with (domain/review.py) or the quarantine
-- code. Age counts from when the invoice entered the review queue, else from its last change
-- (when it was dead-lettered or quarantined).
-- name: review_targets
SELECT i.id AS invoice_id, i.org_id, i.status, i.source_filename AS filename, i.invoice_number,
       i.seller_name, i.payable_total, i.currency, i.duplicate_status, i.duplicate_of,
       coalesce(i.review_reasons, '{}') AS review_reasons, i.quarantine_code, i.last_error,
       i.attempts, i.redrives, coalesce(i.review_since, i.updated_at) AS since,
       now() - coalesce(i.review_since, i.updated_at) AS age
FROM invoices i
WHERE i.status = ANY(%(statuses)s::text[])
  AND (%(invoice_ids)s::uuid[] IS NULL OR i.id = ANY(%(invoice_ids)s::uuid[]))
  AND (%(org_id)s::text IS NULL OR i.org_id = %(org_id)s::text)
  AND (%(reason)s::text IS NULL
       OR i.quarantine_code = %(reason)s::text
       OR EXISTS (SELECT 1 FROM unnest(i.review_reasons) AS r
                  WHERE substring(r FROM '^[a-z][a-z0-9_]*') = %(reason)s::text))
  AND (%(older_than)s::interval IS NULL
       OR coalesce(i.review_since, i.updated_at) < now() - %(older_than)s::interval)
ORDER BY coalesce(i.review_since, i.updated_at), i.seq
LIMIT %(limit)s

-- An action's own way into the lock: the same function a pipeline run acquires with, under the
-- invoice's current attempt number (an action is no processing attempt). Unlike
-- mark_invoice_processing it leaves the status alone: the action decides what it becomes.
-- name: acquire_review_lock
SELECT acquire_processing_lock(i.id, GREATEST(i.attempts, 1), %(owner)s) AS job_id,
       GREATEST(i.attempts, 1) AS attempt
FROM invoices i WHERE i.id = %(invoice_id)s

-- The invoice as the action finds it, row-locked for the rest of the fenced transaction: the
-- sensor's request bookkeeping, which writes without the processing lock, waits for it.
-- name: review_target_for_update
SELECT id AS invoice_id, org_id, status, duplicate_status, duplicate_of, review_reasons, fields,
       attempts, redrives, quarantine_code, last_error
FROM invoices WHERE id = %(invoice_id)s
FOR UPDATE

-- name: review_save_approval
INSERT INTO approvals (invoice_id, job_id, decision, rule, vouched, correction_choice, corrects_invoice_id)
VALUES (%(invoice_id)s, %(job_id)s, %(decision)s, %(rule)s, %(vouched)s::text[], %(correction_choice)s,
        %(corrects_invoice_id)s)
ON CONFLICT (invoice_id) DO NOTHING
RETURNING invoice_id

-- An approval refused because the reasons of now are not those the person was shown: the invoice
-- stays held, showing the new ones too.
-- name: review_reasons_now
UPDATE invoices SET review_reasons = %(reasons)s::text[], updated_at = now()
WHERE id = %(invoice_id)s AND status = 'needs_review'

-- Approved: due again now, so the sensor (or `invoice-pipeline process`) runs the pipeline,
-- which fast-forwards past its finished stages to post_to_ledger. The reasons move to the audit.
-- name: review_continue
UPDATE invoices
SET status = 'pending', review_reasons = NULL, next_attempt_at = now(), requested_at = NULL,
    requested_by = NULL, last_error = NULL, updated_at = now()
WHERE id = %(invoice_id)s AND status = 'needs_review'
RETURNING status

-- Rejected (or confirmed a duplicate): finished, never posted. `processed` with a rejected
-- approval, like an exact duplicate the pipeline rejects by itself.
-- name: review_close
UPDATE invoices
SET status = 'processed', review_reasons = NULL, last_error = NULL, updated_at = now()
WHERE id = %(invoice_id)s AND status = 'needs_review'
RETURNING status

-- A suspected duplicate confirmed: it joins its original's group, exactly as an exact copy does
-- in mark_duplicate (the group is made on first use; the original joins it too).
-- name: review_confirm_duplicate
WITH copy AS (
    SELECT i.id, i.org_id, i.duplicate_of, o.business_key
    FROM invoices i JOIN invoices o ON o.id = i.duplicate_of AND o.duplicate_status = 'original'
    WHERE i.id = %(invoice_id)s AND i.duplicate_status = 'suspected'
), grp AS (
    INSERT INTO duplicate_groups (org_id, business_key, original_invoice_id)
    SELECT org_id, business_key, duplicate_of FROM copy
    ON CONFLICT (original_invoice_id) DO UPDATE SET org_id = EXCLUDED.org_id
    RETURNING id, original_invoice_id
), original AS (
    UPDATE invoices SET duplicate_group_id = grp.id, updated_at = now()
    FROM grp WHERE invoices.id = grp.original_invoice_id
)
UPDATE invoices
SET duplicate_status = 'duplicate', duplicate_group_id = (SELECT id FROM grp),
    match_reasons = coalesce(match_reasons, '{}') || %(confirmed)s::text, updated_at = now()
WHERE id = (SELECT id FROM copy)
RETURNING duplicate_of AS original_id

-- Not a duplicate: the invoice becomes an original (later copies match against it), and only
-- the suspicion leaves its reasons. With none left it continues through the pipeline; with
-- others (a negative total, ...) it stays in the queue for them.
-- name: review_release_original
UPDATE invoices
SET duplicate_status = 'original', duplicate_of = NULL, duplicate_group_id = NULL,
    match_how = NULL, match_score = NULL, match_reasons = NULL,
    review_reasons = NULLIF(%(remaining)s::text[], '{}'),
    status = CASE WHEN cardinality(%(remaining)s::text[]) > 0 THEN 'needs_review' ELSE 'pending' END,
    next_attempt_at = now(), requested_at = NULL, requested_by = NULL, updated_at = now()
WHERE id = %(invoice_id)s AND duplicate_status = 'suspected' AND status = 'needs_review'
RETURNING status

-- Not a copy of the original the person looked at, but (now) like another one: still held, the
-- suspicion now naming that one.
-- name: review_resuspect
UPDATE invoices
SET duplicate_of = %(original_id)s, match_how = %(how)s, match_score = %(score)s,
    match_reasons = %(reasons)s, review_reasons = %(review_reasons)s::text[], updated_at = now()
WHERE id = %(invoice_id)s AND duplicate_status = 'suspected' AND status = 'needs_review'
RETURNING status

-- A redrive: attempts start over, due now, and a new redrive number gives the run a new key.
-- name: review_requeue
UPDATE invoices
SET status = 'pending', attempts = 0, redrives = redrives + 1, next_attempt_at = now(),
    requested_at = NULL, requested_by = NULL, last_error = NULL, quarantine_code = NULL,
    quarantine_reason = NULL, updated_at = now()
WHERE id = %(invoice_id)s AND status = ANY(%(from_statuses)s::text[])
RETURNING status, redrives

-- A quarantined invoice is requeued after a fix (a parser, a rule): what was read from it under
-- the old code is read again, not fast-forwarded. The document itself is kept.
-- name: review_forget_extraction
WITH text_gone AS (
    DELETE FROM extracted_texts WHERE invoice_id = %(invoice_id)s
)
UPDATE invoices
SET fields = NULL, invoice_number = NULL, document_type = NULL, currency = NULL, payable_total = NULL,
    issue_date = NULL, seller_name = NULL, seller_vat_id = NULL, processing_stage = NULL
WHERE id = %(invoice_id)s AND duplicate_status IS NULL

-- name: insert_review_action
INSERT INTO review_actions (invoice_id, job_id, action, actor, note, from_status, to_status,
                            review_reasons, detail)
VALUES (%(invoice_id)s, %(job_id)s, %(action)s, %(actor)s, %(note)s, %(from_status)s, %(to_status)s,
        %(review_reasons)s, %(detail)s)
RETURNING id, at

-- name: review_history
SELECT id, invoice_id, job_id, action, actor, note, from_status, to_status,
       coalesce(review_reasons, '{}') AS review_reasons, detail, at
FROM review_actions WHERE invoice_id = %(invoice_id)s ORDER BY id

-- The queue by org and reason code, for `invoice-pipeline status`.
-- name: review_queue_summary
SELECT i.org_id, substring(r FROM '^[a-z][a-z0-9_]*') AS reason, count(*) AS invoices,
       max(now() - coalesce(i.review_since, i.updated_at)) AS oldest
FROM invoices i CROSS JOIN LATERAL unnest(coalesce(i.review_reasons, '{}')) AS r
WHERE i.status = 'needs_review'
GROUP BY 1, 2 ORDER BY 1, 2
