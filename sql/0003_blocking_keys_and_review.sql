-- Duplicate detection keyed by the match rule, and suspected duplicates held for a person.

-- A match that needed tolerance is 'suspected': it names its original like a duplicate does,
-- and the invoice is held (needs_review) instead of approved or rejected.
ALTER TABLE invoices DROP CONSTRAINT invoices_duplicate_status_check;
ALTER TABLE invoices ADD CONSTRAINT invoices_duplicate_status_check
    CHECK (duplicate_status IN ('original', 'duplicate', 'suspected'));
ALTER TABLE invoices DROP CONSTRAINT invoices_check;
ALTER TABLE invoices ADD CONSTRAINT invoices_duplicate_of_check
    CHECK ((duplicate_status IN ('duplicate', 'suspected')) = (duplicate_of IS NOT NULL));

-- needs_review: processed as far as the pipeline may go alone; a person decides the rest.
ALTER TABLE invoices DROP CONSTRAINT invoices_status_check;
ALTER TABLE invoices ADD CONSTRAINT invoices_status_check
    CHECK (status IN ('pending', 'processing', 'processed', 'failed', 'quarantined',
                      'needs_attention', 'needs_review'));
ALTER TABLE invoices ADD COLUMN review_reasons text[];
ALTER TABLE invoices ADD CONSTRAINT invoices_review_reasons_check
    CHECK (status <> 'needs_review' OR cardinality(review_reasons) > 0);

-- The blocking key (domain/keys.py): org, document type, currency, number skeleton and amount
-- bucket, hashed to 64 bits. The candidate search reads originals by it, through this index,
-- with no LIMIT: every original the matcher could accept is seen, however large the org.
ALTER TABLE invoices ADD COLUMN block_key bigint;
CREATE INDEX invoices_originals_by_block
    ON invoices (org_id, block_key) WHERE duplicate_status = 'original';
-- The vendor and amount candidate searches are gone, and with them their indexes.
DROP INDEX invoices_originals_by_vendor;
DROP INDEX invoices_originals_by_amount;

-- Last line of defence behind the advisory locks: one original per exact duplicate. The
-- block key joins the old index so that the constraint is exactly the matcher's exact rule
-- (same normalised key and total, and the same number skeleton through the block).
DROP INDEX invoices_one_original_per_key;
CREATE UNIQUE INDEX invoices_one_original_per_key
    ON invoices (org_id, business_key, payable_total, currency, block_key)
    WHERE duplicate_status = 'original';

-- Take a duplicate decision's advisory locks in one global order (ascending), so two deciders
-- whose lock sets overlap can never wait on each other in a cycle. Transaction-scoped: commit,
-- rollback or a dead connection releases them, also behind a transaction-pooling proxy.
CREATE FUNCTION take_dedupe_locks(p_lock_ids bigint[])
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_lock_id bigint;
BEGIN
    FOR v_lock_id IN SELECT DISTINCT k FROM unnest(p_lock_ids) AS k ORDER BY k LOOP
        PERFORM pg_advisory_xact_lock(v_lock_id);
    END LOOP;
END;
$$;

-- The candidates of a duplicate decision, read after its locks are granted: every original of
-- the org whose blocking key is in the new invoice's neighbourhood (domain/keys.py). Each pair
-- the matcher can accept is in it, no LIMIT hides one, and the (org_id, block_key) index keeps
-- it flat however large the org grows. One call, so the locks cost no extra round trip; and
-- the read is a statement of its own inside the function, so under READ COMMITTED it takes
-- its snapshot after the locks are granted and sees whatever the previous holder committed
-- (a single SELECT that both locked and read would read with a snapshot from before the wait).
CREATE FUNCTION locked_duplicate_candidates(p_lock_ids bigint[], p_org_id text, p_invoice_id uuid,
                                            p_block_keys bigint[])
RETURNS TABLE (id uuid, org_id text, fields jsonb)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM take_dedupe_locks(p_lock_ids);
    RETURN QUERY
        SELECT i.id, i.org_id, i.fields
        FROM invoices i
        WHERE i.org_id = p_org_id AND i.duplicate_status = 'original' AND i.block_key = ANY(p_block_keys)
          AND i.id <> p_invoice_id AND i.fields IS NOT NULL
        ORDER BY i.seq;
END;
$$;
