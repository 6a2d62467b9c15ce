"""An HTTP webhook to an ERP: one JSON POST per posting (docs/exports.md).

Each request carries an `Idempotency-Key` that is the export row's id: one per posting and
target, the same on every redelivery (a retry, a second worker after a crash, a requeue), so a
receiver that dedupes by it accepts each posting once. The body is signed with HMAC-SHA256
under a secret read from a file at delivery time (`X-Invoice-Pipeline-Signature: sha256=<hex>`).
TLS is verified unless the host is loopback; plain http is refused for any other host.

2xx: delivered. 408, 429, 5xx, a timeout or a cut connection: retried with backoff. Any other
answer: dead-lettered at once, with the status and the body kept.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import json
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from invoice_pipeline.engine.export_records import BatchItem, Delivery

SIGNATURE_HEADER = "X-Invoice-Pipeline-Signature"
RETRIED_STATUSES = frozenset({408, 429})
ANSWER_LIMIT = 2000


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str) -> str:
    """The URL as given, or ValueError: http(s) with a host; plain http only to loopback."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"a webhook URL is http(s)://HOST[:PORT]/PATH, not {url!r}")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise ValueError(f"plain http is allowed only to a loopback host; use https for {parts.hostname}")
    return url


@dataclass(frozen=True)
class WebhookSettings:
    url: str
    secret_file: Path
    timeout_s: float

    @classmethod
    def of(cls, settings: dict[str, Any]) -> WebhookSettings:
        return cls(
            check_url(settings["url"]), Path(settings["secret_file"]), float(settings.get("timeout_s", 10))
        )


def idempotency_key(item: BatchItem) -> str:
    """One per posting and target, stable across redeliveries: the export row's id."""
    return str(item.export_id)


def payload(item: BatchItem) -> dict[str, Any]:
    return {
        "posting_id": str(item.posting_id),
        "invoice_id": str(item.invoice_id),
        "vendor": {
            "id": item.vendor_id,
            "name": item.vendor_name or None,
            "vat_id": item.registered_vat_id or item.printed_seller_vat_id,
            "identifiers": [
                {"kind": kind, "value": value}
                for kind, _, value in (entry.partition(":") for entry in item.vendor_identifiers)
            ],
        },
        "invoice_number": item.invoice_number,
        "document_type": item.document_type,
        "issue_date": item.issue_date.isoformat() if item.issue_date else None,
        "due_date": item.due_date.isoformat() if item.due_date else None,
        "posted_at": item.posted_at.isoformat(),
        "amount": str(item.amount),
        "currency": item.currency,
        "iban": item.iban,
        "payment_means": item.payment_means,
        "corrects_invoice_id": str(item.corrects_invoice_id) if item.corrects_invoice_id else None,
        "correction": item.correction_choice,
        "document_sha256": item.document_sha256,
    }


def signature(secret: bytes, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def read_secret(path: Path) -> bytes:
    secret = path.read_bytes().strip()
    if not secret:
        raise ValueError(f"the webhook secret file {path} is empty")
    return secret


def tls_context(host: str) -> ssl.SSLContext:
    """The system's CA store and the host name checked; for a loopback host (a local proxy, the
    tests' receiver) the certificate is not verified."""
    context = ssl.create_default_context()
    if is_loopback(host):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class Webhook:
    """Sends a batch's postings one request each, on one connection when the receiver keeps it."""

    def __init__(self, settings: WebhookSettings) -> None:
        self.settings = settings
        parts = urlsplit(settings.url)
        assert parts.hostname is not None
        self.host = parts.hostname
        self.port = parts.port
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.https = parts.scheme == "https"
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            timeout = self.settings.timeout_s
            if self.https:
                self._conn = http.client.HTTPSConnection(
                    self.host, self.port, timeout=timeout, context=tls_context(self.host)
                )
            else:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def send(self, item: BatchItem, secret: bytes) -> Delivery:
        body = json.dumps(payload(item), sort_keys=True).encode()
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": idempotency_key(item),
            SIGNATURE_HEADER: signature(secret, body),
        }
        try:
            conn = self._connection()
            conn.request("POST", self.path, body=body, headers=headers)
            response = conn.getresponse()
            answer = response.read(ANSWER_LIMIT * 2).decode("utf-8", errors="replace")[:ANSWER_LIMIT]
            if response.will_close:
                self.close()
        except (OSError, http.client.HTTPException) as exc:
            # A timeout, a refused or cut connection: the posting may or may not have arrived;
            # the key makes the retry safe.
            self.close()
            return Delivery(item.export_id, "retry", f"no answer: {type(exc).__name__}: {exc}")
        status = response.status
        text = f"HTTP {status}: {answer}"
        if 200 <= status < 300:
            return Delivery(item.export_id, "delivered", text)
        if status in RETRIED_STATUSES or status >= 500:
            return Delivery(item.export_id, "retry", text)
        return Delivery(item.export_id, "final", text)
