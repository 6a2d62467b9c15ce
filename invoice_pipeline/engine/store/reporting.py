"""Reading for people: status and counts, one invoice's overview, the report assets' frames and
the invariant checks. Read-only.

Queries: sql/queries/reporting.sql.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.engine.records import (
    AttentionItem,
    CurrencyTotal,
    InvoiceOutcome,
    InvoiceOverview,
    StatusSummary,
)
from invoice_pipeline.engine.store.database import Database, as_uuid

if TYPE_CHECKING:  # pandas is imported by the reports that use it, not by every command
    import pandas as pd

REPORTING = QueryFile("reporting")


@dataclass(frozen=True)
class OrgCount:
    """An organisation's invoices: how many, and how many wait for a person."""

    org_id: str
    invoices: int
    held: int


class Reporting:
    """Read-only reports (queries: reporting.sql)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def totals_by_currency(self, invoice_ids: Sequence[UUID]) -> list[CurrencyTotal]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(
                conn, CurrencyTotal, REPORTING["totals_by_currency"], {"invoice_ids": list(invoice_ids)}
            )

    def status_counts_of(self, invoice_ids: list[UUID]) -> dict[str, int]:
        with self.db.pool.connection() as conn:
            rows = conn.execute(REPORTING["status_counts_of"], {"invoice_ids": invoice_ids}).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def status_summary(self) -> StatusSummary:
        with self.db.pool.connection() as conn:
            by_status: dict[str, int] = dict(conn.execute(REPORTING["count_by_status"]).fetchall())
            by_stage: dict[str, int] = dict(conn.execute(REPORTING["count_by_stage"]).fetchall())
            locks = conn.execute(REPORTING["lock_summary"]).fetchone()
            dupes = conn.execute(REPORTING["duplicate_summary"]).fetchone()
            attention = self.db.fetch_all(conn, AttentionItem, REPORTING["attention_list"], {})
        assert locks is not None and dupes is not None
        return StatusSummary(
            by_status,
            by_stage,
            locks[0],
            locks[1],
            locks[2],
            dupes[0],
            dupes[1],
            dupes[2],
            dupes[3],
            attention,
        )

    def orgs(self) -> list[OrgCount]:
        """Every org that has invoices, the one ingested into last first."""
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(conn, OrgCount, REPORTING["count_by_org"], {})

    def invoice_overview(self, invoice_id: UUID | str) -> InvoiceOverview | None:
        with self.db.pool.connection() as conn:
            return self.db.fetch_one(
                conn, InvoiceOverview, REPORTING["invoice_overview"], {"invoice_id": as_uuid(invoice_id)}
            )

    def frame(self, name: str, params: dict[str, Any] | None = None) -> pd.DataFrame:
        """A report query as a DataFrame, for the pandas report assets."""
        import pandas as pd

        with self.db.pool.connection() as conn, conn.cursor() as cur:
            cur.execute(REPORTING[name], params or {})
            columns = [c.name for c in cur.description or []]
            return pd.DataFrame(cur.fetchall(), columns=columns)

    def offending_ids(self, check: str, params: dict[str, Any] | None = None) -> list[str]:
        """Ids that break an invariant (see the check_* queries); empty when it holds."""
        with self.db.pool.connection() as conn:
            return [r[0] for r in conn.execute(REPORTING[check], params or {}).fetchall()]

    def outcomes_of_org(self, org_id: str) -> list[InvoiceOutcome]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(conn, InvoiceOutcome, REPORTING["demo_outcomes"], {"org_id": org_id})
