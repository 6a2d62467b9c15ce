"""Test-only helpers; the ones benchmarks and chaos scenarios share live in pipeline_support.helpers."""

from __future__ import annotations

import psycopg

# Temporary: invoice_pipeline_tests/review/ (another change in progress) still imports run_cli from
# here. Switch it to pipeline_support.helpers and delete this line.


def db_seconds_since(url: str, ts_sql: str, params: tuple[object, ...] = ()) -> float:
    """Seconds between a timestamp in the database and the database clock now."""
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT extract(epoch FROM clock_timestamp() - ({ts_sql}))", params).fetchone()  # noqa: S608
        assert row is not None
        return float(row[0])
