"""The keys duplicate detection serialises on and searches by.

`BusinessKey` names one invoice exactly: (org, normalised seller, normalised number, type).

`BlockingKey` is coarse, and it is derived from the match rule (`domain/matching.py`). Every
pair the matcher can accept through its gate, exact or suspected, shares:

* the same org and the same document type;
* the same currency;
* the same number skeleton (`normalize.number_skeleton`: the digits, OCR confusions read back).

The blocking key is exactly those parts. No amount and no date is in it: one seller's number is
one invoice whatever the totals or the issue dates say (issue 58), so a re-priced re-send or
one of another year must meet its original, and is held for a person beside it.

`NumberKey` is what an invoice shares with every copy of it whatever the page left out:
(org, document type, normalised number). When the blocking key cannot be formed (a number
without digits, no currency, a scan that read less than the e-invoice did), the matcher still
compares the invoice with its number twins (`matching.twins`), so every decision also locks its
number key and searches by it. A duplicate check that silently compared with nothing is how a
copy gets paid twice.

INVARIANT: if `find_match(a, [b])` can accept the pair, then
`set(decision_lock_ids(a)) & set(decision_lock_ids(b))` is not empty, and `b` is found by `a`'s
candidate search (its blocking key in `search_ids(a)`, or the same number key). Proof: a pair
accepted through the gate has every part of the blocking key equal, so both lock and search the
one key id. A pair accepted as number twins has the same number key, which both lock and the
search reads. Different keys never contend (up to a 64-bit hash collision). The property test
in `invoice_pipeline_tests/domain/test_keys.py` checks this on generated pairs (re-priced, other
years, other formats), and that weakening the keys breaks it. Change the gate, change this key.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from decimal import Decimal

# Totals this close are the same amount ("duplicates must agree within 0.01", issue 58): a
# rounding difference of a cent at most. Further apart, the same seller's number is held.
AMOUNT_TOLERANCE = Decimal("0.01")


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
    def hash(self) -> int:
        """Signed 64-bit hash of the key, stored beside it."""
        return hash64(self.text)


@dataclass(frozen=True)
class BlockingKey:
    """What every pair the matcher accepts shares (see the module's invariant)."""

    org_id: str
    document_type: str
    currency: str
    number_skeleton: str

    @property
    def id(self) -> int:
        """Signed 64-bit id: the advisory lock and the indexed `invoices.block_key`.

        64 bits rather than hashtext's 32: at 32 bits two unrelated keys would share a lock
        with 50% probability after ~77k keys, and then contend for no reason.
        """
        # "block2": the amount bucket is gone (sql/0021), so no id of the old keys is reused.
        return hash64(
            "\x1f".join(("block2", self.org_id, self.document_type, self.currency, self.number_skeleton))
        )


@dataclass(frozen=True)
class NumberKey:
    """(org, document type, normalised invoice number): shared by an invoice and all its exact-number copies."""

    org_id: str
    document_type: str
    invoice_number: str

    @property
    def id(self) -> int:
        """Signed 64-bit id: an advisory lock of every decision and the indexed `invoices.number_key`."""
        return hash64("\x1f".join(("number", self.org_id, self.document_type, self.invoice_number)))


def lock_ids(key: BlockingKey | None) -> tuple[int, ...]:
    """The advisory locks a duplicate decision takes, in the one global order (ascending).

    The key's own id. No key (no digits in the number): the gate can pair the invoice with
    nothing, so nothing needs serialising here (its number key is locked beside it).
    """
    if key is None:
        return ()
    return (key.id,)


def search_ids(key: BlockingKey | None) -> tuple[int, ...]:
    """The stored blocking keys of every original the matcher could accept against `key`."""
    if key is None:
        return ()
    return (key.id,)


def decision_lock_ids(block: BlockingKey | None, number: NumberKey) -> tuple[int, ...]:
    """Every advisory lock a duplicate decision takes, ascending: its blocking key's and its number key's."""
    return tuple(sorted({*lock_ids(block), number.id}))


def hash64(text: str) -> int:
    """A signed 64-bit id of a key's text (blake2b): an advisory lock id, an indexed key column;
    64 bits, not hashtext's 32, so unrelated keys practically never share one."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)
