-- Mail intake (issue 56 item 4; engine/mail.py, engine/store/mail.py, docs/mail.md).
--
-- mailboxes: what the sensor polls, per org. The URL never holds a password; the password is
-- read from password_file (a path) when a pass starts, and never stored here.
CREATE TABLE mailboxes (
    org_id         text NOT NULL CHECK (org_id <> ''),
    url            text NOT NULL CHECK (url ~ '^imaps?://'),
    password_file  text NOT NULL CHECK (password_file <> ''),
    added_by       text NOT NULL DEFAULT '',
    added_at       timestamptz NOT NULL DEFAULT now(),
    last_polled_at timestamptz,
    last_error     text,
    PRIMARY KEY (org_id, url)
);

-- One row per message taken: the checkpoint. Committed in the same transaction as the documents
-- and invoices made from the message's attachments (store/mail.py take_message), so a message is
-- either taken with all its invoices or not taken at all. The key is the mailbox's identity (its
-- normalised URL), the folder's UIDVALIDITY and the message's UID: a new UIDVALIDITY makes every
-- message new again, and the content dedupe (documents.sha256, invoices (org_id,
-- document_sha256)) makes re-reading them store nothing twice.
CREATE TABLE mail_messages (
    org_id      text NOT NULL CHECK (org_id <> ''),
    mailbox     text NOT NULL,
    uidvalidity bigint NOT NULL CHECK (uidvalidity > 0),
    uid         bigint NOT NULL CHECK (uid > 0),
    message_id  text NOT NULL DEFAULT '',
    sender      text NOT NULL DEFAULT '',
    subject     text NOT NULL DEFAULT '',
    size_bytes  bigint NOT NULL CHECK (size_bytes >= 0),
    -- ingested: at least one attachment stored as an invoice; skipped: none (reason says why).
    outcome     text NOT NULL CHECK (outcome IN ('ingested', 'skipped')),
    reason      text NOT NULL DEFAULT '',
    taken_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (org_id, mailbox, uidvalidity, uid),
    CHECK (outcome = 'ingested' OR reason <> '')
);

CREATE INDEX mail_messages_by_time ON mail_messages (org_id, taken_at);

-- Each attachment stored from a message, and the invoice it is (the same bytes in two messages
-- are one document and one invoice, named by both messages).
CREATE TABLE mail_attachments (
    org_id      text NOT NULL,
    mailbox     text NOT NULL,
    uidvalidity bigint NOT NULL,
    uid         bigint NOT NULL,
    position    integer NOT NULL CHECK (position >= 0),
    filename    text NOT NULL DEFAULT '',
    content_type text NOT NULL DEFAULT '',
    sha256      text NOT NULL REFERENCES documents (sha256),
    invoice_id  uuid NOT NULL REFERENCES invoices (id),
    PRIMARY KEY (org_id, mailbox, uidvalidity, uid, position),
    FOREIGN KEY (org_id, mailbox, uidvalidity, uid) REFERENCES mail_messages (org_id, mailbox, uidvalidity, uid)
);

CREATE INDEX mail_attachments_by_invoice ON mail_attachments (invoice_id);
