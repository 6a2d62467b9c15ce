"""The Dagster resource that owns the locking, the dedupe and every query (through InvoiceStore)."""

import os
import threading
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from dagster import ConfigurableResource, EnvVar
from pydantic import Field, model_validator

from invoice_pipeline.config import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_DATABASE_NAME,
    DEFAULT_LOCK_TTL_SECONDS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_DOCUMENT_BYTES,
    DEFAULT_PG_LISTEN,
    DEFAULT_PG_PORT,
    DEFAULT_REQUEST_TIMEOUT_SECONDS,
    DEFAULT_RETRY_BASE_SECONDS,
    DEFAULT_SAVE_AFTER_MS,
    ENV_DATABASE_URL,
    Settings,
    check_lease_timing,
    default_heartbeat_seconds,
    pgdata_of,
)
from invoice_pipeline.engine.leases import LeaseKeeper
from invoice_pipeline.engine.stages import DocumentParser, StageEnv
from invoice_pipeline.engine.store import InvoiceStore, open_store

# Every op, sensor and schedule of one process shares one store (ops of a run's in-process
# executor run side by side): psycopg_pool's usual most.
SHARED_POOL = 10


@dataclass(frozen=True)
class ResourceStoreSettings:
    """The resource's configuration as the store is opened from it (config.StoreSettings): the
    code location read the environment once, configured the resource from it, and a run worker
    gets the same values from the resource's configuration, never from its own environment."""

    database_url: str | None
    pgdata: Path | None
    pg_port: int
    pg_listen: str
    database_name: str
    lock_ttl: timedelta


_stores: dict[tuple[int, ResourceStoreSettings], InvoiceStore] = {}
_keepers: dict[tuple[int, ResourceStoreSettings, float], LeaseKeeper] = {}
_stores_lock = threading.Lock()


def shared_store(settings: ResourceStoreSettings) -> InvoiceStore:
    """One pool per process and database: ops, sensors and schedules of a process share it.

    Keyed by pid too, so a forked child never reuses its parent's sockets; and by the lease TTL,
    which the store owns (its sweep, its idle-in-transaction timeout).
    """
    key = (os.getpid(), settings)
    with _stores_lock:
        store = _stores.get(key)
        if store is None:
            store = _stores[key] = open_store(settings, SHARED_POOL)
        return store


def shared_lease_keeper(settings: ResourceStoreSettings, interval: timedelta) -> LeaseKeeper:
    """One heartbeat thread per process and database for every lease its runs hold."""
    store = shared_store(settings)
    key = (os.getpid(), settings, interval.total_seconds())
    with _stores_lock:
        keeper = _keepers.get(key)
        if keeper is None:
            # With the store's TTL, the keeper can tell the stages to stop on a lease it may have lost.
            keeper = _keepers[key] = LeaseKeeper(store.claims.heartbeat_many, interval, store.lock_ttl)
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

    Leave `database_url` unset to use the embedded PostgreSQL of `home` (started on first use,
    migrated).
    The code location passes `EnvVar("INVOICE_PIPELINE_DATABASE_URL")` when that variable is
    set: Dagster then keeps the variable's name in its storage and shows it in its UI, never the
    URL and its password.
    """

    database_url: str | None = Field(
        default=None, description="PostgreSQL URL (give an EnvVar); unset: the embedded server"
    )
    home: str | None = Field(
        default=None,
        description="With no database_url: the project's home, whose embedded PostgreSQL holds the database",
    )
    pg_port: int = Field(
        default=DEFAULT_PG_PORT, ge=1, le=65535, description="The embedded server's TCP port"
    )
    pg_listen: str = Field(default=DEFAULT_PG_LISTEN, description="The embedded server's listen address")
    database_name: str = Field(
        default=DEFAULT_DATABASE_NAME, description="The database on the embedded server"
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
            home=str(settings.home),
            pg_port=settings.pg_port,
            pg_listen=settings.pg_listen,
            database_name=settings.database_name,
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
    def store_settings(self) -> ResourceStoreSettings:
        """What the store is opened from: this resource's configuration, its lease TTL included."""
        return ResourceStoreSettings(
            database_url=self.url,
            pgdata=pgdata_of(Path(self.home)) if self.home else None,
            pg_port=self.pg_port,
            pg_listen=self.pg_listen,
            database_name=self.database_name,
            lock_ttl=self.lock_ttl,
        )

    @property
    def store(self) -> InvoiceStore:
        return shared_store(self.store_settings)

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
        return shared_lease_keeper(self.store_settings, self.heartbeat_interval)

    @property
    def lock_ttl(self) -> timedelta:
        """The TTL the store is opened with (Dagster's configuration holds whole seconds)."""
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
