-- Data migrations (invoice_pipeline/db/rekey.py): keys recomputed for invoices decided before a
-- change of the match rule.

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
