"""Prometheus metrics read from the database, so every host (a worker, the review page, a
sidecar running `invoice-pipeline metrics`) serves the same numbers.

A custom prometheus-client Collector: each scrape reads one `MetricsSnapshot` from the store
(maintained counters plus small live sets, never a scan of a table that grows with history; see
sql/0018_metrics.sql) and yields metric families; prometheus-client writes the exposition format.
A scrape whose database read fails raises, so the endpoint answers 500 and Prometheus records the
target down (`up == 0`) instead of stale zeros.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from invoice_pipeline.engine.records import MetricsSnapshot, MetricTotal
from invoice_pipeline.engine.store import InvoiceStore

PREFIX = "invoice_pipeline"
# Every status an invoice can have (sql/0003): each is reported, 0 when none has it, so an alert
# on one never sees "no data" where it should see 0.
STATUSES = ("pending", "processing", "processed", "failed", "quarantined", "needs_attention", "needs_review")
DUPLICATE_KINDS = ("original", "duplicate", "suspected")


class DatabaseCollector(Collector):
    def __init__(self, store: InvoiceStore) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        yield from families(self.store.metrics.metrics_snapshot())


def families(snapshot: MetricsSnapshot) -> Iterator[Metric]:
    """The metric families of one snapshot (pure: no database)."""
    by_metric: dict[str, list[MetricTotal]] = defaultdict(list)
    for total in snapshot.totals:
        by_metric[total.metric].append(total)
    yield from invoice_families(snapshot, by_metric)
    yield from lease_families(snapshot, by_metric)
    yield from ledger_families(by_metric)
    yield from stage_histogram(by_metric["stage_seconds"])
    yield from ocr_families(by_metric)


def counts(by_metric: dict[str, list[MetricTotal]], metric: str) -> dict[str, int]:
    return {t.label: t.n for t in by_metric[metric]}


def invoice_families(snapshot: MetricsSnapshot, by_metric: dict[str, list[MetricTotal]]) -> Iterator[Metric]:
    """Where the invoices are: by status, in flight, due, dead-lettered, held."""
    statuses = counts(by_metric, "invoices")
    invoices = GaugeMetricFamily(f"{PREFIX}_invoices", "Invoices by status.", labels=["status"])
    for status in sorted(set(STATUSES) | set(statuses)):
        invoices.add_metric([status], statuses.get(status, 0))
    yield invoices

    in_flight = GaugeMetricFamily(
        f"{PREFIX}_invoices_in_flight",
        "Unfinished invoices (pending, processing, failed) by status and the last stage started.",
        labels=["status", "stage"],
    )
    for flight in snapshot.in_flight:
        in_flight.add_metric([flight.status, flight.stage], flight.n)
    yield in_flight

    yield GaugeMetricFamily(
        f"{PREFIX}_due_invoices",
        "Invoices due for processing now (pending or failed).",
        value=snapshot.queue.due,
    )
    yield GaugeMetricFamily(
        f"{PREFIX}_oldest_due_age_seconds",
        "How long the oldest due invoice has been due (0 when none is).",
        value=snapshot.queue.oldest_due_seconds,
    )
    yield GaugeMetricFamily(
        f"{PREFIX}_dead_letters",
        "Invoices whose retries ran out (needs_attention): a person must redrive them.",
        value=statuses.get("needs_attention", 0),
    )

    held = GaugeMetricFamily(
        f"{PREFIX}_held_invoices",
        "Invoices held for a person (needs_review), by reason code.",
        labels=["reason"],
    )
    for reason in snapshot.held:
        held.add_metric([reason.reason], reason.n)
    yield held
    yield GaugeMetricFamily(
        f"{PREFIX}_oldest_held_age_seconds",
        "How long the longest-waiting held invoice has waited (0 when none is held).",
        value=snapshot.queue.oldest_held_seconds,
    )


def lease_families(snapshot: MetricsSnapshot, by_metric: dict[str, list[MetricTotal]]) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        f"{PREFIX}_leases_running",
        "Processing locks held (running jobs).",
        value=snapshot.queue.leases_running,
    )
    swept = CounterMetricFamily(f"{PREFIX}_leases_swept", "Leases swept after their heartbeat went stale.")
    swept.add_metric([], sum(t.n for t in by_metric["leases_swept"]))
    yield swept


def ledger_families(by_metric: dict[str, list[MetricTotal]]) -> Iterator[Metric]:
    """What was posted, and how duplicates were decided."""
    postings = CounterMetricFamily(
        f"{PREFIX}_postings", "Ledger postings, per currency.", labels=["currency"]
    )
    amounts = CounterMetricFamily(
        f"{PREFIX}_posted_amount",
        "Sum of the amounts posted to the ledger, per currency.",
        labels=["currency"],
    )
    for t in by_metric["postings"]:
        postings.add_metric([t.label], t.n)
        amounts.add_metric([t.label], float(t.amount))
    yield postings
    yield amounts

    kinds = counts(by_metric, "duplicate_decisions")
    duplicates = GaugeMetricFamily(
        f"{PREFIX}_duplicate_decisions",
        "Invoices by duplicate decision: original, duplicate (exact) or suspected (held).",
        labels=["kind"],
    )
    for kind in sorted(set(DUPLICATE_KINDS) | set(kinds)):
        duplicates.add_metric([kind], kinds.get(kind, 0))
    yield duplicates


def ocr_families(by_metric: dict[str, list[MetricTotal]]) -> Iterator[Metric]:
    ocr = by_metric["ocr"]
    ocr_documents = CounterMetricFamily(f"{PREFIX}_ocr_documents", "Documents read by OCR.")
    ocr_documents.add_metric([], sum(t.n for t in ocr))
    yield ocr_documents
    ocr_pages = CounterMetricFamily(f"{PREFIX}_ocr_pages", "Pages read by OCR.")
    ocr_pages.add_metric([], float(sum(t.amount for t in ocr)))
    yield ocr_pages
    ocr_seconds = CounterMetricFamily(f"{PREFIX}_ocr_seconds", "Seconds of OCR, summed over the pages read.")
    ocr_seconds.add_metric([], float(sum(t.amount for t in by_metric["ocr_seconds"])))
    yield ocr_seconds


def stage_histogram(rows: list[MetricTotal]) -> Iterator[Metric]:
    """Per-bucket counts (sql/0018's stage_seconds_bucket) made cumulative, per stage."""
    histogram = HistogramMetricFamily(
        f"{PREFIX}_stage_duration_seconds",
        "Per invoice: from a stage's start to its saved result.",
        labels=["stage"],
    )
    by_stage: dict[str, list[MetricTotal]] = defaultdict(list)
    for row in rows:
        by_stage[row.label].append(row)
    for stage, buckets in sorted(by_stage.items()):
        cumulative = 0
        points: list[tuple[str, float]] = []
        for row in sorted(buckets, key=lambda r: r.le):
            cumulative += row.n
            points.append(("+Inf" if math.isinf(row.le) else repr(row.le), cumulative))
        if points[-1][0] != "+Inf":
            points.append(("+Inf", cumulative))
        histogram.add_metric([stage], points, sum_value=float(sum(r.amount for r in buckets)))
    yield histogram


def registry_for(store: InvoiceStore) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(store))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The Prometheus text format of one scrape (prometheus-client writes it)."""
    return generate_latest(registry)
