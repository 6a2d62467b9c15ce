"""The Dagster resource that owns the locking, the dedupe and every query (through InvoiceStore)."""

import os
import threading
from datetime import timedelta
from pathlib import Path

from dagster import ConfigurableResource, EnvVar
from pydantic import Field, model_validator

from invoice_pipeline.config import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_LOCK_TTL_SECONDS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_DOCUMENT_BYTES,
    DEFAULT_REQUEST_TIMEOUT_SECONDS,
    DEFAULT_RETRY_BASE_SECONDS,
    DEFAULT_SAVE_AFTER_MS,
    ENV_DATABASE_URL,
    Settings,
    check_lease_timing,
    default_heartbeat_seconds,
)
from invoice_pipeline.db.connection import prepare_database
from invoice_pipeline.engine.leases import LeaseKeeper
from invoice_pipeline.engine.stages import DocumentParser, StageEnv
from invoice_pipeline.engine.store import InvoiceStore

_stores: dict[tuple[int, str | None, float | None], InvoiceStore] = {}
_keepers: dict[tuple[int, str | None, float, float | None], LeaseKeeper] = {}
_stores_lock = threading.Lock()


def shared_store(database_url: str | None, lock_ttl: timedelta | None = None) -> InvoiceStore:
    """One pool per process and database: ops, sensors and schedules of a process share it.

    Keyed by pid too, so a forked child never reuses its parent's sockets; and by the lease TTL,
    which bounds the store's idle-in-transaction timeout (InvoiceStore).
    """
    key = (os.getpid(), database_url, None if lock_ttl is None else lock_ttl.total_seconds())
    with _stores_lock:
        store = _stores.get(key)
        if store is None:
            url = database_url or prepare_database(Settings.from_env())
            store = _stores[key] = InvoiceStore(url, lock_ttl=lock_ttl)
        return store


def shared_lease_keeper(
    database_url: str | None, interval: timedelta, lock_ttl: timedelta | None = None
) -> LeaseKeeper:
    """One heartbeat thread per process and database for every lease its runs hold."""
    store = shared_store(database_url, lock_ttl)
    key = (
        os.getpid(),
        database_url,
        interval.total_seconds(),
        None if lock_ttl is None else lock_ttl.total_seconds(),
    )
    with _stores_lock:
        keeper = _keepers.get(key)
        if keeper is None:
            # With the TTL, the keeper can tell the stages to stop on a lease it may have lost.
            keeper = _keepers[key] = LeaseKeeper(store.claims.heartbeat_many, interval, lock_ttl)
        return keeper


def close_shared_stores() -> None:
    with _stores_lock:
        for keeper in _keepers.values():
            keeper.stop()
        _keepers.clear()
        for store in _stores.values():
            store.close()
        _stores.clear()


def _resolved(value: str | None) -> str | None:
    """The value itself: Dagster resolves an EnvVar for a run; code that builds the resource
    directly (the CLI, a sensor's test) resolves it here."""
    return value.get_value() if isinstance(value, EnvVar) else value


