"""The Dagster resource that owns the locking, the dedupe and every query (through InvoiceStore)."""

import os
import threading
from datetime import timedelta

from dagster import ConfigurableResource
from pydantic import Field

from invoice_pipeline.config import Settings
from invoice_pipeline.db.connection import prepare_database
from invoice_pipeline.leases import LeaseKeeper
from invoice_pipeline.store import InvoiceStore

_stores: dict[tuple[int, str | None], InvoiceStore] = {}
_keepers: dict[tuple[int, str | None, float], LeaseKeeper] = {}
_stores_lock = threading.Lock()


def shared_store(database_url: str | None) -> InvoiceStore:
    """One pool per process and database: ops, sensors and schedules of a process share it.

    Keyed by pid too, so a forked child never reuses its parent's sockets.
    """
    key = (os.getpid(), database_url)
    with _stores_lock:
        store = _stores.get(key)
        if store is None:
            url = database_url or prepare_database(Settings.from_env())
            store = _stores[key] = InvoiceStore(url)
        return store


def shared_lease_keeper(database_url: str | None, interval: timedelta) -> LeaseKeeper:
    """One heartbeat thread per process and database for every lease its runs hold."""
    store = shared_store(database_url)
    key = (os.getpid(), database_url, interval.total_seconds())
    with _stores_lock:
        keeper = _keepers.get(key)
        if keeper is None:
            keeper = _keepers[key] = LeaseKeeper(store.heartbeat_many, interval)
        return keeper


def close_shared_stores() -> None:
    with _stores_lock:
        for keeper in _keepers.values():
            keeper.stop()
        _keepers.clear()
        for store in _stores.values():
            store.close()
        _stores.clear()


class InvoiceDatabase(ConfigurableResource):
    """Durable locks, leases, fencing and advisory-locked dedupe on PostgreSQL.

    Leave `database_url` unset to use INVOICE_PIPELINE_DATABASE_URL or, without it, the
    embedded PostgreSQL (started on first use, migrated).
    """

    database_url: str | None = Field(default=None, description="PostgreSQL URL; unset: environment/embedded")
    lock_ttl_seconds: int = Field(
        default=120, ge=1, description="A running job without heartbeat this long is swept"
    )
    heartbeat_seconds: float = Field(
        default=15, gt=0, description="How often a working step heartbeats its lease"
    )
    max_attempts: int = Field(
        default=5, ge=1, description="Attempts before an invoice goes to needs_attention"
    )
    retry_base_seconds: float = Field(default=30, ge=0, description="First retry delay; doubles per attempt")
    max_document_bytes: int = Field(default=20 * 1024 * 1024, ge=1)
    batch_threshold: int = Field(default=20, ge=1, description="Backlog size from which the sensor batches")
    batch_size: int = Field(default=50, ge=1, description="Invoices per batched run")
    request_timeout_seconds: float = Field(
        default=3600,
        gt=0,
        description="A requested invoice no run has claimed after this long counts as a failed attempt",
    )

    @classmethod
    def from_settings(cls, settings: Settings) -> "InvoiceDatabase":
        return cls(
            database_url=settings.database_url,
            lock_ttl_seconds=int(settings.lock_ttl.total_seconds()),
            heartbeat_seconds=settings.heartbeat_interval.total_seconds(),
            max_attempts=settings.max_attempts,
            retry_base_seconds=settings.retry_base.total_seconds(),
            max_document_bytes=settings.max_document_bytes,
            batch_threshold=settings.batch_threshold,
            request_timeout_seconds=settings.request_timeout.total_seconds(),
        )

    @property
    def store(self) -> InvoiceStore:
        return shared_store(self.database_url)

    @property
    def lease_keeper(self) -> LeaseKeeper:
        return shared_lease_keeper(self.database_url, self.heartbeat_interval)

    @property
    def lock_ttl(self) -> timedelta:
        return timedelta(seconds=self.lock_ttl_seconds)

    @property
    def heartbeat_interval(self) -> timedelta:
        return timedelta(seconds=self.heartbeat_seconds)

    @property
    def request_timeout(self) -> timedelta:
        return timedelta(seconds=self.request_timeout_seconds)

    @property
    def retry_base(self) -> timedelta:
        return timedelta(seconds=self.retry_base_seconds)
