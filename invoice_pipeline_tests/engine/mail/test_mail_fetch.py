"""`mail fetch` against a real Dovecot: each attachment one invoice, each message taken once,
a message without a usable attachment recorded once with why, one document for the same bytes
in two mails, a UIDVALIDITY change read again without doubles."""

from __future__ import annotations

import io
import threading
import zipfile
from pathlib import Path

import psycopg
import pytest

from invoice_pipeline.documents.detect import sniff
from invoice_pipeline.documents.errors import BadDocument
from invoice_pipeline.engine.mail import MailboxError, MailboxUrl, MailPass, fetch_mail, open_folder
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.engine.mail.mailbox import (
    HOLD_CHECKPOINT,
    NEEDS_DOVECOT,
    attachment,
    checkpoints,
    holding,
    invoices_by_sha,
    message,
    sha,
)
from pipeline_support.dovecot import Dovecot, running_dovecot
from pipeline_support.helpers import blocks_someone, wait_for

pytestmark = NEEDS_DOVECOT
ORG = "acme"


def fetch(store: InvoiceStore, imap: Dovecot) -> MailPass:
    return fetch_mail(store, ORG, MailboxUrl.parse(imap.url()), imap.password)


def test_each_attachment_becomes_one_invoice_and_a_second_fetch_takes_nothing(
    store: InvoiceStore,
    imap: Dovecot,
    database_url: str,
) -> None:
    a, b, c = attachment(1), attachment(2), ("einvoice.xml", b"<Invoice>3</Invoice>")
    imap.deliver(message("two invoices", a, b))
    imap.deliver(message("one e-invoice", c))

    first = fetch(store, imap)

    assert [len(t.stored) for t in first.taken] == [2, 1]
    assert first.invoices_created == 3
    assert invoices_by_sha(database_url, ORG) == {sha(a[1]): 1, sha(b[1]): 1, sha(c[1]): 1}
    assert checkpoints(database_url, ORG) == [(1, "ingested", 2), (2, "ingested", 1)]
    stored = store.documents.load_document(first.taken[0].stored[1].invoice_id)
    assert stored is not None and stored.content == b[1] and stored.filename == "invoice-2.pdf"

    second = fetch(store, imap)

    assert second.taken == [] and second.on_server == 2
    assert invoices_by_sha(database_url, ORG) == {sha(a[1]): 1, sha(b[1]): 1, sha(c[1]): 1}
    assert len(checkpoints(database_url, ORG)) == 2


def test_a_message_without_a_usable_attachment_is_recorded_once_with_why(
    store: InvoiceStore,
    imap: Dovecot,
    database_url: str,
) -> None:
    imap.deliver(message("just text"))
    imap.deliver(message("signed only", ("smime.p7s", b"signature bytes")))
    imap.deliver(message("empty file", ("empty.pdf", b"")))

    first = fetch(store, imap)
    again = fetch(store, imap)

    reasons = [t.reason for t in first.taken]
    assert [t.outcome for t in first.taken] == ["skipped"] * 3
    assert reasons[0] == "no attachment that could be an invoice: only the message text"
    assert "smime.p7s (a signature)" in reasons[1]
    assert "empty.pdf (empty)" in reasons[2]
    assert again.taken == []
    assert checkpoints(database_url, ORG) == [(1, "skipped", 0), (2, "skipped", 0), (3, "skipped", 0)]
    assert invoices_by_sha(database_url, ORG) == {}


def test_the_same_attachment_in_two_mails_is_one_document_and_one_invoice(
    store: InvoiceStore,
    imap: Dovecot,
    database_url: str,
) -> None:
    same = attachment(7)
    imap.deliver(message("the invoice", same))
    imap.deliver(message("Fwd: the invoice", same))

    done = fetch(store, imap)

    assert [s.created for t in done.taken for s in t.stored] == [True, False]
    assert done.taken[0].stored[0].invoice_id == done.taken[1].stored[0].invoice_id
    assert invoices_by_sha(database_url, ORG) == {sha(same[1]): 1}
    assert checkpoints(database_url, ORG) == [(1, "ingested", 1), (2, "ingested", 1)]
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM documents").fetchone() == (1,)


