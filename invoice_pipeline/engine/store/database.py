"""What every part of the store shares: the one connection pool, transactions, the fence,
retries on contention, and the fenced chunk writer.

Every query comes from `sql/queries/` by name, each part of the store reading its own file (this
one: fence.sql). Writes a pipeline step makes take a `Lease` and run fenced: in one transaction,
first the `fence` statement (the job must still be the running one), then the write. A swept
holder gets `LeaseLost` and has written nothing.
"""

from __future__ import annotations

import contextvars
import json
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, TypedDict, TypeVar
from uuid import UUID

import psycopg
from psycopg.rows import class_row
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from invoice_pipeline.config import DEFAULT_LOCK_TTL_SECONDS, validate_database_url
from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.engine.leases import LeaseLost
from invoice_pipeline.engine.records import ChunkWrite, Lease

log = logging.getLogger(__name__)
FENCE = QueryFile("fence")

T = TypeVar("T")
P = TypeVar("P")
R = TypeVar("R")
# The lease TTL of a store opened without one (tests, benchmarks): the project's default.
DEFAULT_LOCK_TTL = timedelta(seconds=DEFAULT_LOCK_TTL_SECONDS)
# A session idle inside a transaction this long is ended by the server, with its row and
# advisory locks. It must be shorter than the lease TTL (a third of the default 30 s; half of a
# shorter TTL): the sweep skips a job row locked by a write in flight as alive, so a holder
# frozen mid-write must lose its locks before its lease would be stale.
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


class StatementBatch:
    """The statements a chunk write's invoices queue (`Database.writer`), sent at its end with one
    `executemany` per statement, in the order each statement was first queued.

    Executed one by one they were most of a chunk write's cost: about 0.45 ms of client work
    each, six for every invoice of a chunk. A write that reads what it wrote (a duplicate
    decision) executes at once instead, and sees the queued ones only after the flush.
    """

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self._queued: dict[str, list[dict[str, Any]]] = {}

    def add(self, sql: str, params: dict[str, Any]) -> None:
        self._queued.setdefault(sql, []).append(params)

    def flush(self) -> None:
        with self.conn.cursor() as cur:
            for sql, rows in self._queued.items():
                cur.executemany(sql, rows)
        self._queued.clear()


# The batch of the chunk write running in this thread, if any.
_BATCH: contextvars.ContextVar[StatementBatch | None] = contextvars.ContextVar("chunk_batch", default=None)


def as_uuid(value: UUID | str, what: str = "invoice_id") -> UUID:
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        raise ValueError(f"{what} must be a UUID, got {value!r}") from None


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


# A cut link drops packets silently: without these a socket waits in TCP retransmission for
# many minutes. Each is derived from the store's lease TTL, so a
# holder notices a cut well within it: a connect gives up after a third of the TTL (libpq's
# floor: 2 s), unacknowledged data or unanswered keepalive probes close the socket after a
# third of the TTL (tcp_user_timeout), an idle connection is probed after a sixth of it. A
# parameter the URL sets itself wins.


def network_timeouts(database_url: str, lock_ttl: timedelta) -> dict[str, Any]:
    """libpq connection parameters (connect_timeout, keepalives, tcp_user_timeout) for a TTL."""
    ttl = lock_ttl.total_seconds()
    params: dict[str, Any] = {
        "connect_timeout": max(2, min(10, int(ttl / 3))),
        "keepalives": 1,
        "keepalives_idle": max(1, min(10, int(ttl / 6))),
        "keepalives_interval": max(1, min(5, int(ttl / 10))),
        "keepalives_count": 3,
        "tcp_user_timeout": max(1000, min(10_000, int(ttl * 1000 / 3))),
    }
    given = psycopg.conninfo.conninfo_to_dict(database_url)
    return {k: v for k, v in params.items() if k not in given}


def idle_in_transaction_ms(lock_ttl: timedelta) -> int:
    """The idle-in-transaction timeout for a store whose leases live `lock_ttl`: below it."""
    half = int(lock_ttl.total_seconds() * 1000) // 2
    return max(IDLE_IN_TRANSACTION_FLOOR_MS, min(IDLE_IN_TRANSACTION_MS, half))


class _DiagnosedPool(ConnectionPool):
    """A pool whose timeout says what it held when it gave up: every connection busy (work
    piling up, or a leak) reads differently from none opened (the server, or connecting)."""

    def getconn(self, timeout: float | None = None) -> psycopg.Connection[Any]:
        try:
            return super().getconn(timeout)
        except PoolTimeout as exc:
            raise PoolTimeout(f"{exc}; the pool then: {pool_state(self.get_stats())}") from exc