class InvoiceDatabase(ConfigurableResource):
    """Durable locks, leases, fencing and advisory-locked dedupe on PostgreSQL.

    Leave `database_url` unset to use the embedded PostgreSQL (started on first use, migrated).
    The code location passes `EnvVar("INVOICE_PIPELINE_DATABASE_URL")` when that variable is
    set: Dagster then keeps the variable's name in its storage and shows it in its UI, never the
    URL and its password.
    """

    database_url: str | None = Field(
        default=None, description="PostgreSQL URL (give an EnvVar); unset: the embedded server"
    )
    lock_ttl_seconds: int = Field(
        default=DEFAULT_LOCK_TTL_SECONDS,
        ge=1,
        description="A running job without heartbeat this long is swept",
    )
    heartbeat_seconds: float | None = Field(
        default=None, gt=0, description="How often a holder heartbeats its leases; unset: a third of the TTL"
    )
    max_attempts: int = Field(
        default=DEFAULT_MAX_ATTEMPTS, ge=1, description="Attempts before an invoice goes to needs_attention"
    )
    retry_base_seconds: float = Field(
        default=DEFAULT_RETRY_BASE_SECONDS, ge=0, description="First retry delay; doubles per attempt"
    )
    max_document_bytes: int = Field(default=DEFAULT_MAX_DOCUMENT_BYTES, ge=1)
    batch_size: int = Field(
        default=DEFAULT_BATCH_SIZE,
        ge=1,
        description="The most invoices one run takes; chunks and concurrent runs follow (runs.RunShape)",
    )
    request_timeout_seconds: float = Field(
        default=DEFAULT_REQUEST_TIMEOUT_SECONDS,
        gt=0,
        description="A requested invoice no run has claimed after this long counts as a failed attempt",
    )
    max_stage_seconds: float = Field(
        # Above the document sandbox's wall-clock limit (60 s by default, per parse), so a slow
        # document is quarantined as too_complex before its stage is abandoned as stuck.
        default=600,
        gt=0,
        description="A stage running longer fails its attempt (lease released, invoice rescheduled)",
    )
    save_after_seconds: float = Field(
        default=DEFAULT_SAVE_AFTER_MS / 1000,
        ge=0,
        description="A chunk's finished results are saved once this much work piled up (what a crash can lose)",
    )

    inbox: str | None = Field(
        default=None,
        description="The folder the sensor takes new files from (give an EnvVar); unset: no intake",
    )

    @model_validator(mode="after")
    def _lease_timing(self) -> "InvoiceDatabase":
        check_lease_timing(self.lock_ttl_seconds, self.heartbeat_interval.total_seconds())
        return self

    @classmethod
    def from_settings(cls, settings: Settings) -> "InvoiceDatabase":
        return cls(
            database_url=EnvVar(ENV_DATABASE_URL) if settings.database_url else None,
            lock_ttl_seconds=int(settings.lock_ttl.total_seconds()),
            heartbeat_seconds=settings.heartbeat_interval.total_seconds(),
            max_attempts=settings.max_attempts,
            retry_base_seconds=settings.retry_base.total_seconds(),
            max_document_bytes=settings.max_document_bytes,
            batch_size=settings.batch_size,
            request_timeout_seconds=settings.request_timeout.total_seconds(),
            save_after_seconds=settings.save_after.total_seconds(),
            inbox=str(settings.inbox),
        )

    @property
    def url(self) -> str | None:
        return _resolved(self.database_url)

    @property
    def inbox_path(self) -> Path | None:
        """The folder the sensor takes new files from; None: it takes none."""
        inbox = _resolved(self.inbox)
        return Path(inbox) if inbox else None

    @property
    def store(self) -> InvoiceStore:
        return shared_store(self.url, self.lock_ttl)

    def stage_env(self, parser: DocumentParser) -> StageEnv:
        """What the stages need from this resource, with `parser` reading the documents."""
        return StageEnv(
            store=self.store,
            parser=parser,
            max_document_bytes=self.max_document_bytes,
            max_stage_seconds=self.max_stage_seconds,
            max_attempts=self.max_attempts,
            retry_base=self.retry_base,
            may_hold=self.lease_keeper.may_hold,
            save_after_seconds=self.save_after_seconds,
        )

    @property
    def lease_keeper(self) -> LeaseKeeper:
        return shared_lease_keeper(self.url, self.heartbeat_interval, self.lock_ttl)

    @property
    def lock_ttl(self) -> timedelta:
        return timedelta(seconds=self.lock_ttl_seconds)

    @property
    def heartbeat_interval(self) -> timedelta:
        if self.heartbeat_seconds is None:
            return timedelta(seconds=default_heartbeat_seconds(self.lock_ttl_seconds))
        return timedelta(seconds=self.heartbeat_seconds)

    @property
    def request_timeout(self) -> timedelta:
        return timedelta(seconds=self.request_timeout_seconds)

    @property
    def retry_base(self) -> timedelta:
        return timedelta(seconds=self.retry_base_seconds)
