"""The webhook's TLS rule (issue 56): verified against the system's CA store with the host name
checked, except to a loopback host; a real HTTPS delivery to a loopback receiver with a
self-signed certificate (made with openssl)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

from invoice_pipeline.engine.exports.delivery import deliver
from invoice_pipeline.engine.exports.webhook import tls_context
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples.receiver import WebhookReceiver
from invoice_pipeline_tests.engine.exports.helpers import SECRET, post_invoices, statuses, webhook_target
from invoice_pipeline_tests.tools import needs_tool

OPENSSL = shutil.which("openssl")


def test_tls_is_verified_with_the_host_name_except_to_a_loopback_host() -> None:
    remote = tls_context("erp.example.com")
    assert remote.verify_mode == ssl.CERT_REQUIRED and remote.check_hostname
    for host in ("127.0.0.1", "::1", "localhost"):
        local = tls_context(host)
        assert local.verify_mode == ssl.CERT_NONE and not local.check_hostname


@needs_tool("openssl", None if OPENSSL else "openssl is not installed")
def test_a_posting_is_delivered_over_https_to_a_loopback_receiver(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [str(OPENSSL), "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    with WebhookReceiver(SECRET, tls=(cert, key)) as receiver:
        assert receiver.url.startswith("https://127.0.0.1:")
        target = webhook_target(store, "acme", receiver.url, tmp_path / "secret")
        post_invoices(store, "acme", 2)
        report = deliver(store, "w")
    assert report.delivered == 2 and statuses(database_url, target) == {"delivered": 2}
    assert all(r.signature_ok for r in receiver.requests) and len(receiver.booked()) == 2
