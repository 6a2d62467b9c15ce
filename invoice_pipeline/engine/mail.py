"""Mail intake: one pass over a mailbox folder, each message taken exactly once.

A pass opens the folder read-only (EXAMINE: nothing on the server is changed, no flag is set,
nothing is moved), lists its UIDs, asks the store which it has not taken under the folder's
current UIDVALIDITY, and takes each of those in UID order: the message is downloaded, its
attachments picked (mail_message.py), and `store.mail.take_message` commits the checkpoint
(mailbox, UIDVALIDITY, UID) together with the attachments' documents and invoices. A kill before
that commit leaves nothing behind, and the next pass reads the message again; after it, the
message is never read again. Because nothing is written to the server, there is no step after
the commit that could fail.

A new UIDVALIDITY (the folder was recreated, or the server renumbered it) makes every message in
it new: the pass reads them all again. Their attachments are the same bytes, so the store's
content dedupe (one document per sha256, one invoice per org and document) stores nothing twice;
only new checkpoint rows are written. `MailPass.earlier_uidvalidities` says when it happened.

Credentials: the URL never holds a password (refused); the password is read from a file when the
pass starts and handed to the IMAP login only. Plain `imap://` is refused unless the host is a
loopback address; `imaps://` verifies the server's certificate and host name (the system's CA
store, or SSL_CERT_FILE).
"""

from __future__ import annotations

import imaplib
import ipaddress
import re
import ssl
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from invoice_pipeline.engine.mail_message import headers_only, read_message
from invoice_pipeline.engine.mail_records import MessageKey, MessageRead, MessageTaken
from invoice_pipeline.engine.store import InvoiceStore

IMAPS_PORT = 993
IMAP_PORT = 143
# A message this large is recorded with why and not downloaded: base64 makes an attachment at
# the document limit (20 MiB, documents/limits.py) ~27 MiB, so this leaves room for several.
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
DEFAULT_TIMEOUT_S = 60.0
# UIDs per FETCH command: keeps the command line short for a folder of thousands.
UID_BATCH = 500
LOOPBACK_NAMES = ("localhost",)
_SIZE = re.compile(rb"UID (\d+) RFC822\.SIZE (\d+)|RFC822\.SIZE (\d+) UID (\d+)")


class MailConfigError(ValueError):
    """A mailbox URL or password file that cannot be used; the message says what to change."""


class MailboxError(Exception):
    """The server refused or failed (login, folder, connection, TLS): one line, no password."""


