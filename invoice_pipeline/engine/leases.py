"""Keeping leases alive, and what losing one means. The `Lease` itself is a plain value (records.py)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from uuid import UUID

log = logging.getLogger(__name__)


class LeaseLost(RuntimeError):
    """The job is no longer the running one (it was swept or finished): nothing was written."""

    def __init__(self, job_id: UUID, invoice_id: UUID, detail: str) -> None:
        super().__init__(f"lease lost for invoice {invoice_id} (job {job_id}): {detail}")
        self.job_id = job_id
        self.invoice_id = invoice_id
        self.detail = detail


class LeaseKeeper:
    """Heartbeats every lease a process holds, from one thread, whatever step is running.

    A batch run goes through its stages breadth-first (every claim, then every extraction, ...),
    so each branch waits while the others work. A heartbeat tied to the running step would leave
    the waiting branches' leases silent for that long, and a sweep could take live work away.
    One statement beats them all; a lease the database no longer has running is reported lost.
    The statement never waits (store.claims.heartbeat_many: its own connection, SKIP LOCKED), so
    a chunk blocked inside its write never silences the others.

    Self-fencing: with `ttl`, each lease's last renewal is remembered (the monotonic time a
    beat that confirmed it was *sent*: the database stamped it later). `may_hold` is False once
    a lease is lost or its last renewal is older than SELF_FENCE_SHARE of the TTL: the sweep may
    take it soon, so the stages stop working on it (a cut link, a frozen heartbeat). The
    database fence stays the guarantee; this only saves work the fence would throw away.
    """

    SELF_FENCE_SHARE = 2 / 3

    def __init__(
        self,
        beat_many: Callable[[list[UUID]], set[UUID]],
        interval: timedelta,
        ttl: timedelta | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._beat_many = beat_many
        # The monotonic clock renewals are judged by; a test passes one it moves itself.
        self._clock = clock
        self._interval = interval
        self._fence_after = None if ttl is None else ttl.total_seconds() * self.SELF_FENCE_SHARE
        self._renewed: dict[UUID, float] = {}
        self._held: set[UUID] = set()
        self._lost: set[UUID] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, job_id: UUID) -> None:
        with self._lock:
            self._held.add(job_id)
            self._renewed[job_id] = self._clock()  # just claimed or resumed: a fresh lease
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
                self._thread.start()

    def drop(self, job_id: UUID) -> None:
        with self._lock:
            self._held.discard(job_id)
            self._lost.discard(job_id)
            self._renewed.pop(job_id, None)

    def may_hold(self, job_id: UUID) -> bool:
        """False when the lease is lost, or (with a TTL) not renewed for most of the TTL.

        A lease this keeper does not heartbeat is not judged here (True): the fence decides.
        """
        with self._lock:
            if job_id in self._lost:
                return False
            renewed = self._renewed.get(job_id)
        if renewed is None or self._fence_after is None:
            return True
        return self._clock() - renewed < self._fence_after

    def is_lost(self, job_id: UUID) -> bool:
        with self._lock:
            return job_id in self._lost

    def held(self) -> frozenset[UUID]:
        """The leases heartbeated now: each must have a worker (claim to release, or a retry)."""
        with self._lock:
            return frozenset(self._held)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval.total_seconds()):
            with self._lock:
                held = list(self._held)
            if not held:
                continue
            sent = self._clock()
            try:
                alive = self._beat_many(held)
            except Exception as exc:  # a dropped connection: beat again next time
                log.warning("heartbeat for %d lease(s) failed, will retry: %s", len(held), exc)
                continue
            with self._lock:
                for job_id in alive & self._held:
                    self._renewed[job_id] = sent
                for job_id in set(held) - alive:
                    if job_id in self._held:
                        log.error("lease %s lost: heartbeat found the job no longer running", job_id)
                        self._held.discard(job_id)
                        self._renewed.pop(job_id, None)
                        self._lost.add(job_id)
