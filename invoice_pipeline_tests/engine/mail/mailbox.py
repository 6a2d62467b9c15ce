"""What the mail intake's tests share: a private Dovecot per test, messages built with attachments,
and the database's view of what was taken."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from email.message import EmailMessage

import psycopg

from invoice_pipeline_tests.tools import needs_tool
from pipeline_support import dovecot

NEEDS_DOVECOT = needs_tool("dovecot-imapd", dovecot.unavailable_reason())


def private_dovecot() -> Iterator[dovecot.Dovecot]:
    """The `imap` fixture's server. Its password is random, so a search for it finds only real leaks."""
    with dovecot.running_dovecot() as server:
        yield server


def message(
    subject: str, *attachments: tuple[str, bytes], text: str = "Please find our invoice attached."
) -> bytes:
    """A message with `text` as its body and each (file name, bytes) attached by its extension's type."""
    msg = EmailMessage()
    msg["From"] = "billing@supplier.example"
    msg["To"] = "ap@buyer.example"
    msg["Subject"] = subject
    msg["Message-ID"] = f"<{hashlib.sha256(subject.encode()).hexdigest()[:16]}@supplier.example>"
    msg.set_content(text)
    for name, content in attachments:
        maintype, subtype = TYPES.get(name.rsplit(".", 1)[-1], ("application", "octet-stream"))
        msg.add_attachment(content, maintype=maintype, subtype=subtype, filename=name)
    return msg.as_bytes()


TYPES = {
    "pdf": ("application", "pdf"),
    "xml": ("application", "xml"),
    "json": ("application", "json"),
    "zip": ("application", "zip"),
    "p7s": ("application", "pkcs7-signature"),
}


def attachment(n: int) -> tuple[str, bytes]:
    """A distinct invoice-like attachment (the intake never parses it; the pipeline would)."""
    return f"invoice-{n}.pdf", b"%PDF-1.4\n% test attachment " + str(n).encode() + b"\n%%EOF\n"


def sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def invoices_by_sha(database_url: str, org: str) -> dict[str, int]:
    """How many invoices each document is, for the org."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT document_sha256, count(*) FROM invoices WHERE org_id = %s GROUP BY 1", (org,)
        ).fetchall()
    return {row[0]: int(row[1]) for row in rows}


def checkpoints(database_url: str, org: str) -> list[tuple[int, str, int]]:
    """(uid, outcome, attachments linked) for each message taken, in UID order."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT m.uid, m.outcome, count(a.position) FROM mail_messages m "
            "LEFT JOIN mail_attachments a USING (org_id, mailbox, uidvalidity, uid) "
            "WHERE m.org_id = %s GROUP BY m.uid, m.outcome ORDER BY m.uid",
            (org,),
        ).fetchall()
    return [(int(r[0]), str(r[1]), int(r[2])) for r in rows]


HOLD_CHECKPOINT = (
    "INSERT INTO mail_messages (org_id, mailbox, uidvalidity, uid, size_bytes, outcome, reason)"
    " VALUES (%s, %s, %s, %s, 0, 'skipped', 'held by the test')"
)
HOLD_DOCUMENT = "INSERT INTO documents (sha256, content, size_bytes) VALUES (%s, '', 0)"


def holding(database_url: str, sql: str, params: tuple[object, ...]) -> psycopg.Connection:
    """A connection holding one row uncommitted (a message's checkpoint: HOLD_CHECKPOINT with
    org, mailbox, UIDVALIDITY, UID; an attachment's document: HOLD_DOCUMENT with its sha256). A
    pass that must write the same row waits on it: the tests place a kill, a cut or a commit there."""
    holder = psycopg.connect(database_url)
    holder.execute(sql, params)
    return holder