def pool_state(stats: dict[str, int]) -> str:
    """psycopg_pool's counters (`get_stats`, which leaves out the zero ones) as one sentence."""

    def n(key: str) -> int:
        return stats.get(key, 0)

    return (
        f"{n('pool_size')} of {n('pool_max')} connections (open or being opened), "
        f"{n('pool_available')} idle, {n('requests_waiting')} requests waiting; "
        f"{n('connections_num')} attempts to connect, {n('connections_errors')} failed, "
        f"{n('connections_lost')} connections lost"
    )


class DatabaseOptions(TypedDict, total=False):
    """Database's keyword arguments, which InvoiceStore passes on as they are given."""

    min_size: int
    max_size: int
    lock_ttl: timedelta
    lock_timeout: timedelta


class Database:
    """The one pool, the heartbeat connection, and what every part of the store writes and reads
    through: transactions, the fence, contention retries and fenced chunk writes.

    Each part (engine/store/__init__.py) is built over the store's one Database and passes it
    the text of its own queries: the statements stay with their part, the pool and the
    protocol of a write stay here.
    """

    def __init__(
        self,
        database_url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        lock_ttl: timedelta = DEFAULT_LOCK_TTL,
        lock_timeout: timedelta = timedelta(milliseconds=LOCK_TIMEOUT_MS),
    ) -> None:
        self.database_url = validate_database_url(database_url)
        # The lease TTL, set once, when the store is opened (config.Settings checked it): the
        # sweep frees a lease whose heartbeat is older, and the timeouts below stay under it.
        self.lock_ttl = lock_ttl
        self.idle_in_transaction_ms = idle_in_transaction_ms(lock_ttl)
        # A worker frozen inside a fenced write holds its rows; the server ends that session
        # before its lease would go stale. No wait for a lock is unbounded.
        options = (
            f"-c idle_in_transaction_session_timeout={self.idle_in_transaction_ms} "
            f"-c lock_timeout={int(lock_timeout.total_seconds() * 1000)}"
        )
        self._connect_kwargs: dict[str, Any] = {"autocommit": True, "options": options}
        self._connect_kwargs.update(network_timeouts(self.database_url, lock_ttl))
        # The heartbeat statement never waits for a lock (SKIP LOCKED): one that runs longer than
        # a third of the TTL is cut off by the server, and the keeper beats again.
        beat_ms = max(1000, min(10_000, int(self.idle_in_transaction_ms * 2 / 3)))
        self._heartbeat_kwargs = self._connect_kwargs | {
            "options": f"{options} -c statement_timeout={beat_ms}"
        }
        self.pool = _DiagnosedPool(
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

    def heartbeat_rows(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """`sql` on the heartbeat connection (opened here, see above), never the pool's."""
        with self._heartbeat_lock:
            try:
                if self._heartbeat_conn is None or self._heartbeat_conn.closed:
                    self._heartbeat_conn = psycopg.connect(self.database_url, **self._heartbeat_kwargs)
                return self._heartbeat_conn.execute(sql, params).fetchall()
            except psycopg.Error:
                if self._heartbeat_conn is not None:
                    self._heartbeat_conn.close()
                    self._heartbeat_conn = None
                raise

    # -- plumbing ------------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        with self.pool.connection() as conn, conn.transaction():
            yield conn

    def _count_contention(self, what: str) -> None:
        with self._contention_lock:
            self.contention[what] += 1

    def retrying(self, work: Callable[[], T], what: str) -> T:
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

    def retrying_or_none(self, work: Callable[[], T], what: str) -> T | None:
        """`retrying`, but None once contention outlasts the retries: the caller treats it as
        a bounce (not taken, busy), never as the database's failure."""
        try:
            return self.retrying(work, what)
        except psycopg.Error as exc:
            if not is_contention(exc):
                raise
            return None

    @contextmanager
    def fenced(
        self, lease: Lease, before_fence: Callable[[psycopg.Connection[Any]], None] | None = None
    ) -> Iterator[psycopg.Connection[Any]]:
        """A transaction that holds lease's invoice row and job row locked, or raises LeaseLost.

        `before_fence` runs first in the transaction: whatever it waits for (dedupe advisory
        locks), it waits holding no row, so nobody queues behind the wait.
        """
        with self.transaction() as conn:
            if before_fence is not None:
                before_fence(conn)
            row = conn.execute(
                FENCE["fence"], {"job_id": lease.job_id, "invoice_id": lease.invoice_id}
            ).fetchone()
            if row is None:
                raise LeaseLost(lease.job_id, lease.invoice_id, self._why_not_running(conn, lease.job_id))
            yield conn
            self._beat_at_commit(conn, [lease.job_id])

    @staticmethod
    def _beat_at_commit(conn: psycopg.Connection[Any], job_ids: list[UUID]) -> None:
        """The last statement of a fenced write: whatever the write waited for after its fence
        (a row, up to lock_timeout), its jobs leave it with a fresh heartbeat (see fence.sql)."""
        if job_ids:
            conn.execute(FENCE["beat_at_commit"], {"job_ids": job_ids})

    def _why_not_running(self, conn: psycopg.Connection[Any], job_id: UUID) -> str:
        row = conn.execute(FENCE["job_status"], {"job_id": job_id}).fetchone()
        if row is None:
            return "no such job"
        return f"job is {row[0]}" + (f": {row[1]}" if row[1] else "")

    # The helpers below take a statement's text: each part passes it from its own SQL file.

    def fetch_one(
        self, conn: psycopg.Connection[Any], cls: type[T], sql: str, params: dict[str, Any]
    ) -> T | None:
        with conn.cursor(row_factory=class_row(cls)) as cur:
            return cur.execute(sql, params).fetchone()

    def fetch_all(
        self, conn: psycopg.Connection[Any], cls: type[T], sql: str, params: dict[str, Any]
    ) -> list[T]:
        with conn.cursor(row_factory=class_row(cls)) as cur:
            return cur.execute(sql, params).fetchall()

    def scalar(self, sql: str, params: dict[str, Any]) -> Any:
        with self.pool.connection() as conn:
            row = conn.execute(sql, params).fetchone()
            return None if row is None else row[0]

    # -- fenced writes, a chunk at a time -------------------------------------------------------
    #
    # A stage writes its results for a whole chunk in one transaction, behind one fence
    # statement for all the chunk's leases (fence_chunk). An invoice whose job is no longer
    # running gets nothing written and is reported lost; one whose write the database refuses
    # (bad data) is isolated: the chunk is written again an invoice at a time, so it alone fails.
    # A write that lost to contention (a deadlock, a lock timeout) is retried a few times, then
    # isolated the same way: only the invoices that still lose fail.
    # The single-invoice methods are chunks of one that raise instead of reporting.

    def write_chunk(
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
            return self.retrying(
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
            one = self.write_chunk([item], write, prepare, step=step, before_fence=before_fence)
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
        with self.transaction() as conn:
            if before_fence is not None:
                before_fence(conn, [lease for lease, _ in items])
            rows = conn.execute(FENCE["fence_chunk"], {"job_ids": [lease.job_id for lease, _ in items]})
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
                    FENCE["record_executed"],
                    {
                        "step": step,
                        "invoice_ids": [lease.invoice_id for lease, _ in live],
                        "job_ids": [lease.job_id for lease, _ in live],
                    },
                )
            batch = StatementBatch(conn)
            token = _BATCH.set(batch)
            try:
                written = {lease.invoice_id: write(conn, lease, payload) for lease, payload in live}
            finally:
                _BATCH.reset(token)
            # A row the database refuses fails the whole transaction here, as it would have
            # failed it at its own statement: the chunk is then written an invoice at a time.
            batch.flush()
            self._beat_at_commit(conn, [lease.job_id for lease, _ in live])
            return ChunkWrite(written, lost, {})

    @staticmethod
    def only(result: ChunkWrite[R], lease: Lease) -> R:
        """The one invoice's result of a chunk of one; LeaseLost, or its error, raised."""
        if lease.invoice_id in result.lost:
            raise LeaseLost(lease.job_id, lease.invoice_id, result.lost[lease.invoice_id])
        if lease.invoice_id in result.failed:
            raise result.failed[lease.invoice_id]
        return result.written[lease.invoice_id]

    def writer(self, sql: str) -> Callable[[psycopg.Connection[Any], Lease, dict[str, Any]], None]:
        """A write that is one named statement with the lease's ids and the given parameters:
        queued in the chunk write's batch (`StatementBatch`), or executed at once outside one."""

        def write(conn: psycopg.Connection[Any], lease: Lease, params: dict[str, Any]) -> None:
            values = {"invoice_id": lease.invoice_id, "job_id": lease.job_id, **params}
            batch = _BATCH.get()
            if batch is not None and batch.conn is conn:
                batch.add(sql, values)
            else:
                conn.execute(sql, values)

        return write


def json_default(value: Any) -> Any:
    if isinstance(value, UUID | Decimal):
        return str(value)
    if isinstance(value, date | datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def dumps(value: Any) -> str:
    return json.dumps(value, default=json_default, indent=2)
