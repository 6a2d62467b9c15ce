"""The one way a command opens the store: the configured database, migrated, with the lock TTL."""

from __future__ import annotations

from invoice_pipeline.config import Settings
from invoice_pipeline.db.connection import prepare_database
from invoice_pipeline.engine.store import InvoiceStore


def open_store(settings: Settings) -> InvoiceStore:
    return InvoiceStore(prepare_database(settings), max_size=4, lock_ttl=settings.lock_ttl)
