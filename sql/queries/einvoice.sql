-- What a structured e-invoice's own rules said about it (sql/0024, engine/store/documents.py).

-- name: save_einvoice_check
INSERT INTO einvoice_checks (invoice_id, job_id, rule_set, rule_set_version, profile, skipped,
                             fatal_count, warning_count)
VALUES (%(invoice_id)s, %(job_id)s, %(rule_set)s, %(rule_set_version)s, %(profile)s, %(skipped)s,
        %(fatal_count)s, %(warning_count)s)
ON CONFLICT (invoice_id) DO UPDATE
SET job_id = EXCLUDED.job_id, rule_set = EXCLUDED.rule_set, rule_set_version = EXCLUDED.rule_set_version,
    profile = EXCLUDED.profile, skipped = EXCLUDED.skipped, fatal_count = EXCLUDED.fatal_count,
    warning_count = EXCLUDED.warning_count, checked_at = clock_timestamp()

-- name: forget_einvoice_findings
DELETE FROM einvoice_findings WHERE invoice_id = %(invoice_id)s

-- name: save_einvoice_findings
INSERT INTO einvoice_findings (invoice_id, position, rule_id, flag, text, location)
SELECT %(invoice_id)s, f.position, f.rule_id, f.flag, f.text, f.location
FROM unnest(%(rule_ids)s::text[], %(flags)s::text[], %(texts)s::text[], %(locations)s::text[])
     WITH ORDINALITY AS f (rule_id, flag, text, location, position)

-- name: einvoice_findings_of
SELECT c.rule_set, c.rule_set_version, c.profile, c.skipped, f.rule_id, f.flag, f.text, f.location
FROM einvoice_checks c
LEFT JOIN einvoice_findings f ON f.invoice_id = c.invoice_id
WHERE c.invoice_id = %(invoice_id)s
ORDER BY f.position
