"""The records mail intake reads and writes (engine/mail.py, engine/store/mail.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal
from uuid import UUID

MessageOutcome = Literal["ingested", "skipped"]


@dataclass(frozen=True)
class MessageKey:
    """Which message of which mailbox: the checkpoint's key. `mailbox` is the normalised URL."""

    org_id: str
    mailbox: str
    uidvalidity: int
    uid: int


@dataclass(frozen=True)
class Attachment:
    """One MIME part taken as a document: its position among the message's parts, its bytes."""

    position: int
    filename: str
    content_type: str
    content: bytes


@dataclass(frozen=True)
class MessageRead:
    """What a pass read of one message: the headers a person recognises it by, the attachments
    to store, and why nothing is stored when `attachments` is empty."""

    key: MessageKey
    message_id: str
    sender: str
    subject: str
    size_bytes: int
    attachments: tuple[Attachment, ...]
    reason: str = ""

    @property
    def outcome(self) -> MessageOutcome:
        return "ingested" if self.attachments else "skipped"


@dataclass(frozen=True)
class StoredAttachment:
    filename: str
    invoice_id: UUID
    sha256: str
    created: bool  # False: the same bytes were already an invoice of this org


@dataclass(frozen=True)
class MessageTaken:
    """A message taken (checkpoint committed), with what became of its attachments."""

    key: MessageKey
    outcome: MessageOutcome
    reason: str
    stored: tuple[StoredAttachment, ...]


@dataclass(frozen=True)
class Mailbox:
    """A configured mailbox: the URL (never a password) and the file the password is read from."""

    org_id: str
    url: str
    password_file: str
    added_by: str
    added_at: datetime
    last_polled_at: datetime | None
    last_error: str | None
    messages_taken: int


@dataclass(frozen=True)
class TakenMessageRow:
    """A checkpoint row as `mail messages` lists it."""

    mailbox: str
    uidvalidity: int
    uid: int
    message_id: str
    sender: str
    subject: str
    size_bytes: int
    outcome: MessageOutcome
    reason: str
    taken_at: datetime
    invoice_ids: list[UUID]
