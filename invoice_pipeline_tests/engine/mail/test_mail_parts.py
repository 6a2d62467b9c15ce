"""The mailbox URL (what is refused, the identity checkpoints are keyed by) and which parts of a
message are taken: pure, no server."""

from __future__ import annotations

from email.message import EmailMessage

import pytest

from invoice_pipeline.engine.mail import MailboxUrl, MailConfigError, read_password
from invoice_pipeline.engine.mail_message import read_message
from invoice_pipeline.engine.mail_records import MessageKey
from invoice_pipeline_tests.engine.mail.mailbox import attachment, message

KEY = MessageKey("acme", "imaps://u@h:993/INBOX", 1, 1)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("imap://ap@imap.example.com/INBOX", "only allowed to a loopback host"),
        ("imap://ap@127.0.0.1.example.com/INBOX", "only allowed to a loopback host"),
        ("imaps://ap:secret@imap.example.com/INBOX", "holds a password"),
        ("https://ap@imap.example.com/INBOX", "starts with imaps://"),
        ("imaps://imap.example.com/INBOX", "names no user"),
        ("imaps://ap@imap.example.com:99999/INBOX", "port"),
        ("imaps://ap@imap.example.com/INBOX?x=1", "no query"),
        ("imaps://ap@imap.example.com/Rechnungen%C3%BC", "printable ASCII"),
    ],
)
def test_a_url_that_cannot_be_used_safely_is_refused_with_why(url: str, why: str) -> None:
    with pytest.raises(MailConfigError, match=why):
        MailboxUrl.parse(url)


def test_the_identity_is_the_same_for_every_spelling_of_one_mailbox() -> None:
    spellings = [
        "imaps://ap%40acme.example@IMAP.Acme.Example/INBOX",
        "IMAPS://ap%40acme.example@imap.acme.example:993/INBOX",
        "imaps://ap%40acme.example@imap.acme.example:993",
    ]
    assert {MailboxUrl.parse(u).identity for u in spellings} == {
        "imaps://ap%40acme.example@imap.acme.example:993/INBOX"
    }
    assert MailboxUrl.parse("imap://u@[::1]/X").identity == "imap://u@[::1]:143/X"
    assert MailboxUrl.parse("imap://u@localhost:1143/X").port == 1143


def test_the_password_file_loses_its_final_line_break_only(tmp_path) -> None:  # type: ignore[no-untyped-def]
    file = tmp_path / "p"
    file.write_text(" pass word \n")
    assert read_password(file) == " pass word "
    file.write_text("\n")
    with pytest.raises(MailConfigError, match="is empty"):
        read_password(file)
    with pytest.raises(MailConfigError, match="cannot be read"):
        read_password(tmp_path / "missing")


def test_a_forwarded_messages_attachment_is_taken_and_an_embedded_logo_is_not() -> None:
    inner = EmailMessage()
    inner["Subject"] = "the invoice"
    inner.set_content("see attached")
    name, content = attachment(1)
    inner.add_attachment(content, maintype="application", subtype="pdf", filename=name)
    outer = EmailMessage()
    outer["Subject"] = "Fwd: the invoice"
    outer.set_content("forwarding")
    outer.add_alternative("<p>forwarding <img src='cid:logo'></p>", subtype="html")
    outer.get_payload()[1].add_related(
        b"\x89PNG\r\n\x1a\nlogo", maintype="image", subtype="png", cid="<logo>"
    )
    outer.add_attachment(inner)

    read = read_message(KEY, outer.as_bytes())

    assert [(a.filename, a.content) for a in read.attachments] == [(name, content)]
    assert read.outcome == "ingested"


def test_a_path_in_a_file_name_is_never_kept() -> None:
    read = read_message(KEY, message("x", ("../../etc/passwd.pdf", b"%PDF-1.4 x")))
    assert [a.filename for a in read.attachments] == ["passwd.pdf"]
