-- Reads a stage makes for a whole chunk of invoices at once (invoice_pipeline/stages.py).
-- Writes stay in pipeline.sql, one statement per invoice, run after fence_chunk in the chunk's
-- transaction.

-- Breadcrumbs for a chunk as a stage starts it: 'started' moves processing_stage, 'skipped'
-- records a fast-forward (sql/0008).
-- name: record_steps
WITH crumbs AS (
    SELECT * FROM unnest(%(invoice_ids)s::uuid[], %(job_ids)s::uuid[], %(events)s::text[])
        AS c(invoice_id, job_id, event)
), stage AS (
    UPDATE invoices i SET processing_stage = %(step)s, updated_at = now()
    FROM crumbs c WHERE i.id = c.invoice_id AND c.event = 'started'
)
INSERT INTO step_events (invoice_id, job_id, step, event)
SELECT invoice_id, job_id, %(step)s, event FROM crumbs

-- The stage's result for these invoices was saved: written in the transaction that saved it.
-- name: record_executed
INSERT INTO step_events (invoice_id, job_id, step, event)
SELECT invoice_id, job_id, %(step)s, 'executed'
FROM unnest(%(invoice_ids)s::uuid[], %(job_ids)s::uuid[]) AS c(invoice_id, job_id)

-- "Already done?" for each stage, over a chunk: the ids whose stage left its result.
-- name: done_extract_text
SELECT invoice_id FROM extracted_texts WHERE invoice_id = ANY(%(invoice_ids)s::uuid[])

-- name: done_extract_fields
SELECT id FROM invoices WHERE id = ANY(%(invoice_ids)s::uuid[]) AND fields IS NOT NULL

-- name: done_detect_duplicates
SELECT id FROM invoices WHERE id = ANY(%(invoice_ids)s::uuid[]) AND duplicate_status IS NOT NULL

-- Approval is done when it approved, rejected, or held the invoice for a person.
-- name: done_approve
SELECT i.id FROM invoices i
WHERE i.id = ANY(%(invoice_ids)s::uuid[])
  AND (cardinality(i.review_reasons) > 0 OR EXISTS (SELECT 1 FROM approvals a WHERE a.invoice_id = i.id))

-- Nothing to post, ever, unless approved: a rejected or held invoice fast-forwards.
-- name: done_post_to_ledger
SELECT i.id FROM invoices i
LEFT JOIN approvals a ON a.invoice_id = i.id
WHERE i.id = ANY(%(invoice_ids)s::uuid[])
  AND (a.decision IS DISTINCT FROM 'approved'
       OR EXISTS (SELECT 1 FROM ledger_postings p WHERE p.invoice_id = i.id))

-- name: load_documents
SELECT i.id AS invoice_id, i.org_id, i.source_filename AS filename, d.sha256, d.content
FROM invoices i JOIN documents d ON d.sha256 = i.document_sha256
WHERE i.id = ANY(%(invoice_ids)s::uuid[])

-- name: load_extracted_texts
SELECT invoice_id, format, method, page_count, text, structured
FROM extracted_texts WHERE invoice_id = ANY(%(invoice_ids)s::uuid[])

-- name: load_fields_of
SELECT id, fields FROM invoices WHERE id = ANY(%(invoice_ids)s::uuid[]) AND fields IS NOT NULL

-- name: load_duplicate_decisions
SELECT id AS invoice_id, duplicate_status AS status, duplicate_group_id AS group_id,
       duplicate_of AS original_id, business_key, match_how AS how, match_score AS score,
       coalesce(match_reasons, '{}') AS reasons
FROM invoices WHERE id = ANY(%(invoice_ids)s::uuid[]) AND duplicate_status IS NOT NULL

-- name: load_approvals_of
SELECT invoice_id, decision, rule, decided_at FROM approvals WHERE invoice_id = ANY(%(invoice_ids)s::uuid[])

-- What a chunk amounts to, for its assets' metadata.
-- name: totals_by_currency
SELECT currency, count(*) AS invoices, sum(payable_total) AS total
FROM invoices
WHERE id = ANY(%(invoice_ids)s::uuid[]) AND currency IS NOT NULL AND payable_total IS NOT NULL
GROUP BY currency ORDER BY currency

-- The contract's sweep (sql/0002), for the invoices a chunk is about to claim: a dead holder's
-- lock goes at once, without waiting for the sensor's next sweep.
-- name: release_stale_locks_of
SELECT coalesce(sum(release_stale_locks(id, %(stale_after)s::interval)), 0) AS released
FROM unnest(%(invoice_ids)s::uuid[]) AS id
