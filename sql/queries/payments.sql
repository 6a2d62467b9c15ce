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
