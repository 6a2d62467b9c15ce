-- Vendor layouts learnt from people's decisions (invoice_pipeline/engine/store/layouts.py,
-- sql/0011_vendor_layouts.sql). Every statement names its organisation, except the ones by a
-- layout's id that a person gives at the terminal (show, disable).

-- What the field-extraction stage tries first, once per chunk: the orgs' enabled layouts.
-- name: enabled_layouts
SELECT id, org_id, vendor_key, version, layout, learnt_from, taught_by, taught_at, enabled,
       disabled_reason, superseded_by, confirmations, last_confirmed_at, state
FROM vendor_layouts
WHERE org_id = ANY(%(org_ids)s::text[]) AND enabled
ORDER BY org_id, vendor_key, version

-- name: layouts_of_vendor
SELECT id, org_id, vendor_key, version, layout, learnt_from, taught_by, taught_at, enabled,
       disabled_reason, superseded_by, confirmations, last_confirmed_at, state
FROM vendor_layouts
WHERE org_id = %(org_id)s AND vendor_key = %(vendor_key)s
ORDER BY version

-- name: list_layouts
SELECT id, org_id, vendor_key, version, layout, learnt_from, taught_by, taught_at, enabled,
       disabled_reason, superseded_by, confirmations, last_confirmed_at, state
FROM vendor_layouts
WHERE (%(org_id)s::text IS NULL OR org_id = %(org_id)s::text)
  AND (%(all)s OR enabled)
ORDER BY org_id, vendor_key, version

-- name: layout_by_id
SELECT id, org_id, vendor_key, version, layout, learnt_from, taught_by, taught_at, enabled,
       disabled_reason, superseded_by, confirmations, last_confirmed_at, state
FROM vendor_layouts WHERE id = %(id)s

-- Versions of one vendor's layout are numbered in turn; the caller holds lock_vendor.
-- name: lock_vendor
SELECT pg_advisory_xact_lock(hashtextextended('vendor_layouts:' || %(org_id)s || ':' || %(vendor_key)s, 0))

-- A version starts in shadow, or active when a person's approval taught it (issue 54).
-- name: insert_layout
INSERT INTO vendor_layouts (org_id, vendor_key, version, layout, learnt_from, taught_by, state)
SELECT %(org_id)s, %(vendor_key)s, coalesce(max(version), 0) + 1, %(layout)s::jsonb, %(learnt_from)s,
       %(taught_by)s, %(state)s
FROM vendor_layouts WHERE org_id = %(org_id)s AND vendor_key = %(vendor_key)s
RETURNING id, version, taught_at

-- name: supersede_layout
UPDATE vendor_layouts
SET enabled = false, superseded_by = %(by)s,
    disabled_reason = 'superseded by version ' || %(version)s || ': ' || %(why)s
WHERE id = %(id)s AND org_id = %(org_id)s

-- A decision read as the layout reads it: counted, and a shadow version becomes active. Returns
-- the state it had, so the activation is recorded once (vendor_layout_events).
-- name: confirm_layout
-- The invoice a version was learnt from never confirms it: vouching for that invoice twice would
-- end shadow mode with nobody having seen the version read another page (issue 59).
UPDATE vendor_layouts v
SET confirmations = v.confirmations + 1, last_confirmed_at = now(), state = 'active'
FROM (SELECT id, state FROM vendor_layouts
      WHERE id = %(id)s AND org_id = %(org_id)s AND enabled
        AND learnt_from IS DISTINCT FROM %(invoice_id)s FOR UPDATE) AS before
WHERE v.id = before.id
RETURNING before.state

-- name: layout_event
INSERT INTO vendor_layout_events (layout_id, org_id, event, invoice_id, actor, detail)
VALUES (%(layout_id)s, %(org_id)s, %(event)s, %(invoice_id)s, %(actor)s, %(detail)s)

-- name: layout_events
SELECT layout_id, org_id, event, invoice_id, actor, at, detail
FROM vendor_layout_events WHERE org_id = %(org_id)s ORDER BY at, id

-- The enabled versions an invoice taught, to undo when it is rejected.
-- name: layouts_learnt_from
SELECT id, vendor_key FROM vendor_layouts
WHERE org_id = %(org_id)s AND learnt_from = %(invoice_id)s AND enabled
ORDER BY vendor_key, version

-- name: undo_layout
UPDATE vendor_layouts SET enabled = false, disabled_reason = %(reason)s
WHERE id = %(id)s AND org_id = %(org_id)s AND enabled

-- The version an undone one had superseded is read again, as it was (its state kept).
-- name: restore_superseded
UPDATE vendor_layouts SET enabled = true, superseded_by = NULL, disabled_reason = NULL
WHERE org_id = %(org_id)s AND superseded_by = %(id)s
RETURNING id

-- name: disable_layout
UPDATE vendor_layouts SET enabled = false, disabled_reason = %(reason)s
WHERE id = %(id)s AND (%(org_id)s::text IS NULL OR org_id = %(org_id)s::text) AND enabled
RETURNING id
