"""The lease a worker holds on one invoice while it processes it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING
from uuid import UUID

if TYPE_CHECKING:
    from invoice_pipeline.store import InvoiceStore

log = logging.getLogger(__name__)


class LeaseLost(RuntimeError):
    """The job is no longer the running one (it was swept or finished): nothing was written."""

    def __init__(self, job_id: UUID, invoice_id: UUID, detail: str) -> None:
        super().__init__(f"lease lost for invoice {invoice_id} (job {job_id}): {detail}")
        self.job_id = job_id
        self.invoice_id = invoice_id
        self.detail = detail


@dataclass(frozen=True)
class LockHolder:
    """Who holds an invoice's lock, as the processing_jobs row says."""

    job_id: UUID
    invoice_id: UUID
    attempt: int
    owner: str | None
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_age: timedelta

    def describe(self) -> str:
        return (
            f"job {self.job_id} (attempt {self.attempt}, owner {self.owner or 'unknown'}) "
            f"since {self.started_at.isoformat()}, last heartbeat {self.heartbeat_age.total_seconds():.1f}s ago"
        )


@dataclass
class Lease:
    """A running processing_jobs row. Its job id is the fencing token every write carries."""

    store: InvoiceStore = field(repr=False)
    job_id: UUID
    invoice_id: UUID
    attempt: int
    owner: str | None
    _lost: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def mark_lost(self) -> None:
        self._lost.set()

    def heartbeat(self) -> bool:
        alive = self.store.heartbeat(self.job_id)
        if not alive:
            self._lost.set()
        return alive

    def finish(self, status: str, error: str | None = None) -> bool:
        return self.store.finish(self.job_id, status, error)

    @contextmanager
    def keep_alive(self, interval: timedelta) -> Iterator[Lease]:
        """Heartbeat from a background thread while a long step runs.

        A failed heartbeat (database briefly unreachable) is retried at the next interval
        rather than giving up: only the database saying "not running" means the lease is lost.
        """
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(interval.total_seconds()):
                try:
                    if not self.heartbeat():
                        log.error("lease %s lost: heartbeat found the job no longer running", self.job_id)
                        return
                except Exception as exc:  # keep beating through transient connection errors
                    log.warning("heartbeat for job %s failed, will retry: %s", self.job_id, exc)

        thread = threading.Thread(target=beat, name=f"heartbeat-{self.job_id}", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()