@dataclass(frozen=True)
class MailboxUrl:
    """`imaps://USER@HOST:PORT/FOLDER`; `identity` is the normalised form checkpoints are keyed by."""

    tls: bool
    user: str
    host: str
    port: int
    folder: str

    @classmethod
    def parse(cls, url: str) -> MailboxUrl:
        parts = urlsplit(url.strip())
        scheme = parts.scheme.lower()
        if scheme not in ("imap", "imaps"):
            raise MailConfigError(
                f"a mailbox URL starts with imaps:// (or imap:// on loopback), not {scheme or url!r}"
            )
        if parts.password is not None:
            raise MailConfigError(
                "the mailbox URL holds a password: remove it and give the password in a file (--password-file)"
            )
        if parts.query or parts.fragment:
            raise MailConfigError("a mailbox URL has no query or fragment: imaps://USER@HOST:PORT/FOLDER")
        if not parts.username:
            raise MailConfigError("the mailbox URL names no user: imaps://USER@HOST:PORT/FOLDER")
        host = (parts.hostname or "").lower()
        if not host:
            raise MailConfigError("the mailbox URL names no host: imaps://USER@HOST:PORT/FOLDER")
        try:
            port = parts.port or (IMAPS_PORT if scheme == "imaps" else IMAP_PORT)
        except ValueError:
            raise MailConfigError("the mailbox URL's port is not a number from 1 to 65535") from None
        if scheme == "imap" and not is_loopback(host):
            raise MailConfigError(
                f"imap:// sends the password unencrypted, so it is only allowed to a loopback host "
                f"(127.0.0.1, ::1, localhost), not {host}: use imaps://"
            )
        folder = unquote(parts.path.lstrip("/")) or "INBOX"
        if not folder.isascii() or any(not c.isprintable() for c in folder):
            raise MailConfigError(
                "the folder name must be printable ASCII: give a non-ASCII folder by its IMAP "
                "(modified UTF-7) name, percent-encoded"
            )
        return cls(scheme == "imaps", unquote(parts.username), host, port, folder)

    @property
    def identity(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "imaps" if self.tls else "imap"
        return f"{scheme}://{quote(self.user, safe='')}@{host}:{self.port}/{quote(self.folder, safe='/')}"


def is_loopback(host: str) -> bool:
    """A loopback address or `localhost`, by its text alone (no DNS lookup to be fooled by)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_password(path: Path) -> str:
    """The password in `path`: its content without the final line break."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MailConfigError(
            f"the password file {str(path)!r} cannot be read: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    password = text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text
    if not password:
        raise MailConfigError(f"the password file {str(path)!r} is empty")
    return password


@dataclass
class MailPass:
    """What one pass over a mailbox did."""

    mailbox: str
    uidvalidity: int
    on_server: int = 0
    taken: list[MessageTaken] = field(default_factory=list)
    taken_elsewhere: int = 0  # another pass took these first (both ran at once)
    vanished: int = 0  # listed, then gone before they were read (moved or deleted by someone)
    # UIDVALIDITYs this mailbox was read under before, when the current one is new: the folder's
    # messages were all read again (content dedupe kept them from becoming new invoices).
    earlier_uidvalidities: list[int] = field(default_factory=list)
    left_for_next_pass: int = 0  # not read this pass: over `max_messages`

    @property
    def invoices_created(self) -> int:
        return sum(1 for t in self.taken for s in t.stored if s.created)


def fetch_mail(
    store: InvoiceStore,
    org_id: str,
    url: MailboxUrl,
    password: str,
    *,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_messages: int | None = None,
) -> MailPass:
    """One pass: every message not yet taken from the folder is taken, in UID order (at most
    `max_messages` of them: a sensor tick stays short, the next tick goes on)."""
    mailbox = url.identity
    with open_folder(url, password, timeout_s) as folder:
        known = store.mail.known_uidvalidities(org_id, mailbox)
        done = MailPass(mailbox, folder.uidvalidity)
        if known and folder.uidvalidity not in known:
            done.earlier_uidvalidities = known
        uids = folder.uids()
        done.on_server = len(uids)
        todo = store.mail.untaken(org_id, mailbox, folder.uidvalidity, uids)
        if max_messages is not None and len(todo) > max_messages:
            done.left_for_next_pass = len(todo) - max_messages
            todo = todo[:max_messages]
        for batch_start in range(0, len(todo), UID_BATCH):
            batch = todo[batch_start : batch_start + UID_BATCH]
            sizes = folder.sizes(batch)
            for uid in batch:
                key = MessageKey(org_id, mailbox, folder.uidvalidity, uid)
                read = _read(folder, key, sizes.get(uid), max_message_bytes)
                if read is None:
                    done.vanished += 1
                    continue
                taken = store.mail.take_message(read)
                if taken is None:
                    done.taken_elsewhere += 1
                else:
                    done.taken.append(taken)
    return done


@dataclass(frozen=True)
class MailboxPoll:
    """One configured mailbox polled: what its pass did, or why it could not run."""

    org_id: str
    url: str
    result: MailPass | None
    error: str | None


def poll_mailboxes(
    store: InvoiceStore, org_id: str | None = None, max_messages: int | None = None
) -> list[MailboxPoll]:
    """A pass over every configured mailbox (of one org, or all), each on its own: one that
    fails (a wrong password, a server down) is recorded on its row and the others still run."""
    polls = []
    for box in store.mail.mailboxes(org_id):
        result, error = None, None
        try:
            password = read_password(Path(box.password_file))
            url = MailboxUrl.parse(box.url)
            result = fetch_mail(store, box.org_id, url, password, max_messages=max_messages)
        except (MailConfigError, MailboxError) as exc:
            error = str(exc)
        store.mail.mark_polled(box.org_id, box.url, error)
        polls.append(MailboxPoll(box.org_id, box.url, result, error))
    return polls


def _read(folder: ImapFolder, key: MessageKey, size: int | None, max_bytes: int) -> MessageRead | None:
    if size is None:
        return None
    if size > max_bytes:
        head = folder.headers(key.uid)
        if head is None:
            return None
        reason = (
            f"the message is {size:,} bytes, above the {max_bytes:,}-byte limit for one message, so it "
            "was not downloaded and will not be read again: ask the sender for the invoices in "
            "separate messages"
        )
        return headers_only(key, head, size, reason)
    raw = folder.message(key.uid)
    if raw is None:
        return None
    try:
        return read_message(key, raw)
    except Exception as exc:  # one malformed message must not stop the mailbox at it, every pass
        reason = (
            f"the message could not be read as MIME ({type(exc).__name__}: {exc}); it is left on the server"
        )
        return MessageRead(key, "", "", "", len(raw), (), " ".join(reason.split())[:500])


class ImapFolder:
    """A folder opened read-only over one IMAP connection (stdlib imaplib)."""

    def __init__(self, conn: imaplib.IMAP4, uidvalidity: int) -> None:
        self.conn = conn
        self.uidvalidity = uidvalidity

    def uids(self) -> list[int]:
        data = self._ok(self.conn.uid("SEARCH", "ALL"), "UID SEARCH")
        return sorted(int(u) for u in (data[0] or b"").split())

    def sizes(self, uids: Sequence[int]) -> dict[int, int]:
        """Each message's size; a UID missing from the answer was expunged since the listing."""
        if not uids:
            return {}
        data = self._ok(self.conn.uid("FETCH", ",".join(map(str, uids)), "(UID RFC822.SIZE)"), "FETCH size")
        found: dict[int, int] = {}
        for item in data:
            line = item[0] if isinstance(item, tuple) else item
            for m in _SIZE.finditer(line or b""):
                uid, size = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
                found[int(uid)] = int(size)
        return found

    def message(self, uid: int) -> bytes | None:
        return self._literal(uid, "(BODY.PEEK[])")

    def headers(self, uid: int) -> bytes | None:
        return self._literal(uid, "(BODY.PEEK[HEADER.FIELDS (MESSAGE-ID FROM SUBJECT)])")

    def _literal(self, uid: int, what: str) -> bytes | None:
        data = self._ok(self.conn.uid("FETCH", str(uid), what), "FETCH")
        literals = [item for item in data if isinstance(item, tuple)]
        for item in literals:
            if re.search(rb"\bUID %d\b" % uid, item[0]):
                return bytes(item[1])
        # A server may name the UID after the literal; asked for one UID, one literal is it.
        return bytes(literals[0][1]) if len(literals) == 1 else None  # none: expunged since the listing

    @staticmethod
    def _ok(answer: tuple[str, list[Any]], what: str) -> list[Any]:
        typ, data = answer
        if typ != "OK":
            raise MailboxError(f"the server refused {what}: {_text(data)}")
        return data


@contextmanager
def open_folder(url: MailboxUrl, password: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Iterator[ImapFolder]:
    """Log in and EXAMINE the folder; every server or network failure is a MailboxError."""
    try:
        if url.tls:
            conn: imaplib.IMAP4 = imaplib.IMAP4_SSL(
                url.host, url.port, ssl_context=ssl.create_default_context(), timeout=timeout_s
            )
        else:
            conn = imaplib.IMAP4(url.host, url.port, timeout=timeout_s)
    except (OSError, imaplib.IMAP4.error) as exc:
        raise MailboxError(f"cannot connect to {url.host}:{url.port}: {exc}") from None
    try:
        try:
            conn.login(url.user, password)
        except imaplib.IMAP4.error as exc:
            raise MailboxError(
                f"login as {url.user!r} refused: {_text([exc.args[0] if exc.args else ''])}"
            ) from None
        typ, data = conn.select(_quoted(url.folder), readonly=True)
        if typ != "OK":
            raise MailboxError(f"the folder {url.folder!r} cannot be opened: {_text(data)}")
        uidvalidity = conn.response("UIDVALIDITY")[1]
        if not uidvalidity or uidvalidity[0] is None:
            raise MailboxError(f"the server gave no UIDVALIDITY for {url.folder!r}")
        yield ImapFolder(conn, int(uidvalidity[0]))
    except (OSError, imaplib.IMAP4.error) as exc:
        raise MailboxError(f"the connection to {url.host}:{url.port} failed: {exc}") from None
    finally:
        try:
            conn.logout()
        except (OSError, imaplib.IMAP4.error):
            pass


def _quoted(folder: str) -> str:
    return '"' + folder.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _text(data: Sequence[object]) -> str:
    parts = [d.decode("utf-8", "replace") if isinstance(d, bytes) else str(d) for d in data if d is not None]
    return " ".join(" ".join(parts).split())[:300]
