"""Search everywhere a database password could leak to: files, Dagster's storage, text outputs.

Dagster keeps job snapshots zlib-compressed in bytea columns, so a plain LIKE over text columns
misses exactly the place a resource's literal config would land; every bytea value is searched
raw and, when it is zlib or gzip data, decompressed.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterable
from pathlib import Path

import psycopg
from psycopg import sql


def _decompressed(data: bytes) -> bytes:
    for decompress in (zlib.decompress, gzip.decompress):
        try:
            return decompress(data)
        except (zlib.error, OSError, EOFError):
            continue
    return b""


def in_files(secret: str, root: Path, *, allowed: Iterable[Path] = ()) -> tuple[list[str], int]:
    """(files under root that contain the secret, how many files were read), `allowed` aside."""
    needle, allow = secret.encode(), {p.resolve() for p in allowed}
    hits, scanned = [], 0
    for path in root.rglob("*"):
        if not path.is_file() or path.is_symlink() or path.resolve() in allow:
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        scanned += 1
        if needle in data or needle in _decompressed(data):
            hits.append(str(path.relative_to(root)))
    return hits, scanned


def in_database(secret: str, url: str) -> tuple[list[str], int]:
    """(table.column places holding the secret, how many values were read) in every table."""
    needle = secret.encode()
    hits, scanned = [], 0
    with psycopg.connect(url) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = 'public' ORDER BY 1, 2"
        ).fetchall()
        for table, column, data_type in columns:
            query = (
                sql.SQL("SELECT {}::text FROM {}") if data_type != "bytea" else sql.SQL("SELECT {} FROM {}")
            )
            for (value,) in conn.execute(query.format(sql.Identifier(column), sql.Identifier(table))):
                if value is None:
                    continue
                scanned += 1
                data = bytes(value) if data_type == "bytea" else str(value).encode()
                if needle in data or (data_type == "bytea" and needle in _decompressed(data)):
                    hits.append(f"{table}.{column}")
    return sorted(set(hits)), scanned
