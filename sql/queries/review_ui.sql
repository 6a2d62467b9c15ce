-- The review page's reads (invoice_pipeline/engine/store/review_pages.py, for
-- invoice_pipeline/review_ui/). The correction's writes are in corrections.sql.

-- A version of what a reviewer sees of a held invoice: the page sends it back with an action,
-- and a correction checks it under the row lock, so a decision made meanwhile is noticed.
-- name: review_page_version
SELECT md5(concat_ws('|', i.status, i.duplicate_status, i.duplicate_of::text, i.review_reasons::text,
                     i.fields::text,
                     (SELECT max(a.id) FROM review_actions a WHERE a.invoice_id = i.id)::text)) AS version
FROM invoices i WHERE i.id = %(invoice_id)s

-- One page of the queue: held invoices, the longest waiting first. `orgs` is the orgs the
-- reviewer may see (NULL: every org).
-- name: review_page_queue
SELECT i.id AS invoice_id, i.org_id, i.source_filename AS filename, i.invoice_number, i.seller_name,
       i.payable_total, i.currency, i.duplicate_status, coalesce(i.review_reasons, '{}') AS review_reasons,
       coalesce(i.review_since, i.updated_at) AS since, now() - coalesce(i.review_since, i.updated_at) AS age
FROM invoices i
WHERE i.status = 'needs_review'
  AND (%(orgs)s::text[] IS NULL OR i.org_id = ANY(%(orgs)s::text[]))
  AND (%(org_id)s::text IS NULL OR i.org_id = %(org_id)s::text)
  AND (%(reason)s::text IS NULL
       OR EXISTS (SELECT 1 FROM unnest(i.review_reasons) AS r
                  WHERE substring(r FROM '^[a-z][a-z0-9_]*') = %(reason)s::text))
  AND (%(older_than)s::interval IS NULL
       OR coalesce(i.review_since, i.updated_at) < now() - %(older_than)s::interval)
ORDER BY coalesce(i.review_since, i.updated_at), i.seq
LIMIT %(limit)s OFFSET %(offset)s

-- How many held invoices the same filters select.
-- name: review_page_queue_count
SELECT count(*)
FROM invoices i
WHERE i.status = 'needs_review'
  AND (%(orgs)s::text[] IS NULL OR i.org_id = ANY(%(orgs)s::text[]))
  AND (%(org_id)s::text IS NULL OR i.org_id = %(org_id)s::text)
  AND (%(reason)s::text IS NULL
       OR EXISTS (SELECT 1 FROM unnest(i.review_reasons) AS r
                  WHERE substring(r FROM '^[a-z][a-z0-9_]*') = %(reason)s::text))
  AND (%(older_than)s::interval IS NULL
       OR coalesce(i.review_since, i.updated_at) < now() - %(older_than)s::interval)

-- Held invoices per reason code (an invoice counts once per code it is held for), and per org.
-- name: review_page_reason_counts
SELECT substring(r FROM '^[a-z][a-z0-9_]*') AS reason, count(DISTINCT i.id) AS invoices,
       max(now() - coalesce(i.review_since, i.updated_at)) AS oldest
FROM invoices i CROSS JOIN LATERAL unnest(coalesce(i.review_reasons, '{}')) AS r
WHERE i.status = 'needs_review'
  AND (%(orgs)s::text[] IS NULL OR i.org_id = ANY(%(orgs)s::text[]))
  AND (%(org_id)s::text IS NULL OR i.org_id = %(org_id)s::text)
GROUP BY 1 ORDER BY 2 DESC, 1

-- name: review_page_org_counts
SELECT i.org_id AS reason, count(*) AS invoices, max(now() - coalesce(i.review_since, i.updated_at)) AS oldest
FROM invoices i
WHERE i.status = 'needs_review' AND (%(orgs)s::text[] IS NULL OR i.org_id = ANY(%(orgs)s::text[]))
GROUP BY 1 ORDER BY 1

-- One invoice as the page shows it: what was read, why it is held, what became of it.
-- name: review_page_invoice
SELECT i.id AS invoice_id, i.org_id, i.status, i.source_filename AS filename, i.document_sha256 AS sha256,
       i.fields, i.duplicate_status, i.duplicate_of, i.match_how, i.match_score::float8 AS match_score,
       coalesce(i.match_reasons, '{}') AS match_reasons, coalesce(i.review_reasons, '{}') AS review_reasons,
       coalesce(i.review_since, i.updated_at) AS since, i.attempts, i.redrives, i.quarantine_code,
       i.quarantine_reason, i.last_error, t.format, t.method, t.page_count,
       a.decision AS approval, a.rule AS approval_rule, p.amount AS posted_amount, p.currency AS posted_currency,
       p.posted_at
FROM invoices i
LEFT JOIN extracted_texts t ON t.invoice_id = i.id
LEFT JOIN approvals a ON a.invoice_id = i.id
LEFT JOIN ledger_postings p ON p.invoice_id = i.id
WHERE i.id = %(invoice_id)s

-- name: review_page_history
SELECT id, action, actor, note, from_status, to_status, coalesce(review_reasons, '{}') AS review_reasons,
       detail, values_before, values_after, at
FROM review_actions WHERE invoice_id = %(invoice_id)s ORDER BY id

-- The document's bytes, for rendering its pages (cached by sha256 by the page).
-- name: review_page_document
SELECT d.content FROM documents d WHERE d.sha256 = %(sha256)s

-- A login lockout of the review page, for the record (sql/0017).
-- name: record_login_lockout
INSERT INTO review_login_lockouts (reviewer, client_address, failures, locked_until)
VALUES (%(reviewer)s, %(client_address)s, %(failures)s, now() + make_interval(secs => %(seconds)s))
