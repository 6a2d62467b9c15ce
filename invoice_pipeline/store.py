"""InvoiceStore: the one component that owns the connection pool and every database call.

Every query comes from `sql/queries/*.sql` by name. Writes a pipeline step makes take a
`Lease` and run fenced: in one transaction, first the `fence` statement (the job must still be
the running one), then the write. A swept holder gets `LeaseLost` and has written nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal, TypeVar
from uuid import UUID

import pandas as pd
import psycopg
from psycopg.rows import class_row, dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from invoice_pipeline.config import validate_database_url
from invoice_pipeline.db.sqlfiles import query
from invoice_pipeline.documents.extracted import ExtractedText
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.keys import decision_lock_ids, search_ids
from invoice_pipeline.domain.matching import MatchCandidate
from invoice_pipeline.domain.review import DEFAULT_POLICY, SUSPECTED_DUPLICATE, ReviewPolicy, reason_code
from invoice_pipeline.domain.validation import posting_gaps
from invoice_pipeline.leases import LeaseLost
from invoice_pipeline.records import (
    AcquiredLock,
    Approval,
    AttentionItem,
    ChunkWrite,
    CurrencyTotal,
    DueInvoice,
    DuplicateCandidateRow,
    DuplicateDecision,
    IngestResult,
    InvoiceOutcome,
    InvoiceOverview,
    InvoiceState,
    JobRecord,
    Lease,
    LedgerPosting,
    LockHolder,
    MatchOutcome,
    OpenRequests,
    Posting,
    Quarantine,
    Rescheduled,
    StatusSummary,
    StoredDocument,
    Verdict,
)
from invoice_pipeline.review_records import (
    ACTION_FROM,
    Action,
    ActionOutcome,
    LockedTarget,
    ReviewActionRecord,
    ReviewQueueLine,
    ReviewTarget,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
P = TypeVar("P")
R = TypeVar("R")
FINISH_STATUSES = ("succeeded", "failed")
# A session idle inside a transaction this long is ended by the server, with its row and
# advisory locks. It must be shorter than the lease TTL (a third of the default 30 s; half of a
# shorter TTL given to the store): the sweep skips a job row locked by a write in flight as
# alive, so a holder frozen mid-write must lose its locks before its lease would be stale.
IDLE_IN_TRANSACTION_MS = 10_000
IDLE_IN_TRANSACTION_FLOOR_MS = 500
# The longest any statement waits for a lock (a row, a dedupe advisory lock). Every wait in the
# lock order is behind a short write, so this only cuts off a stuck peer; the statement or the
# chunk write is then retried.
LOCK_TIMEOUT_MS = 5_000
# Retries of a statement or a chunk write that lost to contention (deadlock, lock timeout,
# serialization failure, cancel), with jittered exponential backoff from CONTENTION_BACKOFF_S.
CONTENTION_RETRIES = 3
CONTENTION_BACKOFF_S = 0.02


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def as_uuid(value: UUID | str, what: str = "invoice_id") -> UUID:
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        raise ValueError(f"{what} must be a UUID, got {value!r}") from None


# Who a claimed invoice's request waits for: one owner for all, or one per invoice once the
# caller has planned its runs (the sensor: one run key per invoice or per batch).
RequestedBy = str | Callable[[list[DueInvoice]], Mapping[UUID, str]] | None


# Given an invoice and its org's candidate originals as (invoice id, org id, fields), which one
# the invoice copies, if any. Pure domain code (invoice_pipeline.domain.matching) behind it.
MatchFunction = Callable[[MatchCandidate, list[tuple[UUID, str, InvoiceFields]]], MatchOutcome | None]


# SQLSTATEs of contention: class 40 (transaction rollback: serialization failure, deadlock
# detected), lock_not_available (a lock timeout, NOWAIT) and query_canceled. psycopg gives each
# its own subclass of OperationalError, with no common parent but the one lost connections share.
CONTENTION_SQLSTATES = ("55P03", "57014")


def is_contention(exc: BaseException) -> bool:
    """Lost to another transaction (a deadlock, a lock timeout, a serialization failure) or
    cancelled: one statement's problem, worth retrying, never the database's."""
    sqlstate = exc.sqlstate if isinstance(exc, psycopg.Error) else None
    return sqlstate is not None and (sqlstate.startswith("40") or sqlstate in CONTENTION_SQLSTATES)


def is_systemic(exc: BaseException) -> bool:
    """The database itself is unreachable or gone (a lost connection, an exhausted or closed
    pool): no invoice is to blame, the whole op fails (and its retry policy takes over).
    Contention (`is_contention`) is not systemic, although psycopg files it under
    OperationalError too; any other database error belongs to one invoice's data."""
    if is_contention(exc):
        return False
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError | PoolTimeout | PoolClosed)


def idle_in_transaction_ms(lock_ttl: timedelta | None) -> int:
    """The idle-in-transaction timeout for a store whose leases live `lock_ttl`: below it."""
    if lock_ttl is None:
        return IDLE_IN_TRANSACTION_MS
    half = int(lock_ttl.total_seconds() * 1000) // 2
    return max(IDLE_IN_TRANSACTION_FLOOR_MS, min(IDLE_IN_TRANSACTION_MS, half))


