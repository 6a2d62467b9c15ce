-- One seller's number is paid once (issue 58). Two documents of one seller whose normalised
-- numbers agree are compared whatever their amounts and dates (domain/matching.py): a re-priced
-- re-send, or the same number in another year, is held for a person beside its original.
--
-- So the blocking key (domain/keys.py) no longer holds the amount bucket: it is (org, document
-- type, currency, number skeleton), and a decision locks and searches that one key and its
-- number key. The stored invoices.block_key of every decided invoice changes meaning; keys are
-- computed in Python, so the data migration that runs right after this file in its transaction
-- recomputes them (db/rekey.py rekey_decided_invoices, wired in db/migrate.py).
--
-- The last line of defence behind the advisory locks, one original per exact duplicate, follows
-- the exact rule: it now needs the same issue year too. Invoice "7" of 2025 and invoice "7" of
-- 2026 with the same amount are held as suspected, and a person who says "not a duplicate" makes
-- the second an original beside the first; without the year that release would be refused.
-- A missing date counts as one year of its own (0), as before this file two such rows collide.
DROP INDEX invoices_one_original_per_key;
CREATE UNIQUE INDEX invoices_one_original_per_key
    ON invoices (org_id, business_key, payable_total, currency, block_key,
                 coalesce(extract(year FROM issue_date), 0))
    WHERE duplicate_status = 'original';
