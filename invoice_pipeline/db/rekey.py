"""Data migration: recompute the duplicate-detection keys of invoices decided by older code.

Keys are computed in Python (`domain/normalize.py`, `domain/keys.py`), so a SQL migration that
changes how they are made cannot fill them in itself. The migrator calls this right after that
migration, in the same transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import psycopg

from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.matching import MatchCandidate

REKEY = QueryFile("rekey")

log = logging.getLogger(__name__)


def rekey_decided_invoices(conn: psycopg.Connection[Any]) -> int:
    """Business key, vendor key and blocking key for every decided invoice, oldest first.

    Run after 0003 (a VAT id with and without its country prefix made two keys) and after 0021
    (the amount bucket left the blocking key, issue 58: a re-priced re-send must meet its
    original's stored key). Two old originals that the new keys call one exact duplicate
    cannot both keep the unique key.
    The later one keeps no blocking key, so it is never offered as a candidate, and is logged
    for a person; the earlier one stays the original every new copy is matched against.
    """
    rekeyed = 0
    for invoice_id, candidate in _decided(conn):
        params = {"invoice_id": invoice_id, **candidate.stored_keys}
        try:
            with conn.transaction():
                conn.execute(REKEY["rekey_invoice"], params)
            rekeyed += 1
        except psycopg.errors.UniqueViolation:
            log.warning(
                "invoice %s: an earlier original has the same new key; left without a blocking key",
                invoice_id,
            )
    return rekeyed


def set_number_keys(conn: psycopg.Connection[Any]) -> int:
    """The number key (sql/0007) of every invoice decided before it existed.

    Without it an old original would never be found as the number twin of a new copy that
    has no blocking key (a scan without currency of an invoice paid last year).
    """
    filled = 0
    for invoice_id, candidate in _decided(conn):
        conn.execute(REKEY["set_number_key"], {"invoice_id": invoice_id, "number_key": candidate.number.id})
        filled += 1
    return filled


def _decided(conn: psycopg.Connection[Any]) -> Iterator[tuple[UUID, MatchCandidate]]:
    """Every decided invoice whose fields form a key, oldest first, as the matcher sees it."""
    for invoice_id, org_id, fields in conn.execute(REKEY["decided_invoices_to_rekey"]).fetchall():
        try:
            yield (
                invoice_id,
                MatchCandidate.from_fields(str(invoice_id), org_id, InvoiceFields.from_json(fields)),
            )
        except ValueError:
            continue