def test_a_zip_attachment_is_stored_as_it_came_and_never_unpacked(
    store: InvoiceStore,
    imap: Dovecot,
    database_url: str,
) -> None:
    """A ZIP is one document whose reading the pipeline refuses with a reason (unsupported_format):
    a person sees it; nothing ever expands the archive."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("bomb.txt", b"0" * 5_000_000)
    zipped = buffer.getvalue()
    imap.deliver(message("archive", ("invoices.zip", zipped)))

    done = fetch(store, imap)

    assert invoices_by_sha(database_url, ORG) == {sha(zipped): 1}
    stored = store.documents.load_document(done.taken[0].stored[0].invoice_id)
    assert stored is not None and stored.content == zipped
    with pytest.raises(BadDocument) as refused:
        sniff(stored.content)
    assert refused.value.code == "unsupported_format" and "ZIP" in str(refused.value)


def test_a_new_uidvalidity_reads_the_folder_again_and_stores_nothing_twice(
    store: InvoiceStore,
    imap: Dovecot,
    database_url: str,
) -> None:
    imap.deliver(message("one", attachment(1)))
    imap.deliver(message("none"))
    before = fetch(store, imap)
    changed = imap.doveadm(
        "mailbox", "update", "-u", imap.user, "--uid-validity", str(before.uidvalidity + 1000), "INBOX"
    )
    assert changed.returncode == 0, changed.stderr

    after = fetch(store, imap)

    assert after.uidvalidity == before.uidvalidity + 1000
    assert after.earlier_uidvalidities == [before.uidvalidity]
    assert len(after.taken) == 2 and after.invoices_created == 0
    assert invoices_by_sha(database_url, ORG) == {sha(attachment(1)[1]): 1}
    assert fetch(store, imap).taken == []


def test_a_wrong_password_takes_nothing_and_says_so_without_the_password(
    store: InvoiceStore,
    imap: Dovecot,
    database_url: str,
) -> None:
    imap.deliver(message("one", attachment(1)))
    with pytest.raises(MailboxError) as refused:
        fetch_mail(store, ORG, MailboxUrl.parse(imap.url()), "not-the-password")
    assert "login as 'mailuser' refused" in str(refused.value)
    assert "not-the-password" not in str(refused.value)
    assert checkpoints(database_url, ORG) == []


def test_a_folder_that_does_not_exist_is_one_line(
    store: InvoiceStore,
    imap: Dovecot,
) -> None:
    with pytest.raises(MailboxError, match="the folder 'Invoices' cannot be opened"):
        fetch_mail(store, ORG, MailboxUrl.parse(imap.url("Invoices")), imap.password)


def test_the_cli_reads_the_password_from_a_file_and_never_prints_it(
    imap: Dovecot,
    database_url: str,
    tmp_path: Path,
) -> None:
    from invoice_pipeline_tests.test_kill_process import cli
    from pipeline_support.helpers import cli_environment

    imap.deliver(message("one", attachment(1)))
    password_file = tmp_path / "password"
    password_file.write_text(imap.password + "\n")
    with cli_environment(tmp_path / "home", database_url) as env:
        args = (
            "mail",
            "fetch",
            "--org",
            ORG,
            "--imap-url",
            imap.url(),
            "--password-file",
            str(password_file),
        )
        done, again = cli(env, *args), cli(env, *args)
    assert done.returncode == 0, done.stderr
    assert "1 taken now, 1 new invoice(s)" in done.stdout
    assert "0 taken now, 0 new invoice(s)" in again.stdout
    assert imap.password not in done.stdout + done.stderr + again.stdout + again.stderr


def test_imaps_verifies_the_servers_certificate(
    store: InvoiceStore, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A self-signed server is refused; the same server, its certificate trusted (SSL_CERT_FILE),
    is read: verification is on, and it is what refused the first."""
    with running_dovecot(tls=True) as server:
        server.deliver(message("one", attachment(1)))
        url = MailboxUrl.parse(server.url())
        assert url.tls and server.url().startswith("imaps://")
        with pytest.raises(MailboxError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            fetch_mail(store, ORG, url, server.password)
        assert checkpoints(database_url, ORG) == []
        monkeypatch.setenv("SSL_CERT_FILE", str(server.certificate))
        done = fetch_mail(store, ORG, url, server.password)
    assert done.invoices_created == 1


def test_a_message_another_pass_is_taking_is_left_to_it(
    store: InvoiceStore,
    imap: Dovecot,
    database_url: str,
) -> None:
    """Two passes at once (the sensor and a person's fetch): the second to reach a message waits
    for the first's checkpoint, then leaves the message to it, writing nothing of it."""
    imap.deliver(message("one", attachment(1)))
    imap.deliver(message("two", attachment(2)))
    url = MailboxUrl.parse(imap.url())
    with open_folder(url, imap.password) as folder:
        uidvalidity = folder.uidvalidity
    other = holding(
        database_url, HOLD_CHECKPOINT, (ORG, url.identity, uidvalidity, 1)
    )  # the other pass's take
    result: list[MailPass] = []
    thread = threading.Thread(target=lambda: result.append(fetch(store, imap)))
    thread.start()
    wait_for(
        lambda: blocks_someone(database_url, other.info.backend_pid), timeout=120, what="the pass to wait"
    )
    other.commit()
    other.close()
    thread.join(120)

    (done,) = result
    assert done.taken_elsewhere == 1 and [t.key.uid for t in done.taken] == [2]
    assert invoices_by_sha(database_url, ORG) == {sha(attachment(2)[1]): 1}
