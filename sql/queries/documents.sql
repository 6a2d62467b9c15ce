-- Documents and what the stages make of them (invoice_pipeline/engine/store/documents.py): the
-- original bytes, breadcrumbs, extracted text, fields, verdicts and postings. Reads take a whole
-- chunk of invoices at once; every write runs after fence_chunk (fence.sql) in the chunk's
-- transaction.

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

-- name: load_documents
SELECT i.id AS invoice_id, i.org_id, i.source_filename AS filename, d.sha256, d.content
FROM invoices i JOIN documents d ON d.sha256 = i.document_sha256
WHERE i.id = ANY(%(invoice_ids)s::uuid[])

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

-- name: count_step_executions
SELECT count(*) AS n FROM step_events
WHERE invoice_id = %(invoice_id)s AND step = %(step)s AND event = 'executed'

-- "Already done?" for each stage, over a chunk: the ids whose stage left its result.
-- name: done_extract_text
SELECT invoice_id FROM extracted_texts WHERE invoice_id = ANY(%(invoice_ids)s::uuid[])

-- name: done_extract_fields
SELECT id FROM invoices WHERE id = ANY(%(invoice_ids)s::uuid[]) AND fields IS NOT NULL

-- Done when decided, or when held before it could be (validation held a page whose number or
-- seller was not read: there is nothing to compare until a person corrects it).
-- name: done_detect_duplicates
SELECT id FROM invoices WHERE id = ANY(%(invoice_ids)s::uuid[])
  AND (duplicate_status IS NOT NULL OR cardinality(review_reasons) > 0)

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

-- name: save_extracted_text
INSERT INTO extracted_texts (invoice_id, job_id, format, method, page_count, text, structured, page_boxes)
VALUES (%(invoice_id)s, %(job_id)s, %(format)s, %(method)s, %(page_count)s, %(text)s, %(structured)s,
        %(page_boxes)s)
ON CONFLICT (invoice_id) DO UPDATE
SET job_id = EXCLUDED.job_id, format = EXCLUDED.format, method = EXCLUDED.method,
    page_count = EXCLUDED.page_count, text = EXCLUDED.text, structured = EXCLUDED.structured,
    page_boxes = EXCLUDED.page_boxes, created_at = clock_timestamp()

-- name: load_extracted_texts
SELECT invoice_id, format, method, page_count, text, structured, page_boxes
FROM extracted_texts WHERE invoice_id = ANY(%(invoice_ids)s::uuid[])

-- name: save_fields
UPDATE invoices
SET fields = %(fields)s, invoice_number = %(invoice_number)s, document_type = %(document_type)s,
    currency = %(currency)s, payable_total = %(payable_total)s, issue_date = %(issue_date)s,
    seller_name = %(seller_name)s, seller_vat_id = %(seller_vat_id)s, updated_at = now()
WHERE id = %(invoice_id)s

-- name: load_fields_of
SELECT id, fields FROM invoices WHERE id = ANY(%(invoice_ids)s::uuid[]) AND fields IS NOT NULL

-- name: save_approval
INSERT INTO approvals (invoice_id, job_id, decision, rule)
VALUES (%(invoice_id)s, %(job_id)s, %(decision)s, %(rule)s)
ON CONFLICT (invoice_id) DO NOTHING

-- name: hold_for_review
UPDATE invoices SET review_reasons = %(reasons)s, updated_at = now() WHERE id = %(invoice_id)s

-- name: load_review_reasons
SELECT review_reasons FROM invoices WHERE id = %(invoice_id)s AND cardinality(review_reasons) > 0

-- name: load_approvals_of
SELECT invoice_id, decision, rule, decided_at, vouched, correction_choice, corrects_invoice_id FROM approvals WHERE invoice_id = ANY(%(invoice_ids)s::uuid[])

-- The posting and its outbox, in one statement (sql/0025, docs/exports.md): one export row per
-- enabled target of the org, written only when the posting itself is (a second post of an invoice
-- writes neither). Nothing else writes export rows.
-- name: post_to_ledger
WITH posted AS (
INSERT INTO ledger_postings (invoice_id, job_id, org_id, amount, currency, vendor_id, invoice_number,
                             issue_date, due_date, iban, registered_name, registered_vat_id,
                             printed_seller_name, printed_seller_vat_id, payment_means, correction_choice,
                             corrects_invoice_id)
VALUES (%(invoice_id)s, %(job_id)s, %(org_id)s, %(amount)s, %(currency)s, %(vendor_id)s, %(invoice_number)s,
        %(issue_date)s, %(due_date)s, %(iban)s, %(registered_name)s, %(registered_vat_id)s,
        %(printed_seller_name)s, %(printed_seller_vat_id)s, %(payment_means)s, %(correction_choice)s,
        %(corrects_invoice_id)s)
ON CONFLICT (invoice_id) DO NOTHING
RETURNING id, invoice_id, org_id
)
INSERT INTO exports (posting_id, invoice_id, org_id, target_id)
SELECT p.id, p.invoice_id, p.org_id, t.id
FROM posted p JOIN export_targets t ON t.org_id = p.org_id AND t.enabled

-- name: load_ledger_posting
SELECT p.id AS posting_id, p.invoice_id, p.amount, p.currency, p.posted_at, p.vendor_id, v.name AS vendor_name,
       p.invoice_number, p.issue_date, p.due_date, p.iban, p.registered_name, p.registered_vat_id,
       p.printed_seller_name, p.printed_seller_vat_id, p.payment_means, p.correction_choice,
       p.corrects_invoice_id
FROM ledger_postings p LEFT JOIN vendors v ON v.org_id = p.org_id AND v.id = p.vendor_id
WHERE p.invoice_id = %(invoice_id)s
