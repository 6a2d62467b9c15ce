"""InvoiceStore: the one component that owns the connection pool and every database call.

One class, composed of parts by concern. Each part reads its own file in sql/queries/:

    base.py         the pool, transactions, the fence, contention retries, chunk writes   fence.sql
    claims.py       locks and leases: acquire, heartbeat, complete, fail; claiming due work claims.sql
    documents.py    documents and the stages' results: text, fields, verdicts, postings   documents.sql
    dedupe.py       duplicate decisions under the blocking keys' advisory locks           dedupe.sql
    review.py       a person's actions and the review policies                            review.sql
    review_pages.py the review page's reads and the correction of fields                   review_ui.sql
    maintenance.py  the sweep: stale locks, orphans, abandoned and lost requests          maintenance.sql
    reporting.py    read-only: status, overviews, report frames, invariant checks         reporting.sql
    metrics.py      the Prometheus scrape: maintained counters, small live sets           metrics.sql
    layouts.py      vendor layouts learnt from decisions, per organisation                layouts.sql
    vendors.py      the org's own identity and its vendor registry                         vendors.sql
    step_outputs.py what a run's steps pass each other across hosts (celery)                step_outputs.sql
"""

from invoice_pipeline.engine.store.base import (
    StoreBase,
    as_uuid,
    dumps,
    is_contention,
    is_systemic,
    json_default,
)
from invoice_pipeline.engine.store.claims import ClaimsStore, RequestedBy, default_owner
from invoice_pipeline.engine.store.dedupe import DedupeStore, MatchFunction
from invoice_pipeline.engine.store.documents import DocumentsStore
from invoice_pipeline.engine.store.layouts import LayoutRow, LayoutsStore
from invoice_pipeline.engine.store.maintenance import MaintenanceStore
from invoice_pipeline.engine.store.metrics import MetricsStore
from invoice_pipeline.engine.store.reporting import ReportingStore
from invoice_pipeline.engine.store.review import ReviewStore
from invoice_pipeline.engine.store.review_pages import ReviewPageStore
from invoice_pipeline.engine.store.step_outputs import StepOutputsStore
from invoice_pipeline.engine.store.vendors import VendorImportResult, VendorImportRow, VendorsStore


class InvoiceStore(
    ReviewPageStore,
    ReviewStore,
    MaintenanceStore,
    ClaimsStore,
    DocumentsStore,
    DedupeStore,
    ReportingStore,
    MetricsStore,
    LayoutsStore,
    StepOutputsStore,
):
    """Durable locks, leases, fencing, dedupe, review and reports on PostgreSQL (see the parts)."""


__all__ = [
    "ClaimsStore",
    "DedupeStore",
    "DocumentsStore",
    "InvoiceStore",
    "LayoutRow",
    "LayoutsStore",
    "MaintenanceStore",
    "MatchFunction",
    "MetricsStore",
    "ReportingStore",
    "VendorImportResult",
    "VendorImportRow",
    "VendorsStore",
    "RequestedBy",
    "ReviewPageStore",
    "ReviewStore",
    "StepOutputsStore",
    "StoreBase",
    "as_uuid",
    "default_owner",
    "dumps",
    "is_contention",
    "is_systemic",
    "json_default",
]
