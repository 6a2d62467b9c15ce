-- store.corrections (invoice_pipeline/engine/store/corrections.py): a person's correction of a
-- held invoice's fields (sql/0010). The writes run after `fence` in the transaction of a
-- processing lock, like every review action, with the correction's audit row.

-- Invoices that name this one as their original: changing its keys would leave them pointing
-- at an invoice that no longer is what they were compared with.
-- name: correct_dependents
SELECT count(*) FROM invoices WHERE duplicate_of = %(invoice_id)s AND id <> %(invoice_id)s

-- A correction: the fields and their columns, the duplicate decision made again on them, and
-- the reasons it stays held for. The invoice stays needs_review: a person approves what was typed.
-- name: correct_save
UPDATE invoices
SET fields = %(fields)s, invoice_number = %(invoice_number)s, document_type = %(document_type)s,
    currency = %(currency)s, payable_total = %(payable_total)s, issue_date = %(issue_date)s,
    seller_name = %(seller_name)s, seller_vat_id = %(seller_vat_id)s,
    duplicate_status = %(duplicate_status)s, duplicate_of = %(original_id)s, duplicate_group_id = NULL,
    business_key = %(business_key)s, business_key_hash = %(business_key_hash)s, vendor_key = %(vendor_key)s,
    block_key = %(block_key)s, number_key = %(number_key)s,
    match_how = %(how)s, match_score = %(score)s, match_reasons = %(reasons)s,
    review_reasons = %(review_reasons)s::text[], updated_at = now()
WHERE id = %(invoice_id)s AND status = 'needs_review'
RETURNING status

-- name: insert_correction_action
INSERT INTO review_actions (invoice_id, job_id, action, actor, note, from_status, to_status,
                            review_reasons, detail, values_before, values_after)
VALUES (%(invoice_id)s, %(job_id)s, 'correct', %(actor)s, %(note)s, %(from_status)s, %(to_status)s,
        %(review_reasons)s, %(detail)s, %(values_before)s, %(values_after)s)
RETURNING id
