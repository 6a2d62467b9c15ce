"""Data migration for sql/0022: the names stored in `org_identities` and `vendor_identifiers`
were normalised by `norm_name` (case, accents, punctuation); identity now compares names by
`name_skeleton` (also look-alike letters, legal forms, spacing), so every stored name's `value`
is recomputed from what was given (`shown`). Runs in the migration's transaction.

Two names of one owner that now share a skeleton ("Acme GmbH" and "ACME") are one name: the
first one taught stays, the later row goes (its key would collide, and it says nothing the first
does not). Nothing else is touched: a VAT id stored before check digits were checked stays as
it is (docs/vendors.md).
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.domain.identity import name_skeleton

SKELETONS = QueryFile("name_skeletons")

log = logging.getLogger(__name__)


def reskeleton_names(conn: psycopg.Connection[Any]) -> int:
    """Recompute every stored name's value; returns how many rows changed (moved or merged)."""
    org_rows = [
        ((org_id,), value, shown) for org_id, value, shown in conn.execute(SKELETONS["org_names"]).fetchall()
    ]
    vendor_rows = [
        ((org_id, vendor_id), value, shown)
        for org_id, vendor_id, value, shown in conn.execute(SKELETONS["vendor_names"]).fetchall()
    ]
    changed = _recompute(conn, org_rows, ("org_id",), "org") + _recompute(
        conn, vendor_rows, ("org_id", "vendor_id"), "vendor"
    )
    if changed:
        log.info("sql/0022: %d stored name(s) recomputed as identity skeletons", changed)
    return changed


def _recompute(
    conn: psycopg.Connection[Any],
    rows: list[tuple[tuple[Any, ...], str, str]],
    owner_columns: tuple[str, ...],
    table: str,
) -> int:
    """Rows come oldest first: the first name of an owner with a skeleton is kept, the later
    ones with the same skeleton are dropped before anything moves, so no move collides."""
    kept: set[tuple[tuple[Any, ...], str]] = set()
    moves, drops = [], []
    for owner, value, shown in rows:
        params = dict(zip(owner_columns, owner, strict=True)) | {
            "value": value,
            "skeleton": _skeleton(shown, value),
        }
        if (owner, params["skeleton"]) in kept:
            drops.append(params)
        else:
            kept.add((owner, params["skeleton"]))
            if params["skeleton"] != value:
                moves.append(params)
    for params in drops:
        conn.execute(SKELETONS[f"drop_{table}_name"], params)
    for params in moves:
        if conn.execute(SKELETONS[f"move_{table}_name"], params).fetchone() is None:
            # Another kept row still holds this value under its old form (it moves on later):
            # cannot happen for names norm_name and name_skeleton both fold, kept as a guard.
            conn.execute(SKELETONS[f"drop_{table}_name"], params)
    return len(moves) + len(drops)


def _skeleton(shown: str, value: str) -> str:
    # A name that folds to nothing (punctuation only) keeps its old value: the column refuses ''.
    return name_skeleton(shown) or value
