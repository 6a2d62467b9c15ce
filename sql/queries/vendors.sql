-- The org's own identity and its vendor registry (invoice_pipeline/engine/store/vendors.py,
-- sql/0014). Every statement names its org: no query reads another org's identity or vendors.

-- name: org_identities
SELECT org_id, kind, value, shown FROM org_identities
WHERE org_id = ANY(%(org_ids)s::text[])
ORDER BY org_id, kind, value

-- name: add_org_identity
INSERT INTO org_identities (org_id, kind, value, shown, source, added_by)
VALUES (%(org_id)s, %(kind)s, %(value)s, %(shown)s, %(source)s, %(added_by)s)
ON CONFLICT (org_id, kind, value) DO NOTHING
RETURNING value

-- The registered vendor of the org that has this identifier (an org identity must not be one).
-- name: vendor_owning_identifier
SELECT v.id, v.name FROM vendor_identifiers vi
JOIN vendors v ON v.org_id = vi.org_id AND v.id = vi.vendor_id
WHERE vi.org_id = %(org_id)s AND vi.kind = %(kind)s AND vi.value = %(value)s
ORDER BY v.id LIMIT 1

-- name: remove_org_identity
DELETE FROM org_identities WHERE org_id = %(org_id)s AND kind = %(kind)s AND value = %(value)s
RETURNING value

-- The buyer parties of the org's posted structured e-invoices, with how many invoices name each:
-- what its senders call it, proposed to a person (`org profile seed`), never added by itself.
-- name: buyer_parties_of_posted_einvoices
SELECT i.fields ->> 'buyer_name' AS buyer_name, i.fields ->> 'buyer_vat_id' AS buyer_vat_id,
       count(DISTINCT i.id) AS invoices
FROM invoices i
JOIN ledger_postings p ON p.invoice_id = i.id
JOIN extracted_texts t ON t.invoice_id = i.id
WHERE i.org_id = %(org_id)s AND t.format IN ('ubl', 'cii', 'facturx-pdf', 'json')
GROUP BY 1, 2

-- The vendors any of the given (org, kind, value) identifiers names, with all their identifiers.
-- name: vendors_named_by
WITH wanted AS (
    SELECT * FROM unnest(%(org_ids)s::text[], %(kinds)s::text[], %(values)s::text[]) AS w(org_id, kind, value)
), hits AS (
    SELECT DISTINCT vi.org_id, vi.vendor_id
    FROM vendor_identifiers vi JOIN wanted w USING (org_id, kind, value)
)
SELECT v.id AS vendor_id, v.org_id, v.name, v.default_currency,
       array_agg(vi.kind ORDER BY vi.kind, vi.value) AS kinds,
       array_agg(vi.value ORDER BY vi.kind, vi.value) AS vals,
       array_agg(vi.shown ORDER BY vi.kind, vi.value) AS shown
FROM hits h
JOIN vendors v ON v.org_id = h.org_id AND v.id = h.vendor_id
JOIN vendor_identifiers vi ON vi.org_id = v.org_id AND vi.vendor_id = v.id
GROUP BY v.id, v.org_id, v.name, v.default_currency

-- name: list_vendors
SELECT v.id AS vendor_id, v.org_id, v.name, v.default_currency,
       array_agg(vi.kind ORDER BY vi.kind, vi.value) FILTER (WHERE vi.kind IS NOT NULL) AS kinds,
       array_agg(vi.value ORDER BY vi.kind, vi.value) FILTER (WHERE vi.kind IS NOT NULL) AS vals,
       array_agg(vi.shown ORDER BY vi.kind, vi.value) FILTER (WHERE vi.kind IS NOT NULL) AS shown
FROM vendors v
LEFT JOIN vendor_identifiers vi ON vi.org_id = v.org_id AND vi.vendor_id = v.id
WHERE v.org_id = %(org_id)s
GROUP BY v.id, v.org_id, v.name, v.default_currency
ORDER BY v.id

-- The orgs the database knows (a profile, a vendor, or an invoice), for a reviewer allowed every
-- org to pick from (the review page's "Who is paid"): their ids only, nothing of any org's data.
-- The invoices' orgs by a loose scan of invoices_one_per_document (org_id first): one index
-- probe per org, not a read of every invoice.
-- name: known_orgs
WITH RECURSIVE invoice_orgs(org_id) AS (
    (SELECT org_id FROM invoices WHERE document_sha256 IS NOT NULL ORDER BY org_id LIMIT 1)
    UNION ALL
    SELECT (SELECT i.org_id FROM invoices i
            WHERE i.document_sha256 IS NOT NULL AND i.org_id > o.org_id
            ORDER BY i.org_id LIMIT 1)
    FROM invoice_orgs o WHERE o.org_id IS NOT NULL
)
SELECT org_id FROM invoice_orgs WHERE org_id IS NOT NULL
UNION SELECT org_id FROM org_identities
UNION SELECT org_id FROM vendors
ORDER BY org_id
LIMIT %(limit)s

-- The currencies of each vendor's invoices that a person approved and the ledger posted (issue 54):
-- what a sign several currencies print ("$", "kr") means on the vendor's next page.
-- name: currencies_a_person_approved
SELECT lp.org_id, lp.vendor_id, array_agg(DISTINCT lp.currency ORDER BY lp.currency)
FROM ledger_postings lp
JOIN approvals a ON a.invoice_id = lp.invoice_id
JOIN unnest(%(org_ids)s::text[], %(vendor_ids)s::bigint[]) AS wanted (org_id, vendor_id)
  ON wanted.org_id = lp.org_id AND wanted.vendor_id = lp.vendor_id
WHERE a.decision = 'approved' AND starts_with(a.rule, 'approved by ')
GROUP BY lp.org_id, lp.vendor_id

-- name: insert_vendor
INSERT INTO vendors (org_id, name, default_currency, source, created_by)
VALUES (%(org_id)s, %(name)s, %(default_currency)s, %(source)s, %(actor)s)
RETURNING id

-- Names are not unique; a VAT id, tax number or IBAN already owned by a vendor of the org is
-- left with its owner (nothing returned).
-- name: add_vendor_identifier
INSERT INTO vendor_identifiers (org_id, vendor_id, kind, value, shown, source, added_by, learnt_from)
VALUES (%(org_id)s, %(vendor_id)s, %(kind)s, %(value)s, %(shown)s, %(source)s, %(actor)s, %(invoice_id)s)
ON CONFLICT DO NOTHING
RETURNING vendor_id

-- The owner of an identifier (for a name, which several vendors may share, the first registered).
-- name: vendor_owning
SELECT vendor_id FROM vendor_identifiers
WHERE org_id = %(org_id)s AND kind = %(kind)s AND value = %(value)s
ORDER BY vendor_id LIMIT 1

-- name: vendor_event
INSERT INTO vendor_events (org_id, vendor_id, event, detail, actor, invoice_id)
VALUES (%(org_id)s, %(vendor_id)s, %(event)s, %(detail)s, %(actor)s, %(invoice_id)s)

-- name: vendor_events_of
SELECT event, detail, actor, invoice_id, at FROM vendor_events
WHERE org_id = %(org_id)s AND vendor_id = %(vendor_id)s ORDER BY id

-- The identity keys' advisory locks (domain/payment.identity_lock_id), in one sorted call: the
-- same function, and so the same global order, as the dedupe locks (sql/0003, sql/0009).
-- name: take_identity_locks
SELECT take_dedupe_locks(%(lock_ids)s::bigint[])
