"""InvoiceStore: the one component that owns the connection pool and every database call.

A store is one shared `Database` and parts composed over it, the way procrastinate composes a
manager over a connector. Callers reach a part by its name (`store.claims.acquire(...)`,
`store.review.review_approve(...)`); each part reads its own file in sql/queries/ and calls
another part only through its public methods:

    database.py     Database: the pool, the heartbeat connection, transactions, the fence,
                    contention retries, fenced chunk writes                              fence.sql
    claims.py       store.claims: locks and leases (acquire, heartbeat, complete, fail),
                    claiming due work                                                    claims.sql
    documents.py    store.documents: documents and the stages' results (text, fields,
                    verdicts, the ledger row)                                         documents.sql
    payments.py     store.payments: who is paid, decided in the posting's transaction
                    under the identity keys' advisory locks (registering via vendors,
                    the ledger row via documents)                                      payments.sql
    dedupe.py       store.dedupe: duplicate decisions under the blocking keys' advisory
                    locks                                                                dedupe.sql
    review.py       store.review: a person's actions and the review policies (the lock
                    released via claims, a released copy decided again via dedupe, an
                    approval re-decided via payments)                                  review.sql
    corrections.py  store.corrections: a person's correction of fields (a review action,
                    via review, decided again via dedupe, released via claims)     corrections.sql
    review_pages.py store.review_pages: the review page's reads                        review_ui.sql
    maintenance.py  store.maintenance: the sweep (stale locks, orphans, abandoned and
                    lost requests; retries scheduled via claims)                    maintenance.sql
    reporting.py    store.reporting: read-only status, overviews, report frames,
                    invariant checks                                                  reporting.sql
    metrics.py      store.metrics: the Prometheus scrape (maintained counters, small
                    live sets)                                                          metrics.sql
    layouts.py      store.layouts: vendor layouts learnt from decisions, per org        layouts.sql
    vendors.py      store.vendors: the org's own identity and its vendor registry       vendors.sql
    step_outputs.py store.step_outputs: what a run's steps pass each other across
                    hosts (celery)                                                 step_outputs.sql
    mail.py         store.mail: configured mailboxes, and each message's checkpoint
                    committed with its attachments' invoices (via documents)              mail.sql
    exports.py      store.exports: export targets; the outbox's rows claimed, fenced,
                    swept and redriven (written only with their posting)             exports.sql
"""

from collections import Counter
from datetime import timedelta
from typing import Unpack

from invoice_pipeline.config import StoreSettings
from invoice_pipeline.db.connection import prepare_database
from invoice_pipeline.engine.store.claims import Claims, RequestedBy, default_owner
from invoice_pipeline.engine.store.corrections import Correction, Corrections
from invoice_pipeline.engine.store.database import (
    Database,
    DatabaseOptions,
    as_uuid,
    dumps,
    is_contention,
    is_systemic,
    json_default,
)
from invoice_pipeline.engine.store.dedupe import Dedupe, MatchFunction
from invoice_pipeline.engine.store.documents import Documents
from invoice_pipeline.engine.store.exports import Exports
from invoice_pipeline.engine.store.layouts import LayoutRow, Layouts
from invoice_pipeline.engine.store.mail import Mail
from invoice_pipeline.engine.store.maintenance import Maintenance
from invoice_pipeline.engine.store.metrics import Metrics
from invoice_pipeline.engine.store.payments import PaymentRequest, Payments
from invoice_pipeline.engine.store.reporting import Reporting
from invoice_pipeline.engine.store.review import Review
from invoice_pipeline.engine.store.review_pages import ReviewPages
from invoice_pipeline.engine.store.step_outputs import StepOutputs
from invoice_pipeline.engine.store.vendors import VendorImportResult, VendorImportRow, Vendors


class InvoiceStore:
    """Durable locks, leases, fencing, dedupe, review and reports on PostgreSQL: one Database,
    and the parts built over it (see the module's docstring)."""

    def __init__(self, database_url: str, **options: Unpack[DatabaseOptions]) -> None:
        self.database = Database(database_url, **options)
        db = self.database
        self.claims = Claims(db)
        self.dedupe = Dedupe(db)
        self.vendors = Vendors(db)
        self.documents = Documents(db)
        self.payments = Payments(db, self.vendors, self.documents)
        self.review = Review(db, self.claims, self.dedupe, self.payments)
        self.corrections = Corrections(db, self.claims, self.dedupe, self.review)
        self.review_pages = ReviewPages(db)
        self.maintenance = Maintenance(db, self.claims)
        self.reporting = Reporting(db)
        self.metrics = Metrics(db)
        self.layouts = Layouts(db)
        self.step_outputs = StepOutputs(db)
        self.mail = Mail(db, self.documents)
        self.exports = Exports(db)

    @property
    def database_url(self) -> str:
        return self.database.database_url

    @property
    def lock_ttl(self) -> timedelta:
        """The lease TTL the store was opened with: its sweep's, its timeouts' and its keeper's."""
        return self.database.lock_ttl

    @property
    def contention(self) -> Counter[str]:
        """What contention cost: each lost attempt by error class, and "gave_up" after the retries."""
        return self.database.contention

    def close(self) -> None:
        self.database.close()


def open_store(settings: StoreSettings, pool_size: int) -> InvoiceStore:
    """The one way the product opens its store from settings (config.Settings, or the Dagster
    resource's configuration): the configured database (the embedded server started or attached
    to), migrated, and the settings' lease TTL, which the store then owns (its sweep, its
    timeouts, its keeper's self-fencing). `pool_size` is the most connections the caller uses
    at once; each caller names why its size."""
    return InvoiceStore(prepare_database(settings), max_size=pool_size, lock_ttl=settings.lock_ttl)


__all__ = [
    "Claims",
    "Correction",
    "Corrections",
    "Database",
    "DatabaseOptions",
    "Dedupe",
    "Documents",
    "Exports",
    "InvoiceStore",
    "LayoutRow",
    "Layouts",
    "Mail",
    "Maintenance",
    "MatchFunction",
    "Metrics",
    "PaymentRequest",
    "Payments",
    "Reporting",
    "RequestedBy",
    "Review",
    "ReviewPages",
    "StepOutputs",
    "VendorImportResult",
    "VendorImportRow",
    "Vendors",
    "as_uuid",
    "default_owner",
    "dumps",
    "is_contention",
    "is_systemic",
    "json_default",
    "open_store",
]
