"""What the steps of one run pass each other across hosts (the celery scale-out).

Queries: sql/queries/step_outputs.sql.
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.engine.store.database import Database

STEP_OUTPUTS = QueryFile("step_outputs")


class StepOutputs:
    """What a run's steps pass each other across hosts (queries: step_outputs.sql)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def save_step_output(self, key: str, run_id: str, value: Any) -> None:
        with self.db.pool.connection() as conn:
            conn.execute(
                STEP_OUTPUTS["save_step_output"], {"key": key, "run_id": run_id, "value": Jsonb(value)}
            )

    def load_step_output(self, key: str) -> Any | None:
        """The stored JSON value, or None when no step stored one under `key`."""
        with self.db.pool.connection() as conn:
            row = conn.execute(STEP_OUTPUTS["load_step_output"], {"key": key}).fetchone()
        return None if row is None else row[0]

    def connected_from(self) -> str | None:
        """The address the database sees this process connect from (None over a local socket)."""
        with self.db.pool.connection() as conn:
            row = conn.execute(STEP_OUTPUTS["connected_from"]).fetchone()
        return row[0] if row else None
