-- Mail intake (invoice_pipeline/engine/store/mail.py; sql/0026_mail_intake.sql): configured
-- mailboxes, and the per-message checkpoint written in the same transaction as the message's
-- invoices.

-- name: add_mailbox
INSERT INTO mailboxes (org_id, url, password_file, added_by)
VALUES (%(org_id)s, %(url)s, %(password_file)s, %(added_by)s)
ON CONFLICT (org_id, url) DO UPDATE SET password_file = EXCLUDED.password_file
RETURNING (xmax = 0) AS created

-- name: remove_mailbox
DELETE FROM mailboxes WHERE org_id = %(org_id)s AND url = %(url)s

-- name: list_mailboxes
SELECT m.org_id, m.url, m.password_file, m.added_by, m.added_at, m.last_polled_at, m.last_error,
       (SELECT count(*) FROM mail_messages t WHERE t.org_id = m.org_id AND t.mailbox = m.url) AS messages_taken
FROM mailboxes m
WHERE %(org_id)s::text IS NULL OR m.org_id = %(org_id)s
ORDER BY m.org_id, m.url

-- name: mark_polled
UPDATE mailboxes SET last_polled_at = now(), last_error = %(error)s
WHERE org_id = %(org_id)s AND url = %(url)s

-- Which of the server's UIDs this mailbox has not taken yet under this UIDVALIDITY.
-- name: untaken_uids
SELECT u FROM unnest(%(uids)s::bigint[]) AS u
WHERE NOT EXISTS (
    SELECT 1 FROM mail_messages m
    WHERE m.org_id = %(org_id)s AND m.mailbox = %(mailbox)s AND m.uidvalidity = %(uidvalidity)s AND m.uid = u
)
ORDER BY u

-- name: known_uidvalidities
SELECT DISTINCT uidvalidity FROM mail_messages WHERE org_id = %(org_id)s AND mailbox = %(mailbox)s
ORDER BY uidvalidity

-- The checkpoint. A concurrent pass that took the same message first makes this wait for its
-- commit and then return no row: the caller rolls its whole transaction back.
-- name: take_message
INSERT INTO mail_messages (org_id, mailbox, uidvalidity, uid, message_id, sender, subject, size_bytes,
                           outcome, reason)
VALUES (%(org_id)s, %(mailbox)s, %(uidvalidity)s, %(uid)s, %(message_id)s, %(sender)s, %(subject)s,
        %(size_bytes)s, %(outcome)s, %(reason)s)
ON CONFLICT (org_id, mailbox, uidvalidity, uid) DO NOTHING
RETURNING uid

-- name: link_attachment
INSERT INTO mail_attachments (org_id, mailbox, uidvalidity, uid, position, filename, content_type, sha256,
                              invoice_id)
VALUES (%(org_id)s, %(mailbox)s, %(uidvalidity)s, %(uid)s, %(position)s, %(filename)s, %(content_type)s,
        %(sha256)s, %(invoice_id)s)

-- name: recent_messages
SELECT m.mailbox, m.uidvalidity, m.uid, m.message_id, m.sender, m.subject, m.size_bytes, m.outcome,
       m.reason, m.taken_at,
       coalesce(array_agg(a.invoice_id ORDER BY a.position) FILTER (WHERE a.invoice_id IS NOT NULL),
                '{}') AS invoice_ids
FROM mail_messages m
LEFT JOIN mail_attachments a USING (org_id, mailbox, uidvalidity, uid)
WHERE m.org_id = %(org_id)s
GROUP BY m.org_id, m.mailbox, m.uidvalidity, m.uid
ORDER BY m.taken_at DESC
LIMIT %(limit)s
