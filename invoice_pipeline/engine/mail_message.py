"""Reading one e-mail message: the headers a person recognises it by, and the parts to store.

Nothing here parses a document. Every part that could be an invoice is stored as it came (the
original bytes), exactly as a file dropped into the inbox is, and the pipeline's stages read it
with the same limits and sandbox (documents/limits.py, documents/sandbox.py). What is left out
is the message's own text (text/plain, text/html without a file name), images embedded in that
text (inline, with a Content-ID), signatures, keys, contact cards and calendar entries: those are
never invoices. A ZIP attachment is stored too, and never unpacked: the pipeline quarantines it
as `unsupported_format` with "unpack it and submit the invoice files individually", so a person
sees it and no archive is ever expanded (no zip bomb can cost anything). Parts of an attached
message (message/rfc822, a forwarded mail) are looked at like the message's own.
"""

from __future__ import annotations

from email import policy
from email.message import Message
from email.parser import BytesParser
from pathlib import PurePosixPath, PureWindowsPath

from invoice_pipeline.documents.limits import storable_text
from invoice_pipeline.engine.mail_records import Attachment, MessageKey, MessageRead

# Parts that are never an invoice, by content type, with what a person calls them.
NEVER_INVOICES = {
    "application/pkcs7-signature": "a signature",
    "application/x-pkcs7-signature": "a signature",
    "application/pgp-signature": "a signature",
    "application/pgp-keys": "a key",
    "application/pkcs7-mime": "an encrypted or signed S/MIME body, which cannot be read here",
    "message/delivery-status": "a delivery report",
    "message/disposition-notification": "a read receipt",
    "text/rfc822-headers": "a bounced message's headers",
    "text/vcard": "a contact card",
    "text/x-vcard": "a contact card",
    "text/calendar": "a calendar entry",
}
MESSAGE_TEXT = ("text/plain", "text/html")
HEADER_CHARS = 500
FILENAME_CHARS = 255


def read_message(key: MessageKey, raw: bytes) -> MessageRead:
    """The message's headers and the attachments to store; `reason` says why none when none."""
    message = BytesParser(policy=policy.default).parsebytes(raw)
    attachments: list[Attachment] = []
    ignored: list[str] = []
    for position, part in enumerate(message.walk()):
        if part.is_multipart():
            continue  # a container (multipart/*, an attached message): its parts come next
        why_not = _not_an_attachment(part)
        name = _filename(part)
        if why_not is None:
            content = part.get_payload(decode=True)
            if isinstance(content, bytes) and content:
                attachments.append(Attachment(position, name, part.get_content_type(), content))
                continue
            why_not = "empty"
        if why_not:  # "" is the message's own text, not worth naming
            ignored.append(f"{name or part.get_content_type()} ({why_not})")
    reason = ""
    if not attachments:
        reason = "no attachment that could be an invoice" + (
            f"; ignored: {', '.join(ignored)}" if ignored else ": only the message text"
        )
    return MessageRead(
        key,
        header(message, "Message-ID"),
        header(message, "From"),
        header(message, "Subject"),
        len(raw),
        tuple(attachments),
        reason,
    )


def headers_only(key: MessageKey, raw_headers: bytes, size: int, reason: str) -> MessageRead:
    """A message recorded without being downloaded (too large): its headers and why."""
    message = BytesParser(policy=policy.default).parsebytes(raw_headers, headersonly=True)
    return MessageRead(
        key,
        header(message, "Message-ID"),
        header(message, "From"),
        header(message, "Subject"),
        size,
        (),
        reason,
    )


def _not_an_attachment(part: Message) -> str | None:
    """None when the part is to be stored; else why not ("" for the message's own text)."""
    ctype = part.get_content_type()
    if ctype in NEVER_INVOICES:
        return NEVER_INVOICES[ctype]
    disposition = part.get_content_disposition()
    if disposition == "attachment":
        return None
    if ctype in MESSAGE_TEXT and not part.get_filename():
        return ""
    if ctype.startswith("image/") and part["Content-ID"] is not None:
        return "an image shown inside the message text"
    return None


def header(message: Message, name: str) -> str:
    """A header as storable text, cut to HEADER_CHARS; "" when absent or unreadable."""
    try:
        value = message.get(name)
    except (ValueError, IndexError, TypeError):  # a header the parser cannot make sense of
        return ""
    return _storable(str(value or ""), HEADER_CHARS)


def _filename(part: Message) -> str:
    """The part's file name without any folders in it (a name is only ever shown, never a path)."""
    try:
        name = part.get_filename() or ""
    except (ValueError, IndexError, TypeError):
        return ""
    name = PureWindowsPath(PurePosixPath(name).name).name
    return _storable(name, FILENAME_CHARS)


def _storable(value: str, limit: int) -> str:
    return storable_text(" ".join(value.split()))[:limit]


__all__ = ["NEVER_INVOICES", "headers_only", "read_message"]
