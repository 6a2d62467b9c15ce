-- Money fails closed (issue 18): an org's default currency, and a duplicate check that never
-- silently compares with nothing.

-- The currency of a document that names none (most scans). Without one such an invoice is held
-- (currency_unknown): nothing is paid in a currency nobody stated.
ALTER TABLE review_policies ADD COLUMN default_currency text CHECK (default_currency ~ '^[A-Z]{3}$');

-- The number key (domain/keys.py: NumberKey): org, document type and normalised number. Every
-- duplicate decision locks it besides its blocking keys, and reads the originals that share it,
-- so an invoice without a blocking key (a number without digits, no currency, a scan that read
-- less than the e-invoice it copies) is still compared with its number twins.
ALTER TABLE invoices ADD COLUMN number_key bigint;
CREATE INDEX invoices_originals_by_number
    ON invoices (org_id, number_key) WHERE duplicate_status = 'original';

-- The candidates of a duplicate decision, read after its locks are granted: every original of
-- the org in the blocking key's neighbourhood, and every original with the same number key.
-- Both searches use an index and neither has a LIMIT. As in 0003, the read is a statement of
-- its own after the locks, so its snapshot sees what the previous lock holder committed.
DROP FUNCTION locked_duplicate_candidates(bigint[], text, uuid, bigint[]);
CREATE FUNCTION locked_duplicate_candidates(p_lock_ids bigint[], p_org_id text, p_invoice_id uuid,
                                            p_block_keys bigint[], p_number_key bigint)
RETURNS TABLE (id uuid, org_id text, fields jsonb)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM take_dedupe_locks(p_lock_ids);
    RETURN QUERY
        SELECT i.id, i.org_id, i.fields
        FROM invoices i
        WHERE i.org_id = p_org_id AND i.duplicate_status = 'original'
          AND (i.block_key = ANY(p_block_keys) OR i.number_key = p_number_key)
          AND i.id <> p_invoice_id AND i.fields IS NOT NULL
        ORDER BY i.seq;
END;
$$;
