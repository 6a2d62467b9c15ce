-- Data step of sql/0022 (db/name_skeletons.py): stored names recomputed as skeletons.

-- Oldest first: when two names of one owner share a skeleton, the first one taught is kept.
-- name: org_names
SELECT org_id, value, shown FROM org_identities WHERE kind = 'name' ORDER BY added_at, org_id, value

-- name: vendor_names
SELECT org_id, vendor_id, value, shown FROM vendor_identifiers WHERE kind = 'name'
ORDER BY added_at, org_id, vendor_id, value

-- Moved unless the owner already has that skeleton (nothing returned then).
-- name: move_org_name
UPDATE org_identities SET value = %(skeleton)s
WHERE org_id = %(org_id)s AND kind = 'name' AND value = %(value)s
  AND NOT EXISTS (
      SELECT 1 FROM org_identities o
      WHERE o.org_id = %(org_id)s AND o.kind = 'name' AND o.value = %(skeleton)s
  )
RETURNING value

-- name: move_vendor_name
UPDATE vendor_identifiers SET value = %(skeleton)s
WHERE org_id = %(org_id)s AND vendor_id = %(vendor_id)s AND kind = 'name' AND value = %(value)s
  AND NOT EXISTS (
      SELECT 1 FROM vendor_identifiers v
      WHERE v.org_id = %(org_id)s AND v.vendor_id = %(vendor_id)s AND v.kind = 'name'
        AND v.value = %(skeleton)s
  )
RETURNING value

-- The same name twice (e.g. "Acme GmbH" and "ACME"): the later row is a duplicate now.
-- name: drop_org_name
DELETE FROM org_identities WHERE org_id = %(org_id)s AND kind = 'name' AND value = %(value)s

-- name: drop_vendor_name
DELETE FROM vendor_identifiers
WHERE org_id = %(org_id)s AND vendor_id = %(vendor_id)s AND kind = 'name' AND value = %(value)s
