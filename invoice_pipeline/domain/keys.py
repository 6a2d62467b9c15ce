"""The business key that duplicate detection serialises on."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class BusinessKey:
    """(org, normalised vendor, normalised invoice number), scoped by document type.

    The document type is part of the key because a credit note that reuses the number of the
    invoice it corrects is a different document, never a duplicate of it.
    """

    org_id: str
    vendor: str
    invoice_number: str
    document_type: str = "invoice"

    @property
    def text(self) -> str:
        # A unit separator cannot appear in normalised parts, so distinct keys never join to one text.
        return "\x1f".join((self.org_id, self.vendor, self.invoice_number, self.document_type))

    @property
    def lock_id(self) -> int:
        """Signed 64-bit integer for pg_advisory_xact_lock.

        64 bits rather than hashtext's 32: at 32 bits two unrelated keys would share a lock
        with 50% probability after ~77k keys, and then contend for no reason.
        """
        return _lock_id(self.text)

    @property
    def number_lock_id(self) -> int:
        """The lock on (org, number, document type) alone, vendor left out.

        The same invoice can name its vendor two ways — by VAT id in its UBL copy, by name in its
        PDF copy — and then has two business keys. Taking this lock too makes such copies decide
        one at a time; invoices with different numbers still never contend.
        """
        return _lock_id("\x1f".join((self.org_id, self.invoice_number, self.document_type)))

    @property
    def lock_ids(self) -> tuple[int, ...]:
        """Both locks, in one global order, so two deciders can never wait on each other in a cycle."""
        return tuple(sorted({self.lock_id, self.number_lock_id}))


def _lock_id(text: str) -> int:
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)
