"""store.review_pages: the review page's reads (the queue, an invoice, its history, the version a
reviewer saw, a stored document) and its login lockouts on the record. A person's correction of
fields is store.corrections.

Queries: sql/queries/review_ui.sql.
"""

from __future__ import annotations

from uuid import UUID

from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.engine.review_page_records import (
    HistoryEntry,
    QueueCount,
    QueueFilter,
    QueuePage,
    QueueRow,
    ReviewInvoice,
)
from invoice_pipeline.engine.store.database import Database, as_uuid

PAGES = QueryFile("review_ui")


class ReviewPages:
    """The review page's reads (queries: review_ui.sql)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- reads for the page ------------------------------------------------------------------------

    def review_queue_page(self, flt: QueueFilter, *, limit: int, offset: int) -> QueuePage:
        params = flt.params()
        with self.db.pool.connection() as conn:
            rows = self.db.fetch_all(
                conn, QueueRow, PAGES["review_page_queue"], params | {"limit": limit, "offset": offset}
            )
            found = conn.execute(PAGES["review_page_queue_count"], params).fetchone()
        return QueuePage(rows, int(found[0]) if found else 0, offset, limit)

    def review_reason_counts(self, flt: QueueFilter) -> list[QueueCount]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(conn, QueueCount, PAGES["review_page_reason_counts"], flt.params())

    def review_org_counts(self, orgs: tuple[str, ...] | None) -> list[QueueCount]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(
                conn,
                QueueCount,
                PAGES["review_page_org_counts"],
                {"orgs": list(orgs) if orgs is not None else None},
            )

    def review_invoice(self, invoice_id: UUID | str) -> ReviewInvoice | None:
        with self.db.pool.connection() as conn:
            return self.db.fetch_one(
                conn, ReviewInvoice, PAGES["review_page_invoice"], {"invoice_id": as_uuid(invoice_id)}
            )

    def review_page_history(self, invoice_id: UUID | str) -> list[HistoryEntry]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(
                conn, HistoryEntry, PAGES["review_page_history"], {"invoice_id": as_uuid(invoice_id)}
            )

    def review_version(self, invoice_id: UUID | str) -> str | None:
        """What a reviewer saw, as one string: it changes with the status, the duplicate decision,
        the reasons, the fields, and every review action."""
        value = self.db.scalar(PAGES["review_page_version"], {"invoice_id": as_uuid(invoice_id)})
        return None if value is None else str(value)

    def record_login_lockout(self, reviewer: str, client_address: str, failures: int, seconds: float) -> None:
        """The review page locked `reviewer` after `failures` wrong passwords: on the record."""
        with self.db.pool.connection() as conn:
            conn.execute(
                PAGES["record_login_lockout"],
                {
                    "reviewer": reviewer,
                    "client_address": client_address,
                    "failures": failures,
                    "seconds": seconds,
                },
            )

    def document_content(self, sha256: str) -> bytes | None:
        value = self.db.scalar(PAGES["review_page_document"], {"sha256": sha256})
        return None if value is None else bytes(value)
