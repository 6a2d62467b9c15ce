-- The payment decision's transaction (invoice_pipeline/engine/store/payments.py, sql/0019):
-- the hold of now and what the posting records of the registry.

-- Held at posting: the approval (the pipeline's or a person's) no longer stands, and the
-- reasons of now replace whatever the invoice was held for before.
-- name: hold_at_posting
WITH dropped AS (
    DELETE FROM approvals WHERE invoice_id = %(invoice_id)s
)
UPDATE invoices SET review_reasons = %(reasons)s::text[], updated_at = now()
WHERE id = %(invoice_id)s

-- The registry's name and VAT id of a vendor, as the posting records them.
-- name: vendor_of_posting
SELECT v.name,
       (SELECT vi.shown FROM vendor_identifiers vi
        WHERE vi.org_id = v.org_id AND vi.vendor_id = v.id AND vi.kind = 'vat'
        ORDER BY vi.added_at, vi.value LIMIT 1) AS vat_id
FROM vendors v WHERE v.org_id = %(org_id)s AND v.id = %(vendor_id)s

-- The invoices a corrected invoice may refer to (its BT-25): the org's originals of the same
-- seller (vendor key) whose number key is the reference's (domain/keys.NumberKey of an invoice).
-- name: originals_a_correction_names
SELECT i.id FROM invoices i
WHERE i.org_id = %(org_id)s AND i.number_key = %(number_key)s AND i.id <> %(invoice_id)s
  AND i.vendor_key = ANY(%(vendor_keys)s::text[]) AND i.duplicate_status = 'original'
ORDER BY i.seq
LIMIT 2

-- What the ledger holds for an invoice a correction refers to: its own posting and every
-- correction's, read under the original's advisory lock (store/payments.py), so a correction
-- booked meanwhile is counted.
-- name: booking_of_original
SELECT i.id AS invoice_id, i.invoice_number, i.status, a.decision,
       coalesce((SELECT sum(p.amount) FROM ledger_postings p
                 WHERE p.invoice_id = i.id OR p.corrects_invoice_id = i.id), 0) AS booked,
       (SELECT min(p.currency) FROM ledger_postings p
        WHERE p.invoice_id = i.id OR p.corrects_invoice_id = i.id) AS booked_currency
FROM invoices i LEFT JOIN approvals a ON a.invoice_id = i.id
WHERE i.id = %(invoice_id)s AND i.org_id = %(org_id)s