class InvoiceStore:
    def __init__(
        self,
        database_url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        lock_ttl: timedelta | None = None,
        lock_timeout: timedelta = timedelta(milliseconds=LOCK_TIMEOUT_MS),
    ) -> None:
        self.database_url = validate_database_url(database_url)
        self.idle_in_transaction_ms = idle_in_transaction_ms(lock_ttl)
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            # A worker frozen inside a fenced write holds its rows; the server ends that session
            # before its lease would go stale. No wait for a lock is unbounded.
            "options": (
                f"-c idle_in_transaction_session_timeout={self.idle_in_transaction_ms} "
                f"-c lock_timeout={int(lock_timeout.total_seconds() * 1000)}"
            ),
        }
        self.pool = ConnectionPool(
            database_url,
            min_size=min_size,
            max_size=max_size,
            kwargs=self._connect_kwargs,
            # A connection that died with the server is replaced instead of handed out.
            check=ConnectionPool.check_connection,
            open=True,
            name="invoice-pipeline",
        )
        # Heartbeats have a connection of their own: with every pooled connection busy (chunks
        # waiting for dedupe locks, say), a beat queued for the pool would let live leases go
        # stale. Opened on first use, reopened after an error.
        self._heartbeat_conn: psycopg.Connection[Any] | None = None
        self._heartbeat_lock = threading.Lock()
        # What contention cost: each lost attempt by error class, and "gave_up" after the retries.
        self.contention: Counter[str] = Counter()
        self._contention_lock = threading.Lock()

    def close(self) -> None:
        with self._heartbeat_lock:
            if self._heartbeat_conn is not None:
                self._heartbeat_conn.close()
                self._heartbeat_conn = None
        self.pool.close()

    # -- plumbing ------------------------------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[Any]]:
        with self.pool.connection() as conn, conn.transaction():
            yield conn

    def _count_contention(self, what: str) -> None:
        with self._contention_lock:
            self.contention[what] += 1

    def _retrying(self, work: Callable[[], T], what: str) -> T:
        """`work()`, again (a bounded number of times, with jittered backoff) when it lost to
        contention; the last contention error is raised. `work` must be a whole transaction."""
        for attempt in range(CONTENTION_RETRIES + 1):
            try:
                return work()
            except psycopg.Error as exc:
                if not is_contention(exc):
                    raise
                self._count_contention(type(exc).__name__)
                if attempt == CONTENTION_RETRIES:
                    self._count_contention("gave_up")
                    log.warning("%s lost to contention %d times, giving up: %s", what, attempt + 1, exc)
                    raise
                log.info("%s lost to contention (%s), retrying", what, type(exc).__name__)
                time.sleep(CONTENTION_BACKOFF_S * 2**attempt * random.uniform(0.5, 1.5))
        raise AssertionError("unreachable")

    def _retrying_or_none(self, work: Callable[[], T], what: str) -> T | None:
        """`_retrying`, but None once contention outlasts the retries: the caller treats it as
        a bounce (not taken, busy), never as the database's failure."""
        try:
            return self._retrying(work, what)
        except psycopg.Error as exc:
            if not is_contention(exc):
                raise
            return None

    @contextmanager
    def _fenced(
        self, lease: Lease, before_fence: Callable[[psycopg.Connection[Any]], None] | None = None
    ) -> Iterator[psycopg.Connection[Any]]:
        """A transaction that holds lease's invoice row and job row locked, or raises LeaseLost.

        `before_fence` runs first in the transaction: whatever it waits for (dedupe advisory
        locks), it waits holding no row, so nobody queues behind the wait.
        """
        with self._transaction() as conn:
            if before_fence is not None:
                before_fence(conn)
            row = conn.execute(
                query("fence"), {"job_id": lease.job_id, "invoice_id": lease.invoice_id}
            ).fetchone()
            if row is None:
                raise LeaseLost(lease.job_id, lease.invoice_id, self._why_not_running(conn, lease.job_id))
            yield conn

    def _why_not_running(self, conn: psycopg.Connection[Any], job_id: UUID) -> str:
        row = conn.execute(query("job_status"), {"job_id": job_id}).fetchone()
        if row is None:
            return "no such job"
        return f"job is {row[0]}" + (f": {row[1]}" if row[1] else "")

    def _one(
        self, conn: psycopg.Connection[Any], cls: type[T], name: str, params: dict[str, Any]
    ) -> T | None:
        with conn.cursor(row_factory=class_row(cls)) as cur:
            return cur.execute(query(name), params).fetchone()

    def _all(self, conn: psycopg.Connection[Any], cls: type[T], name: str, params: dict[str, Any]) -> list[T]:
        with conn.cursor(row_factory=class_row(cls)) as cur:
            return cur.execute(query(name), params).fetchall()

    def _scalar(self, name: str, params: dict[str, Any]) -> Any:
        with self.pool.connection() as conn:
            row = conn.execute(query(name), params).fetchone()
            return None if row is None else row[0]

    # -- ingest --------------------------------------------------------------------------------

    def store_document(self, content: bytes, org_id: str, filename: str | None = None) -> IngestResult:
        """Keep the original bytes and create its invoice; the same bytes again are the same invoice."""
        if not org_id or not org_id.strip():
            raise ValueError("org_id must be a non-empty string")
        sha256 = hashlib.sha256(content).hexdigest()
        params = {
            "sha256": sha256,
            "content": content,
            "size_bytes": len(content),
            "org_id": org_id,
            "filename": filename,
        }
        with self._transaction() as conn:
            conn.execute(query("insert_document"), params)
            row = conn.execute(query("insert_invoice_for_document"), params).fetchone()
            if row is not None:
                return IngestResult(row[0], sha256, created=True)
            existing = conn.execute(query("invoice_for_document"), params).fetchone()
            assert existing is not None, "invoice vanished: rows are never deleted"
            return IngestResult(existing[0], sha256, created=False)

    def load_document(self, invoice_id: UUID | str) -> StoredDocument | None:
        return self.load_documents([as_uuid(invoice_id)]).get(as_uuid(invoice_id))

    def load_documents(self, invoice_ids: Sequence[UUID]) -> dict[UUID, StoredDocument]:
        with self.pool.connection() as conn:
            found = self._all(conn, StoredDocument, "load_documents", {"invoice_ids": list(invoice_ids)})
        return {d.invoice_id: d for d in found}

    def invoice_state(self, invoice_id: UUID | str) -> InvoiceState | None:
        with self.pool.connection() as conn:
            return self._one(conn, InvoiceState, "invoice_state", {"invoice_id": as_uuid(invoice_id)})

    # -- the lock ------------------------------------------------------------------------------

    def acquire(self, invoice_id: UUID | str, attempt: int, owner: str | None = None) -> Lease | None:
        """Take the invoice's lock, or None when another job is running it or the invoice is
        already finished (processed, quarantined, needs_attention). Never raises on contention."""
        invoice_id = as_uuid(invoice_id)
        if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
            raise ValueError(f"attempt must be a positive integer, got {attempt!r}")
        owner = owner or default_owner()
        params = {"invoice_id": invoice_id, "attempt": attempt, "owner": owner}

        def take() -> Lease | None:
            with self.pool.connection() as conn:
                with conn.transaction():
                    # acquire_processing_lock locks the invoice row, then inserts the job
                    # (the lock order, sql/0009); the update below finds the row locked already.
                    row = conn.execute(query("acquire_lock"), params).fetchone()
                    job_id = row[0] if row else None
                    if job_id is None:
                        return None
                    if conn.execute(query("mark_invoice_processing"), params).fetchone() is None:
                        # Finished by a holder that completed after the caller last looked: undo
                        # the job row too, so the invoice is not reopened and its history stays clean.
                        raise psycopg.Rollback()
                    return Lease(job_id, invoice_id, attempt, owner)
            return None

        return self._retrying_or_none(take, f"acquiring invoice {invoice_id}")

    def acquire_many(self, refs: Sequence[tuple[UUID, int | None]], owner: str) -> list[AcquiredLock]:
        """Take the locks of a chunk in one statement (acquire_processing_locks, sql/0005).

        Each invoice as `acquire` would: an attempt of None is the invoice's next one; an
        invoice held elsewhere or already finished is left out, never an error.
        """
        for _, attempt in refs:
            if attempt is not None and (
                not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1
            ):
                raise ValueError(f"attempt must be a positive integer, got {attempt!r}")
        params = {
            "invoice_ids": [as_uuid(invoice_id) for invoice_id, _ in refs],
            "attempts": [attempt for _, attempt in refs],
            "owner": owner,
        }

        def take() -> list[AcquiredLock]:
            with self.pool.connection() as conn:
                return self._all(conn, AcquiredLock, "acquire_locks", params)

        if (locks := self._retrying_or_none(take, f"claiming {len(refs)} invoice(s)")) is not None:
            return locks
        # Still contended after the retries: one invoice's problem, not the chunk's. Each is
        # tried alone; one that still loses is left out, as if it had bounced.
        if len(refs) == 1:
            log.warning("claim of invoice %s gave up after contention; left unclaimed", refs[0][0])
            return []
        return [lock for ref in refs for lock in self.acquire_many([ref], owner)]

    def lease(self, job_id: UUID | str, invoice_id: UUID | str, attempt: int, owner: str | None) -> Lease:
        """A handle on a job taken earlier (e.g. by a previous step of the same run); fenced like any other."""
        return Lease(as_uuid(job_id, "job_id"), as_uuid(invoice_id), attempt, owner)

    def current_holder(self, invoice_id: UUID | str) -> LockHolder | None:
        with self.pool.connection() as conn:
            return self._one(conn, LockHolder, "current_holder", {"invoice_id": as_uuid(invoice_id)})

    def heartbeat(self, job_id: UUID | str) -> bool:
        return bool(self._scalar("heartbeat_lock", {"job_id": as_uuid(job_id, "job_id")}))

    def heartbeat_many(self, job_ids: list[UUID]) -> set[UUID]:
        """Heartbeat several jobs in one statement; returns those still running.

        On the store's own heartbeat connection, never the pool's, and without waiting for any
        row lock (heartbeat_locks): heartbeats never queue behind work.
        """
        with self._heartbeat_lock:
            try:
                if self._heartbeat_conn is None or self._heartbeat_conn.closed:
                    self._heartbeat_conn = psycopg.connect(self.database_url, **self._connect_kwargs)
                rows = self._heartbeat_conn.execute(query("heartbeat_locks"), {"job_ids": job_ids}).fetchall()
            except psycopg.Error:
                if self._heartbeat_conn is not None:
                    self._heartbeat_conn.close()
                    self._heartbeat_conn = None
                raise
        return {row[0] for row in rows}

    def finish(self, job_id: UUID | str, status: str, error: str | None = None) -> bool:
        """Finish a job; False, changing nothing, when it is no longer running."""
        if status not in FINISH_STATUSES:
            raise ValueError(f"status must be one of {FINISH_STATUSES}, got {status!r}")
        return bool(
            self._scalar(
                "finish_lock", {"job_id": as_uuid(job_id, "job_id"), "status": status, "error": error}
            )
        )

    def release_stale_locks(
        self, invoice_id: UUID | str | None = None, stale_after: timedelta = timedelta(minutes=15)
    ) -> int:
        if not isinstance(stale_after, timedelta) or stale_after < timedelta(0):
            raise ValueError(f"stale_after must be a non-negative timedelta, got {stale_after!r}")
        params = {
            "invoice_id": None if invoice_id is None else as_uuid(invoice_id),
            "stale_after": stale_after,
        }
        return int(self._retrying(lambda: self._scalar("release_stale_locks", params), "the sweep"))

    def release_stale_locks_of(self, invoice_ids: Sequence[UUID], stale_after: timedelta) -> int:
        """The sweep, for the invoices a chunk is about to claim."""
        if not invoice_ids:
            return 0
        params = {"invoice_ids": list(invoice_ids), "stale_after": stale_after}
        return int(
            self._retrying(lambda: self._scalar("release_stale_locks_of", params), "the chunk's sweep")
        )

    def job_history(self, invoice_id: UUID | str) -> list[JobRecord]:
        with self.pool.connection() as conn:
            return self._all(conn, JobRecord, "job_history", {"invoice_id": as_uuid(invoice_id)})

    def jobs_of_owner(self, owner: str) -> list[JobRecord]:
        with self.pool.connection() as conn:
            return self._all(conn, JobRecord, "jobs_of_owner", {"owner": owner})

    # -- fenced writes, a chunk at a time -------------------------------------------------------
    #
    # A stage writes its results for a whole chunk in one transaction, behind one fence
    # statement for all the chunk's leases (fence_chunk). An invoice whose job is no longer
    # running gets nothing written and is reported lost; one whose write the database refuses
    # (bad data) is isolated: the chunk is written again an invoice at a time, so it alone fails.
    # A write that lost to contention (a deadlock, a lock timeout) is retried a few times, then
    # isolated the same way: only the invoices that still lose fail.
    # The single-invoice methods are chunks of one that raise instead of reporting.

    def _write_chunk(
        self,
        items: Sequence[tuple[Lease, P]],
        write: Callable[[psycopg.Connection[Any], Lease, P], R],
        prepare: Callable[[psycopg.Connection[Any], list[Lease]], None] | None = None,
        *,
        step: str | None = None,
        before_fence: Callable[[psycopg.Connection[Any], list[Lease]], None] | None = None,
    ) -> ChunkWrite[R]:
        """One fenced transaction for the chunk; one per invoice when the database refuses it.

        With `step`, the transaction also records that step 'executed' for every invoice it
        wrote: the breadcrumb and the result commit together, or neither does. `before_fence`
        runs first in the transaction, for waits that must hold no row (dedupe advisory locks);
        `prepare` runs after the fence, with the leases still running.
        """
        if not items:
            return ChunkWrite({}, {}, {})
        try:
            return self._retrying(
                lambda: self._write_chunk_once(items, write, prepare, step, before_fence),
                f"a write of {len(items)} invoice(s)" + (f" ({step})" if step else ""),
            )
        except psycopg.Error as exc:
            if is_systemic(exc):
                raise
            if len(items) == 1:
                return ChunkWrite({}, {}, {items[0][0].invoice_id: exc})
        written: dict[UUID, R] = {}
        lost: dict[UUID, str] = {}
        failed: dict[UUID, Exception] = {}
        for item in items:
            one = self._write_chunk([item], write, prepare, step=step, before_fence=before_fence)
            written |= one.written
            lost |= one.lost
            failed |= one.failed
        return ChunkWrite(written, lost, failed)

    def _write_chunk_once(
        self,
        items: Sequence[tuple[Lease, P]],
        write: Callable[[psycopg.Connection[Any], Lease, P], R],
        prepare: Callable[[psycopg.Connection[Any], list[Lease]], None] | None,
        step: str | None,
        before_fence: Callable[[psycopg.Connection[Any], list[Lease]], None] | None = None,
    ) -> ChunkWrite[R]:
        with self._transaction() as conn:
            if before_fence is not None:
                before_fence(conn, [lease for lease, _ in items])
            rows = conn.execute(query("fence_chunk"), {"job_ids": [lease.job_id for lease, _ in items]})
            alive = {row[0] for row in rows.fetchall()}
            live = [(lease, payload) for lease, payload in items if lease.job_id in alive]
            lost = {
                lease.invoice_id: self._why_not_running(conn, lease.job_id)
                for lease, _ in items
                if lease.job_id not in alive
            }
            if prepare is not None and live:
                prepare(conn, [lease for lease, _ in live])
            if step is not None and live:
                # Before the writes: a write may finish the job (a quarantine), and a breadcrumb
                # is only ever stamped within its job's running time. The transaction makes
                # both or neither.
                conn.execute(
                    query("record_executed"),
                    {
                        "step": step,
                        "invoice_ids": [lease.invoice_id for lease, _ in live],
                        "job_ids": [lease.job_id for lease, _ in live],
                    },
                )
            written = {lease.invoice_id: write(conn, lease, payload) for lease, payload in live}
            return ChunkWrite(written, lost, {})

    @staticmethod
    def _only(result: ChunkWrite[R], lease: Lease) -> R:
        """The one invoice's result of a chunk of one; LeaseLost, or its error, raised."""
        if lease.invoice_id in result.lost:
            raise LeaseLost(lease.job_id, lease.invoice_id, result.lost[lease.invoice_id])
        if lease.invoice_id in result.failed:
            raise result.failed[lease.invoice_id]
        return result.written[lease.invoice_id]

    def _run(self, name: str) -> Callable[[psycopg.Connection[Any], Lease, dict[str, Any]], None]:
        """A write that is one named statement with the lease's ids and the given parameters."""

        def write(conn: psycopg.Connection[Any], lease: Lease, params: dict[str, Any]) -> None:
            conn.execute(query(name), {"invoice_id": lease.invoice_id, "job_id": lease.job_id, **params})

        return write

    def record_steps(self, step: str, leases: Sequence[Lease], started: set[UUID]) -> ChunkWrite[None]:
        """Breadcrumbs as a stage starts a chunk: `started` invoices move processing_stage, the
        rest were fast-forwarded. ('executed' is written with each saved result, see _write_chunk.)"""
        items = [(lease, lease.invoice_id in started) for lease in leases]

        def write(conn: psycopg.Connection[Any], lease: Lease, runs: bool) -> None:
            return None

        def crumbs(conn: psycopg.Connection[Any], live: list[Lease]) -> None:
            conn.execute(
                query("record_steps"),
                {
                    "step": step,
                    "invoice_ids": [lease.invoice_id for lease in live],
                    "job_ids": [lease.job_id for lease in live],
                    "events": ["started" if lease.invoice_id in started else "skipped" for lease in live],
                },
            )

        return self._write_chunk(items, write, crumbs)

    def record_executed(self, step: str, leases: Sequence[Lease]) -> ChunkWrite[None]:
        """'executed' for a stage whose result is nothing to store (validation passed)."""
        return self._write_chunk([(lease, None) for lease in leases], lambda conn, lease, _: None, step=step)

    def record_step(self, lease: Lease, step: str, *, skipped: bool) -> None:
        """Breadcrumb: the step started (and moves processing_stage), or was fast-forwarded."""
        self._only(self.record_steps(step, [lease], set() if skipped else {lease.invoice_id}), lease)

    def count_step_executions(self, invoice_id: UUID | str, step: str) -> int:
        return int(self._scalar("count_step_executions", {"invoice_id": as_uuid(invoice_id), "step": step}))

    def done_ids(self, step: str, invoice_ids: Sequence[UUID]) -> set[UUID]:
        """Which of the invoices `step` has already done (its `done_<step>` query)."""
        with self.pool.connection() as conn:
            rows = conn.execute(query(f"done_{step}"), {"invoice_ids": list(invoice_ids)}).fetchall()
        return {row[0] for row in rows}

    def save_extracted_texts(
        self, items: Sequence[tuple[Lease, ExtractedText]], *, step: str | None = None
    ) -> ChunkWrite[None]:
        save = self._run("save_extracted_text")
        return self._write_chunk(items, lambda conn, lease, text: save(conn, lease, asdict(text)), step=step)

    def save_extracted_text(self, lease: Lease, extracted: ExtractedText) -> None:
        self._only(self.save_extracted_texts([(lease, extracted)]), lease)

    def load_extracted_texts(self, invoice_ids: Sequence[UUID]) -> dict[UUID, ExtractedText]:
        with self.pool.connection() as conn:
            with conn.cursor(row_factory=dict_row) as cur:
                rows = cur.execute(
                    query("load_extracted_texts"), {"invoice_ids": list(invoice_ids)}
                ).fetchall()
        return {row.pop("invoice_id"): ExtractedText(**row) for row in rows}

    def load_extracted_text(self, invoice_id: UUID | str) -> ExtractedText | None:
        return self.load_extracted_texts([as_uuid(invoice_id)]).get(as_uuid(invoice_id))

    def save_fields_of(
        self, items: Sequence[tuple[Lease, InvoiceFields]], *, step: str | None = None
    ) -> ChunkWrite[None]:
        save = self._run("save_fields")

        def write(conn: psycopg.Connection[Any], lease: Lease, fields: InvoiceFields) -> None:
            save(
                conn,
                lease,
                {
                    "fields": Jsonb(fields.to_json()),
                    "invoice_number": fields.invoice_number,
                    "document_type": fields.document_type,
                    "currency": fields.currency,
                    "payable_total": fields.payable_total,
                    "issue_date": fields.issue_date,
                    "seller_name": fields.seller_name,
                    "seller_vat_id": fields.seller_vat_id,
                },
            )

        return self._write_chunk(items, write, step=step)

    def save_fields(self, lease: Lease, fields: InvoiceFields) -> None:
        self._only(self.save_fields_of([(lease, fields)]), lease)

    def load_fields_of(self, invoice_ids: Sequence[UUID]) -> dict[UUID, InvoiceFields]:
        with self.pool.connection() as conn:
            rows = conn.execute(query("load_fields_of"), {"invoice_ids": list(invoice_ids)}).fetchall()
        return {row[0]: InvoiceFields.from_json(row[1]) for row in rows}

    def load_fields(self, invoice_id: UUID | str) -> InvoiceFields | None:
        return self.load_fields_of([as_uuid(invoice_id)]).get(as_uuid(invoice_id))

    def decide_duplicates(
        self, items: Sequence[tuple[Lease, MatchCandidate]], match: MatchFunction, *, step: str | None = None
    ) -> ChunkWrite[DuplicateDecision]:
        """Original, duplicate or suspected for each invoice, decided under the blocking keys' advisory locks.

        The locks come from the match rule (`domain/keys.py`): any two invoices the matcher
        could pair share one, so they decide one after the other, and the second sees the
        first. A chunk takes every lock of all its invoices first, in one sorted call, so two
        chunks never wait on each other in a cycle; each invoice then reads every original in
        its blocking key's neighbourhood (an index, no LIMIT) and its decision returns itself.
        Invoices of one chunk see each other's decisions: they share the transaction. The
        advisory locks are taken before the fence (the lock order, sql/0009): a chunk that waits
        for another decision holds no row meanwhile, so no claim, heartbeat or sweep queues
        behind the wait.
        """
        for lease, candidate in items:
            if candidate.key.org_id != candidate.org_id or candidate.invoice_id != str(lease.invoice_id):
                raise ValueError("the candidate is not the leased invoice of its org")
        by_invoice = {lease.invoice_id: candidate for lease, candidate in items}

        def take_locks(conn: psycopg.Connection[Any], leases: list[Lease]) -> None:
            ids = sorted(
                {
                    i
                    for lease in leases
                    for i in decision_lock_ids(
                        by_invoice[lease.invoice_id].block, by_invoice[lease.invoice_id].number
                    )
                }
            )
            conn.execute(query("take_dedupe_locks"), {"lock_ids": ids})

        def decide(
            conn: psycopg.Connection[Any], lease: Lease, candidate: MatchCandidate
        ) -> DuplicateDecision:
            rows = self._locked_candidates(conn, candidate)
            outcome = match(
                candidate,
                [
                    (r.id, r.org_id, InvoiceFields.from_json(r.fields))
                    for r in rows
                    if r.org_id == candidate.org_id
                ],
            )
            params: dict[str, Any] = {
                "invoice_id": lease.invoice_id,
                "org_id": candidate.org_id,
                **candidate.stored_keys,
            }
            if outcome is None:
                name = "mark_original"
            else:
                name = "mark_duplicate" if outcome.exact else "mark_suspected"
                params |= outcome.params()
            # None: decided already (a re-executed step); that decision stands.
            decided = self._one(conn, DuplicateDecision, name, params) or self._one(
                conn, DuplicateDecision, "load_duplicate_decision", {"invoice_id": lease.invoice_id}
            )
            assert decided is not None
            return decided

        return self._write_chunk(items, decide, step=step, before_fence=take_locks)

    def _locked_candidates(
        self, conn: psycopg.Connection[Any], candidate: MatchCandidate
    ) -> list[DuplicateCandidateRow]:
        """Takes the candidate's advisory locks, then reads every original of its org in its
        blocking key's neighbourhood (sql/0003): the read a duplicate decision is made on."""
        return self._all(
            conn,
            DuplicateCandidateRow,
            "locked_duplicate_candidates",
            {
                "lock_ids": list(decision_lock_ids(candidate.block, candidate.number)),
                "org_id": candidate.org_id,
                "invoice_id": UUID(candidate.invoice_id),
                "block_keys": list(search_ids(candidate.block)),
                "number_key": candidate.number.id,
            },
        )

    def decide_duplicate(
        self, lease: Lease, candidate: MatchCandidate, match: MatchFunction
    ) -> DuplicateDecision:
        return self._only(self.decide_duplicates([(lease, candidate)], match), lease)

    def load_duplicate_decisions(self, invoice_ids: Sequence[UUID]) -> dict[UUID, DuplicateDecision]:
        with self.pool.connection() as conn:
            found = self._all(
                conn, DuplicateDecision, "load_duplicate_decisions", {"invoice_ids": list(invoice_ids)}
            )
        return {d.invoice_id: d for d in found}

    def load_duplicate_decision(self, invoice_id: UUID | str) -> DuplicateDecision | None:
        return self.load_duplicate_decisions([as_uuid(invoice_id)]).get(as_uuid(invoice_id))

    def record_verdicts(
        self, items: Sequence[tuple[Lease, Verdict]], *, step: str | None = None
    ) -> ChunkWrite[None]:
        """The approval stage's results: approved, rejected (with the rule), or held for a person."""
        approve = self._run("save_approval")
        hold = self._run("hold_for_review")

        def write(conn: psycopg.Connection[Any], lease: Lease, verdict: Verdict) -> None:
            if verdict.decision == "held":
                if not verdict.reasons:
                    raise ValueError("a hold needs at least one reason")
                hold(conn, lease, {"reasons": list(verdict.reasons)})
            else:
                approve(conn, lease, {"decision": verdict.decision, "rule": verdict.rule})

        return self._write_chunk(items, write, step=step)

    def record_approval(self, lease: Lease, decision: Literal["approved", "rejected"], rule: str) -> Approval:
        self._only(self.record_verdicts([(lease, Verdict(decision, rule))]), lease)
        approval = self.load_approval(lease.invoice_id)
        assert approval is not None
        return approval

    def hold_for_review(self, lease: Lease, reasons: list[str]) -> None:
        """Neither approve nor reject: the invoice ends needs_review, and a person decides."""
        if not reasons:
            raise ValueError("a hold needs at least one reason")
        self._only(
            self.record_verdicts([(lease, Verdict("held", "; ".join(reasons), tuple(reasons)))]), lease
        )

    def review_reasons(self, invoice_id: UUID | str) -> list[str] | None:
        """Why the invoice is held for a person; None when it is not held."""
        return self._scalar("load_review_reasons", {"invoice_id": as_uuid(invoice_id)})

    def load_approvals(self, invoice_ids: Sequence[UUID]) -> dict[UUID, Approval]:
        with self.pool.connection() as conn:
            with conn.cursor(row_factory=dict_row) as cur:
                rows = cur.execute(query("load_approvals_of"), {"invoice_ids": list(invoice_ids)}).fetchall()
        return {row.pop("invoice_id"): Approval(**row) for row in rows}

    def load_approval(self, invoice_id: UUID | str) -> Approval | None:
        return self.load_approvals([as_uuid(invoice_id)]).get(as_uuid(invoice_id))

    def post_many(
        self, items: Sequence[tuple[Lease, Posting]], *, step: str | None = None
    ) -> ChunkWrite[None]:
        """Post once: a second post of an invoice changes nothing (UNIQUE invoice_id)."""
        post = self._run("post_to_ledger")
        return self._write_chunk(items, lambda conn, lease, p: post(conn, lease, asdict(p)), step=step)

    def post_to_ledger(self, lease: Lease, org_id: str, amount: Decimal, currency: str) -> LedgerPosting:
        self._only(self.post_many([(lease, Posting(org_id, amount, currency))]), lease)
        posting = self.load_ledger_posting(lease.invoice_id)
        assert posting is not None
        return posting

    def load_ledger_posting(self, invoice_id: UUID | str) -> LedgerPosting | None:
        with self.pool.connection() as conn:
            return self._one(conn, LedgerPosting, "load_ledger_posting", {"invoice_id": as_uuid(invoice_id)})

    def totals_by_currency(self, invoice_ids: Sequence[UUID]) -> list[CurrencyTotal]:
        with self.pool.connection() as conn:
            return self._all(conn, CurrencyTotal, "totals_by_currency", {"invoice_ids": list(invoice_ids)})

    # -- ending a job --------------------------------------------------------------------------

    def complete_many(self, leases: Sequence[Lease]) -> ChunkWrite[None]:
        """Release each lock as succeeded and mark its invoice processed (or needs_review), atomically."""
        processed = self._run("mark_processed")
        finish = self._run("finish_lock")

        def write(conn: psycopg.Connection[Any], lease: Lease, _: None) -> None:
            processed(conn, lease, {})
            finish(conn, lease, {"status": "succeeded", "error": None})

        return self._write_chunk([(lease, None) for lease in leases], write)

    def complete(self, lease: Lease) -> None:
        self._only(self.complete_many([lease]), lease)

    def quarantine_many(
        self, items: Sequence[tuple[Lease, Quarantine]], *, step: str | None = None
    ) -> ChunkWrite[None]:
        """Bad documents: keep them, say why, never retry them."""
        mark = self._run("mark_quarantined")
        finish = self._run("finish_lock")

        def write(conn: psycopg.Connection[Any], lease: Lease, q: Quarantine) -> None:
            mark(conn, lease, {"code": q.code, "reason": q.reason})
            finish(conn, lease, {"status": "failed", "error": f"quarantined: {q.code}: {q.reason}"})

        return self._write_chunk(items, write, step=step)

    def quarantine(self, lease: Lease, code: str, reason: str) -> None:
        self._only(self.quarantine_many([(lease, Quarantine(code, reason))]), lease)

    def fail(
        self, job_id: UUID | str, error: str, *, max_attempts: int, retry_base: timedelta
    ) -> Rescheduled | None:
        """Release a failed job at once (no waiting for the sweep) and schedule the invoice's retry.

        Unfenced on purpose: a failing holder may already have been swept, and then the
        finish changes nothing while the reschedule still applies (unless another job holds the
        invoice by now). In the lock order: the invoice row, then the job row. Still contended
        after the retries, it gives up (None): the caller stops heartbeating the lease, and the
        sweep releases it after its TTL.
        """
        job_id = as_uuid(job_id, "job_id")
        params = {"job_id": job_id, "status": "failed", "error": error}

        def release() -> Rescheduled | None:
            with self._transaction() as conn:
                row = conn.execute(query("lock_invoice_of_job"), params).fetchone()
                if row is None:
                    return None
                conn.execute(query("finish_lock"), params)
                rescheduled = self._reschedule(conn, [row[0]], max_attempts, retry_base, error)
            return rescheduled[0] if rescheduled else None

        return self._retrying_or_none(release, f"releasing job {job_id}")

    def reschedule_orphans(self, *, max_attempts: int, retry_base: timedelta) -> list[Rescheduled]:
        """Invoices left 'processing' with no running job (their holder was swept) get a retry or give up.

        Two statements: lock the orphans' rows (skipping any row someone holds), then reschedule
        those that still have no running job, read with a snapshot taken after the locks. A run
        whose claim committed in between is seen, and its invoice is left alone.
        """

        def reschedule() -> list[Rescheduled]:
            with self._transaction() as conn:
                locked = [r[0] for r in conn.execute(query("lock_orphans")).fetchall()]
                if not locked:
                    return []
                return self._reschedule(conn, locked, max_attempts, retry_base, None)

        return self._retrying(reschedule, "rescheduling orphans")

    def _reschedule(
        self,
        conn: psycopg.Connection[Any],
        locked_invoice_ids: list[UUID],
        max_attempts: int,
        retry_base: timedelta,
        error: str | None,
    ) -> list[Rescheduled]:
        """reschedule_failed for invoices whose rows this transaction has locked already."""
        return self._all(
            conn,
            Rescheduled,
            "reschedule_failed",
            {
                "invoice_ids": locked_invoice_ids,
                "max_attempts": max_attempts,
                "retry_base": retry_base,
                "error": error,
            },
        )

    # -- the sensor ----------------------------------------------------------------------------

    def claim_due_invoices(
        self, limit: int, request_timeout: timedelta | None = None, *, requested_by: RequestedBy = None
    ) -> list[DueInvoice]:
        """Due invoices not yet requested, marked requested; with request_timeout, also older requests.

        `requested_by` records whose run the requests wait for: an owner's text, or a function
        from the claimed invoices (in seq order) to each one's owner. Either way it is written
        in the claiming transaction, so no request exists without its owner.
        """
        if limit < 1:
            raise ValueError(f"limit must be positive, got {limit}")
        owner = requested_by if isinstance(requested_by, str) else None
        return self._retrying(
            lambda: self._claim_due(limit, request_timeout, requested_by, owner), "the due query"
        )

    def _claim_due(
        self, limit: int, request_timeout: timedelta | None, requested_by: RequestedBy, owner: str | None
    ) -> list[DueInvoice]:
        with self._transaction() as conn:
            due = sorted(
                self._all(
                    conn,
                    DueInvoice,
                    "claim_due_invoices",
                    {"limit": limit, "request_timeout": request_timeout, "requested_by": owner},
                ),
                key=lambda d: d.seq,
            )
            if due and callable(requested_by):
                owners = requested_by(due)
                ids = [d.invoice_id for d in due if d.invoice_id in owners]
                conn.execute(
                    query("assign_request_owners"),
                    {"invoice_ids": ids, "owners": [owners[i] for i in ids]},
                )
        return due

    def open_request_owners(self) -> list[OpenRequests]:
        with self.pool.connection() as conn:
            return self._all(conn, OpenRequests, "open_request_owners", {})

    def release_requests(
        self,
        owner: str,
        reason: str,
        *,
        count_attempt: bool,
        min_age: timedelta,
        max_attempts: int,
        retry_base: timedelta,
    ) -> list[Rescheduled]:
        """Free the unclaimed requests of `owner`, whose run ended or died (see release_requests)."""
        params = {
            "owner": owner,
            "reason": reason,
            "count_attempt": count_attempt,
            "min_age": min_age,
            "max_attempts": max_attempts,
            "retry_base": retry_base,
        }

        def release() -> list[Rescheduled]:
            with self._transaction() as conn:
                return self._all(conn, Rescheduled, "release_requests", params)

        return self._retrying(release, "releasing requests")

    def status_counts_of(self, invoice_ids: list[UUID]) -> dict[str, int]:
        with self.pool.connection() as conn:
            rows = conn.execute(query("status_counts_of"), {"invoice_ids": invoice_ids}).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def stale_requests(self, request_timeout: timedelta) -> list[UUID]:
        with self.pool.connection() as conn:
            rows = conn.execute(query("stale_requests"), {"request_timeout": request_timeout}).fetchall()
        return [r[0] for r in rows]

    def expire_requests(
        self, invoice_ids: list[UUID], request_timeout: timedelta, *, max_attempts: int, retry_base: timedelta
    ) -> list[Rescheduled]:
        """Count requests no run claimed as failed attempts, so the retry gets a new run key."""
        if not invoice_ids:
            return []
        params = {
            "invoice_ids": invoice_ids,
            "request_timeout": request_timeout,
            "max_attempts": max_attempts,
            "retry_base": retry_base,
        }

        def expire() -> list[Rescheduled]:
            with self._transaction() as conn:
                return self._all(conn, Rescheduled, "expire_requests", params)

        return self._retrying(expire, "expiring requests")

    # -- reading for people --------------------------------------------------------------------

    def status_summary(self) -> StatusSummary:
        with self.pool.connection() as conn:
            by_status: dict[str, int] = dict(conn.execute(query("count_by_status")).fetchall())
            by_stage: dict[str, int] = dict(conn.execute(query("count_by_stage")).fetchall())
            locks = conn.execute(query("lock_summary")).fetchone()
            dupes = conn.execute(query("duplicate_summary")).fetchone()
            attention = self._all(conn, AttentionItem, "attention_list", {})
        assert locks is not None and dupes is not None
        return StatusSummary(
            by_status,
            by_stage,
            locks[0],
            locks[1],
            locks[2],
            dupes[0],
            dupes[1],
            dupes[2],
            dupes[3],
            attention,
        )

    def invoice_overview(self, invoice_id: UUID | str) -> InvoiceOverview | None:
        with self.pool.connection() as conn:
            return self._one(conn, InvoiceOverview, "invoice_overview", {"invoice_id": as_uuid(invoice_id)})

    def frame(self, name: str, params: dict[str, Any] | None = None) -> pd.DataFrame:
        """A report query as a DataFrame, for the pandas report assets."""
        with self.pool.connection() as conn, conn.cursor() as cur:
            cur.execute(query(name), params or {})
            columns = [c.name for c in cur.description or []]
            return pd.DataFrame(cur.fetchall(), columns=columns)

    def offending_ids(self, check: str, params: dict[str, Any] | None = None) -> list[str]:
        """Ids that break an invariant (see the check_* queries); empty when it holds."""
        with self.pool.connection() as conn:
            return [r[0] for r in conn.execute(query(check), params or {}).fetchall()]

    def outcomes_of_org(self, org_id: str) -> list[InvoiceOutcome]:
        with self.pool.connection() as conn:
            return self._all(conn, InvoiceOutcome, "demo_outcomes", {"org_id": org_id})

    # -- review and redrive --------------------------------------------------------------------
    # A person's actions (invoice_pipeline/review.py). Each takes the invoice's processing lock
    # with the function a pipeline run acquires with, then writes fenced, in one transaction:
    # the invoice row locked, the change, its audit row, and the lock released. A review can
    # never race a running pipeline or another reviewer: whoever holds the lock goes first.

    def review_policies(self, org_ids: list[str]) -> dict[str, ReviewPolicy]:
        """Each org's review policy; an org without a row gets the default."""
        wanted = sorted(set(org_ids))
        with self.pool.connection() as conn:
            rows = conn.execute(query("review_policies"), {"org_ids": wanted}).fetchall()
        found = {str(r[0]): ReviewPolicy(r[1], r[2], r[3], r[4]) for r in rows}
        return {org: found.get(org, DEFAULT_POLICY) for org in wanted}

    def set_review_policy(self, org_id: str, policy: ReviewPolicy, updated_by: str) -> None:
        if not org_id or not org_id.strip():
            raise ValueError("org_id must be a non-empty string")
        params = {"org_id": org_id, "updated_by": updated_by, **asdict(policy)}
        with self._transaction() as conn:
            conn.execute(query("set_review_policy"), params)

    def review_targets(
        self,
        statuses: tuple[str, ...],
        *,
        invoice_ids: list[UUID] | None = None,
        org_id: str | None = None,
        reason: str | None = None,
        older_than: timedelta | None = None,
        limit: int = 10_000,
    ) -> list[ReviewTarget]:
        """Invoices in one of `statuses`, by id or by filter, the longest waiting first."""
        params = {
            "statuses": list(statuses),
            "invoice_ids": invoice_ids,
            "org_id": org_id,
            "reason": reason,
            "older_than": older_than,
            "limit": limit,
        }
        with self.pool.connection() as conn:
            return self._all(conn, ReviewTarget, "review_targets", params)

    def take_review_lock(self, invoice_id: UUID | str, owner: str) -> Lease | None:
        """The invoice's processing lock for a person's action; None when someone holds it.

        Not `acquire`: that one starts a processing attempt (status 'processing') and refuses
        finished invoices, while an action acts on exactly those and sets the status itself.
        """
        invoice_id = as_uuid(invoice_id)

        def take() -> Any:
            with self._transaction() as conn:
                return conn.execute(
                    query("acquire_review_lock"), {"invoice_id": invoice_id, "owner": owner}
                ).fetchone()

        row = self._retrying_or_none(take, f"the review lock of invoice {invoice_id}")
        if row is None or row[0] is None:
            return None
        return Lease(row[0], invoice_id, int(row[1]), owner)

    def review_approve(self, lease: Lease, actor: str, note: str | None) -> ActionOutcome:
        """Approved by a person: due again, so the pipeline runs on to post_to_ledger (once)."""

        def write(conn: psycopg.Connection[Any], target: LockedTarget) -> tuple[str, str] | str:
            if target.duplicate_status == "suspected":
                return (
                    f"it is a suspected duplicate of {target.duplicate_of}: approving would pay it twice; "
                    "decide that first with not-duplicate (then it continues) or confirm-duplicate"
                )
            gaps = posting_gaps(InvoiceFields.from_json(target.fields)) if target.fields else ["fields"]
            if gaps:
                return (
                    f"it has no {' and no '.join(g.removeprefix('a ') for g in gaps)}, which posting needs: "
                    "reject it and ask the seller for a corrected copy"
                )
            if not self._save_review_approval(
                conn, lease, "approved", self._said(f"approved by {actor}", note)
            ):
                return "it already has an approval decision"
            conn.execute(query("review_continue"), {"invoice_id": lease.invoice_id})
            return "pending", "approved: due now, the pipeline posts it"

        return self._review_write(lease, "approve", actor, note, write)

    def review_reject(self, lease: Lease, actor: str, reason: str) -> ActionOutcome:
        """Rejected by a person: finished, never posted."""

        def write(conn: psycopg.Connection[Any], target: LockedTarget) -> tuple[str, str] | str:
            if not self._save_review_approval(conn, lease, "rejected", f"rejected by {actor}: {reason}"):
                return "it already has an approval decision"
            conn.execute(query("review_close"), {"invoice_id": lease.invoice_id})
            return "processed", f"rejected: {reason}"

        return self._review_write(lease, "reject", actor, reason, write)

    def review_confirm_duplicate(self, lease: Lease, actor: str, note: str | None) -> ActionOutcome:
        """A suspected duplicate is one: it joins its original's group and is rejected, never posted."""

        def write(conn: psycopg.Connection[Any], target: LockedTarget) -> tuple[str, str] | str:
            if target.duplicate_status != "suspected":
                return "it is not a suspected duplicate"
            confirmed = self._said(f"confirmed by {actor}", note)
            row = conn.execute(
                query("review_confirm_duplicate"), {"invoice_id": lease.invoice_id, "confirmed": confirmed}
            ).fetchone()
            if row is None:
                raise RuntimeError(
                    f"invoice {lease.invoice_id}: its original {target.duplicate_of} is no original"
                )
            if not self._save_review_approval(conn, lease, "rejected", f"duplicate of {row[0]}, {confirmed}"):
                raise RuntimeError(f"invoice {lease.invoice_id} was held, yet it has an approval decision")
            conn.execute(query("review_close"), {"invoice_id": lease.invoice_id})
            return "processed", f"confirmed duplicate of {row[0]}: rejected, not posted"

        return self._review_write(lease, "confirm_duplicate", actor, note, write)

    def review_not_duplicate(
        self,
        lease: Lease,
        actor: str,
        note: str | None,
        match: Callable[[MatchCandidate, list[tuple[UUID, str, InvoiceFields]]], MatchOutcome | None],
    ) -> ActionOutcome:
        """Release a suspected duplicate as an original, under the duplicate decision's locks.

        The same advisory locks as `decide_duplicate` (from the invoice's blocking key), then the
        same candidate read, without the original the person dismissed: if no other original
        matches, the invoice becomes one (so later copies match against it); if another one
        does (it arrived since), the invoice stays held, suspected of that one instead.
        """

        def dedupe_locks_first(conn: psycopg.Connection[Any]) -> None:
            # The decision's advisory locks before any row (the lock order, sql/0009), from the
            # fields as they are now; the candidate read below takes them again (held: no wait),
            # from the fields read under the row lock.
            state = self._one(conn, InvoiceState, "invoice_state", {"invoice_id": lease.invoice_id})
            found = conn.execute(query("load_fields_of"), {"invoice_ids": [lease.invoice_id]}).fetchone()
            if state is None or found is None:
                return
            candidate = MatchCandidate.from_fields(
                str(lease.invoice_id), state.org_id, InvoiceFields.from_json(found[1])
            )
            conn.execute(
                query("take_dedupe_locks"),
                {"lock_ids": list(decision_lock_ids(candidate.block, candidate.number))},
            )

        def write(conn: psycopg.Connection[Any], target: LockedTarget) -> tuple[str, str] | str:
            if target.duplicate_status != "suspected" or target.fields is None:
                return "it is not a suspected duplicate"
            candidate = MatchCandidate.from_fields(
                str(lease.invoice_id), target.org_id, InvoiceFields.from_json(target.fields)
            )
            rows = self._locked_candidates(conn, candidate)
            others = [
                (r.id, r.org_id, InvoiceFields.from_json(r.fields))
                for r in rows
                if r.org_id == target.org_id and r.id != target.duplicate_of
            ]
            remaining = [r for r in target.review_reasons or [] if reason_code(r) != SUSPECTED_DUPLICATE]
            outcome = match(candidate, others)
            if outcome is None:
                row = conn.execute(
                    query("review_release_original"), {"invoice_id": lease.invoice_id, "remaining": remaining}
                ).fetchone()
                assert row is not None
                if row[0] == "pending":
                    return (
                        "pending",
                        f"not a duplicate of {target.duplicate_of}: an original now, due for the pipeline",
                    )
                return (
                    row[0],
                    f"not a duplicate of {target.duplicate_of}: an original now, still held for its other reasons",
                )
            suspicion = f"{SUSPECTED_DUPLICATE} of {outcome.original_id}: {'; '.join(outcome.reasons)}"
            conn.execute(
                query("review_resuspect"),
                {
                    "invoice_id": lease.invoice_id,
                    "review_reasons": [*remaining, suspicion],
                    **outcome.params(),
                },
            )
            return "needs_review", (
                f"not a duplicate of {target.duplicate_of}, but it looks like {outcome.original_id}: still held"
            )

        return self._review_write(lease, "not_duplicate", actor, note, write, before_fence=dedupe_locks_first)

    def requeue(self, lease: Lease, actor: str, note: str | None) -> ActionOutcome:
        """A redrive: attempts start over and the invoice is due now, under a new run key.

        A quarantined invoice is requeued after a fix, so what was read from it is read again.
        """

        def write(conn: psycopg.Connection[Any], target: LockedTarget) -> tuple[str, str] | str:
            if target.status == "quarantined":
                conn.execute(query("review_forget_extraction"), {"invoice_id": lease.invoice_id})
            row = conn.execute(
                query("review_requeue"),
                {"invoice_id": lease.invoice_id, "from_statuses": list(ACTION_FROM["requeue"])},
            ).fetchone()
            assert row is not None
            was = target.quarantine_code or target.last_error or ""
            return "pending", f"redrive {row[1]}: due now, attempts start over" + (
                f" (was: {was})" if was else ""
            )

        return self._review_write(lease, "requeue", actor, note, write)

    @staticmethod
    def _said(what: str, note: str | None) -> str:
        return f"{what}: {note}" if note else what

    def _save_review_approval(
        self, conn: psycopg.Connection[Any], lease: Lease, decision: str, rule: str
    ) -> bool:
        params = {"invoice_id": lease.invoice_id, "job_id": lease.job_id, "decision": decision, "rule": rule}
        return conn.execute(query("review_save_approval"), params).fetchone() is not None

    def _review_write(
        self,
        lease: Lease,
        action: Action,
        actor: str,
        note: str | None,
        write: Callable[[psycopg.Connection[Any], LockedTarget], tuple[str, str] | str],
        *,
        before_fence: Callable[[psycopg.Connection[Any]], None] | None = None,
    ) -> ActionOutcome:
        """Fenced: the invoice row locked and checked, `write`, the audit row, the lock released.

        `write` returns (new status, what happened), or a refusal (a string) before it wrote
        anything. Either way the lock is released in the same transaction; an exception rolls
        everything back and leaves the lock to the caller (review.py finishes it as failed).
        The fence locks the invoice row, then the job row (the lock order, sql/0009); a
        transaction that lost to contention is retried whole.
        """
        return self._retrying(
            lambda: self._review_write_once(lease, action, actor, note, write, before_fence),
            f"review {action} of invoice {lease.invoice_id}",
        )

    def _review_write_once(
        self,
        lease: Lease,
        action: Action,
        actor: str,
        note: str | None,
        write: Callable[[psycopg.Connection[Any], LockedTarget], tuple[str, str] | str],
        before_fence: Callable[[psycopg.Connection[Any]], None] | None,
    ) -> ActionOutcome:
        with self._fenced(lease, before_fence) as conn:
            target = self._one(
                conn, LockedTarget, "review_target_for_update", {"invoice_id": lease.invoice_id}
            )
            assert target is not None, "invoices are never deleted"
            allowed = ACTION_FROM[action]
            result = (
                write(conn, target)
                if target.status in allowed
                else f"it is {target.status}; {action} applies to {' or '.join(allowed)} invoices"
            )
            if isinstance(result, str):
                conn.execute(
                    query("finish_lock"),
                    {
                        "job_id": lease.job_id,
                        "status": "succeeded",
                        "error": f"review {action} refused: {result}",
                    },
                )
                return ActionOutcome(lease.invoice_id, action, False, target.status, target.status, result)
            to_status, detail = result
            conn.execute(
                query("insert_review_action"),
                {
                    "invoice_id": lease.invoice_id,
                    "job_id": lease.job_id,
                    "action": action,
                    "actor": actor,
                    "note": note,
                    "from_status": target.status,
                    "to_status": to_status,
                    "review_reasons": target.review_reasons,
                    "detail": detail,
                },
            )
            conn.execute(query("finish_lock"), {"job_id": lease.job_id, "status": "succeeded", "error": None})
            return ActionOutcome(lease.invoice_id, action, True, target.status, to_status, detail)

    def review_history(self, invoice_id: UUID | str) -> list[ReviewActionRecord]:
        with self.pool.connection() as conn:
            return self._all(conn, ReviewActionRecord, "review_history", {"invoice_id": as_uuid(invoice_id)})

    def review_queue_summary(self) -> list[ReviewQueueLine]:
        with self.pool.connection() as conn:
            return self._all(conn, ReviewQueueLine, "review_queue_summary", {})


def json_default(value: Any) -> Any:
    if isinstance(value, UUID | Decimal):
        return str(value)
    if isinstance(value, date | datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def dumps(value: Any) -> str:
    return json.dumps(value, default=json_default, indent=2)
