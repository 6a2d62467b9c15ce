"""Mail intake's part of the store: configured mailboxes and the per-message checkpoint.

`take_message` is the exactly-once mechanism: the checkpoint row (org, mailbox, UIDVALIDITY,
UID) and every document and invoice made from the message's attachments commit in ONE
transaction. A pass killed before the commit leaves nothing, so the next pass reads the message
again; after the commit the message is never read again. Queries: sql/queries/mail.sql.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.engine.mail_records import (
    Mailbox,
    MessageKey,
    MessageRead,
    MessageTaken,
    StoredAttachment,
    TakenMessageRow,
)
from invoice_pipeline.engine.store.database import Database
from invoice_pipeline.engine.store.documents import Documents

MAIL = QueryFile("mail")


class Mail:
    """Mailboxes and checkpoints (queries: mail.sql); documents are stored via store.documents."""

    def __init__(self, db: Database, documents: Documents) -> None:
        self.db = db
        self.documents = documents

    # -- configured mailboxes ----------------------------------------------------------------

    def add_mailbox(self, org_id: str, url: str, password_file: str, added_by: str) -> bool:
        """Configure (or re-point the password file of) a mailbox; True when it is new."""
        with self.db.transaction() as conn:
            row = conn.execute(
                MAIL["add_mailbox"],
                {"org_id": org_id, "url": url, "password_file": password_file, "added_by": added_by},
            ).fetchone()
        return bool(row and row[0])

    def remove_mailbox(self, org_id: str, url: str) -> bool:
        """Stop polling a mailbox; what it brought in (checkpoints, invoices) stays."""
        with self.db.transaction() as conn:
            return conn.execute(MAIL["remove_mailbox"], {"org_id": org_id, "url": url}).rowcount > 0

    def mailboxes(self, org_id: str | None = None) -> list[Mailbox]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(conn, Mailbox, MAIL["list_mailboxes"], {"org_id": org_id})

    def mark_polled(self, org_id: str, url: str, error: str | None) -> None:
        with self.db.transaction() as conn:
            conn.execute(MAIL["mark_polled"], {"org_id": org_id, "url": url, "error": error})

    # -- checkpoints ---------------------------------------------------------------------------

    def untaken(self, org_id: str, mailbox: str, uidvalidity: int, uids: Sequence[int]) -> list[int]:
        """The UIDs among `uids` not yet taken from this mailbox under this UIDVALIDITY."""
        params = {"org_id": org_id, "mailbox": mailbox, "uidvalidity": uidvalidity, "uids": list(uids)}
        with self.db.pool.connection() as conn:
            return [row[0] for row in conn.execute(MAIL["untaken_uids"], params).fetchall()]

    def known_uidvalidities(self, org_id: str, mailbox: str) -> list[int]:
        with self.db.pool.connection() as conn:
            rows = conn.execute(MAIL["known_uidvalidities"], {"org_id": org_id, "mailbox": mailbox})
            return [row[0] for row in rows.fetchall()]

    def take_message(self, message: MessageRead) -> MessageTaken | None:
        """Checkpoint the message and store its attachments as invoices, in one transaction.

        None: another pass took it first (its checkpoint committed while this one waited).
        """
        return self.db.retrying(lambda: self._take(message), "take_message")

    def _take(self, message: MessageRead) -> MessageTaken | None:
        with self.db.transaction() as conn:
            if not self._checkpoint(conn, message):
                return None  # nothing was written: the other pass's commit holds it all
            stored = tuple(self._store_attachments(conn, message))
        return MessageTaken(message.key, message.outcome, message.reason, stored)

    def _checkpoint(self, conn: psycopg.Connection[Any], message: MessageRead) -> bool:
        params = {
            **_key_params(message.key),
            "message_id": message.message_id,
            "sender": message.sender,
            "subject": message.subject,
            "size_bytes": message.size_bytes,
            "outcome": message.outcome,
            "reason": message.reason,
        }
        return conn.execute(MAIL["take_message"], params).fetchone() is not None

    def _store_attachments(
        self, conn: psycopg.Connection[Any], message: MessageRead
    ) -> list[StoredAttachment]:
        stored = []
        for attachment in message.attachments:
            result = self.documents.store_document_in(
                conn, attachment.content, message.key.org_id, attachment.filename or None
            )
            conn.execute(
                MAIL["link_attachment"],
                {
                    **_key_params(message.key),
                    "position": attachment.position,
                    "filename": attachment.filename,
                    "content_type": attachment.content_type,
                    "sha256": result.sha256,
                    "invoice_id": result.invoice_id,
                },
            )
            stored.append(
                StoredAttachment(attachment.filename, result.invoice_id, result.sha256, result.created)
            )
        return stored

    def recent_messages(self, org_id: str, limit: int = 50) -> list[TakenMessageRow]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(
                conn, TakenMessageRow, MAIL["recent_messages"], {"org_id": org_id, "limit": limit}
            )


def _key_params(key: MessageKey) -> dict[str, Any]:
    return {"org_id": key.org_id, "mailbox": key.mailbox, "uidvalidity": key.uidvalidity, "uid": key.uid}
