"""The Prometheus scrape's reads: maintained counters and the small live sets. Folds the
counters' committed deltas first (the only write), then reads.

Queries: sql/queries/metrics.sql.
"""

from __future__ import annotations

from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.engine.records import (
    HeldCount,
    InFlightCount,
    MetricsSnapshot,
    MetricTotal,
    QueueGauges,
)
from invoice_pipeline.engine.store.database import Database

METRICS = QueryFile("metrics")


class Metrics:
    """The Prometheus scrape's reads (queries: metrics.sql)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def fold_metric_counts(self) -> int:
        """Fold the committed counter deltas; 0 when another scrape is folding them."""
        with self.db.transaction() as conn:
            row = conn.execute(METRICS["fold_metric_counts"]).fetchone()
        return int(row[0]) if row else 0

    def metrics_snapshot(self) -> MetricsSnapshot:
        self.fold_metric_counts()
        with self.db.pool.connection() as conn:
            totals = self.db.fetch_all(conn, MetricTotal, METRICS["metric_totals"], {})
            in_flight = self.db.fetch_all(conn, InFlightCount, METRICS["in_flight_by_stage"], {})
            held = self.db.fetch_all(conn, HeldCount, METRICS["held_by_reason"], {})
            queue = self.db.fetch_one(conn, QueueGauges, METRICS["queue_gauges"], {})
        assert queue is not None  # one row of scalar subqueries, always
        return MetricsSnapshot(totals, in_flight, held, queue)
