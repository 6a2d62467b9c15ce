-- Duplicate decisions (invoice_pipeline/engine/store/dedupe.py), made under the blocking keys'
-- advisory locks (sql/0003, the lock order in sql/0009).

-- Every advisory lock a chunk's decisions need, taken first and in sorted order (sql/0003).
-- name: take_dedupe_locks
SELECT take_dedupe_locks(%(lock_ids)s::bigint[])

-- What a decision's advisory locks are computed from: the invoice's org and fields (none
-- before its fields are read).
-- name: decision_keys_of
SELECT org_id, fields FROM invoices WHERE id = %(invoice_id)s AND fields IS NOT NULL

-- Takes the decision's advisory locks, then reads its candidates (see the function in sql/0007).
-- name: locked_duplicate_candidates
SELECT id, org_id, fields
FROM locked_duplicate_candidates(%(lock_ids)s::bigint[], %(org_id)s, %(invoice_id)s, %(block_keys)s::bigint[],
                                 %(number_key)s)

-- A chunk's decisions read once, after its locks and its fence (dedupe.py decide_duplicates).
-- First the chunk's own invoices: where each sorts among originals (seq), the fields and org a
-- candidate search would read of it, and the decision it has if a previous attempt made one.
-- name: chunk_invoices_to_decide
SELECT id AS invoice_id, org_id, seq, fields, duplicate_status AS status, duplicate_group_id AS group_id,
       duplicate_of AS original_id, business_key, match_how AS how, match_score AS score,
       coalesce(match_reasons, '{}') AS reasons
FROM invoices WHERE id = ANY(%(invoice_ids)s::uuid[])

-- Then every original locked_duplicate_candidates (sql/0007) would return for any invoice of
-- the chunk: its filter with the union of the chunk's orgs, blocking keys (keys.search_ids) and
-- number keys (through the same two indexes, no LIMIT), with the keys it filtered on, so that
-- each invoice's own candidates are picked out of this in Python by the very same filter.
-- name: chunk_duplicate_candidates
SELECT id, org_id, fields, seq, block_key, number_key
FROM invoices
WHERE org_id = ANY(%(org_ids)s::text[]) AND duplicate_status = 'original'
  AND (block_key = ANY(%(block_keys)s::bigint[]) OR number_key = ANY(%(number_keys)s::bigint[]))
  AND fields IS NOT NULL
ORDER BY seq

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

-- name: load_duplicate_decision
SELECT id AS invoice_id, duplicate_status AS status, duplicate_group_id AS group_id,
       duplicate_of AS original_id, business_key, match_how AS how, match_score AS score,
       coalesce(match_reasons, '{}') AS reasons
FROM invoices WHERE id = %(invoice_id)s AND duplicate_status IS NOT NULL

-- name: load_duplicate_decisions
SELECT id AS invoice_id, duplicate_status AS status, duplicate_group_id AS group_id,
       duplicate_of AS original_id, business_key, match_how AS how, match_score AS score,
       coalesce(match_reasons, '{}') AS reasons
FROM invoices WHERE id = ANY(%(invoice_ids)s::uuid[]) AND duplicate_status IS NOT NULL

-- Originals an invoice whose number was not read may copy (issue 52): the same seller (vendor
-- key), document type and currency, the amount within 0.01, issued within 31 days when both
-- dates are known. Not a decision (that is taken under the locks once a person types the
-- number): what the person is shown beside the invoice. The (org_id, vendor_key) index of
-- originals serves it.
-- name: originals_like_an_unread_number
SELECT id FROM invoices
WHERE org_id = %(org_id)s AND duplicate_status = 'original' AND id <> %(invoice_id)s
  AND vendor_key = ANY(%(vendor_keys)s::text[]) AND document_type = %(document_type)s
  AND currency IS NOT DISTINCT FROM %(currency)s
  AND abs(payable_total - %(payable_total)s::numeric) <= 0.01
  AND (issue_date IS NULL OR %(issue_date)s::date IS NULL OR abs(issue_date - %(issue_date)s::date) <= 31)
ORDER BY seq
LIMIT 3
