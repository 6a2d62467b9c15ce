-- Names in the org's profile and the vendor registry are compared by their identity skeleton
-- (domain/identity.name_skeleton, issue 52): Greek and Cyrillic look-alike letters read as the
-- Latin ones, legal forms dropped, spacing folded. The skeleton is computed in Python, so the
-- migrator recomputes the stored `value` of every kind = 'name' row right after this file
-- (db/name_skeletons.py, in the same transaction). VAT ids, tax numbers and IBANs stored before
-- their check digits were checked are left as they were: data is not deleted; one that fails its
-- check digits simply never equals an invoice's (which is refused before it is compared).
COMMENT ON COLUMN org_identities.value IS
    'normalised (domain/identity.normalise); a name: its skeleton (identity.name_skeleton, sql/0022)';
COMMENT ON COLUMN vendor_identifiers.value IS
    'normalised (domain/identity.normalise); a name: its skeleton (identity.name_skeleton, sql/0022)';
