"""Helpers the tests, benchmarks and chaos scenarios share: ports, databases, child processes,
waiting on conditions (never on bare sleeps)."""

from __future__ import annotations

import fcntl
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

T = TypeVar("T")


# Ports handed out for servers: below Linux's ephemeral range (32768-60999), so no outgoing
# connection (a test's thousands of PostgreSQL connections) can take one between free_port and the
# server's bind. Each is reserved machine-wide for RESERVED_SECONDS by a file in PORT_RESERVATIONS,
# so parallel test workers (and other sessions on the machine) never get the same one while its
# server is still starting. Chosen at random: few collisions to skip.
SERVER_PORTS = range(20_000, 32_000)
PORT_RESERVATIONS = Path(tempfile.gettempdir()) / "invoice-pipeline-ports"
RESERVED_SECONDS = 1800.0  # longer than any server here takes to bind the port it was given


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A loopback TCP port nothing listens on, given to no other caller for RESERVED_SECONDS."""
    PORT_RESERVATIONS.mkdir(mode=0o1777, exist_ok=True)
    with open(PORT_RESERVATIONS / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one chooser at a time: check and reserve are one step
        for _ in range(10_000):
            port = random.randrange(SERVER_PORTS.start, SERVER_PORTS.stop)
            mark = PORT_RESERVATIONS / str(port)
            try:
                if time.time() - mark.stat().st_mtime < RESERVED_SECONDS:
                    continue
            except FileNotFoundError:
                pass
            if _bindable(port):
                mark.write_text(f"{os.getpid()}\n")
                return port
    raise RuntimeError(f"no free port in {SERVER_PORTS} (reservations in {PORT_RESERVATIONS})")


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def create_database(server_url: str, template: str | None = None, prefix: str = "ip_test") -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    # FILE_COPY, not PostgreSQL 15's default WAL_LOG, which writes every block of the template
    # (9 MB of catalogs and schema) through the WAL and leaves a database whose first connection
    # costs more. Measured on the test server (2026-12-05, the server's and the client's CPU per
    # database): create 41-68 -> 12-13 ms, first connection 26-46 -> 8-9 ms; once per test, so
    # about 90 CPU-seconds of `make test` by estimate. FILE_COPY's two checkpoints are cheap on a
    # test server without fsync and with little else dirty.
    stmt = sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
        sql.Identifier(name), sql.Identifier(template or "template1")
    )
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(stmt)
    return with_database(server_url, name)


def drop_database(server_url: str, url: str) -> None:
    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def wait_for(
    condition: Callable[[], T], *, timeout: float = 30.0, interval: float = 0.02, what: str = "condition"
) -> T:
    """Poll until condition() is truthy; fail loudly with what we waited for."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def stop_process_group(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM a child's whole process group (dagster dev and its children), SIGKILL if it lingers."""
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(wait)
            break
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue
    # The leader may exit before its children (webserver, daemon, code server): no stragglers.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def serve_asgi(app: Any) -> Iterator[str]:
    """An ASGI app (the review page) served by uvicorn in a thread on a free loopback port; yields
    its base URL once it listens, stops it afterwards."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", proxy_headers=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=60, interval=0.05, what="the page to listen")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def start_cli_server(
    args: list[str], env: dict[str, str], log: Path, url: str, *, timeout: float, interval: float = 0.5
) -> subprocess.Popen[bytes]:
    """`invoice-pipeline ARGS` in its own process group, once `url` answers or it has exited.

    The caller checks `poll()` (an exit means it failed; the log says why) and stops it with
    stop_process_group.
    """
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "invoice_pipeline.cli", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(
            lambda: proc.poll() is not None or answers(url),
            timeout=timeout,
            interval=interval,
            what=f"invoice-pipeline {args[0]} to answer {url}",
        )
    except BaseException:
        stop_process_group(proc)
        raise
    return proc


def start_dev_server(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    """`invoice-pipeline dev`, once /server_info answers or it has exited (start_cli_server). Its
    review page gets a free port too: two dev servers at once (parallel tests) must not clash."""
    return start_cli_server(
        ["dev", "--port", str(port), "--review-port", str(free_port())],
        env,
        log,
        f"http://127.0.0.1:{port}/server_info",
        timeout=180,
    )


def run_cli(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`invoice-pipeline ARGS` as a subprocess, as a person runs it; output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "invoice_pipeline.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextmanager
def cli_environment(home: Path, database_url: str, **settings: str) -> Iterator[dict[str, str]]:
    """The environment `invoice-pipeline` runs with in a test: its own home on `database_url`,
    plus `settings` (INVOICE_PIPELINE_*=...). The Dagster database the CLI creates beside the
    invoice database (`<db>_dagster`) is dropped afterwards."""
    values = dict(os.environ, INVOICE_PIPELINE_HOME=str(home), INVOICE_PIPELINE_DATABASE_URL=database_url)
    for inherited in ("DAGSTER_HOME", "DAGSTER_PG_URL"):  # the CLI sets both for its own home
        values.pop(inherited, None)
    values.update(settings)
    try:
        yield values
    finally:
        server, name = database_url.rsplit("/", 1)
        with psycopg.connect(server + "/postgres", autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name + "_dagster"))
            )


def hold_text_rows(url: str, invoice_ids: list[str]) -> psycopg.Connection[Any]:
    """A connection holding an uncommitted `extracted_texts` row for each invoice: whoever saves
    one of their texts waits there (up to its lock timeout, then retries) until the connection
    rolls back or closes, its leases held. So a kill or a cut lands mid-chunk on any machine.
    Replica mode: no foreign-key check share-locks the invoice's row (a run's claim, FOR UPDATE
    SKIP LOCKED, would pass a share-locked invoice over)."""
    holder = psycopg.connect(url)
    holder.execute("SET session_replication_role = replica")
    with holder.cursor() as cur:
        cur.executemany(
            "INSERT INTO extracted_texts (invoice_id, job_id, format, method, text)"
            " VALUES (%s, gen_random_uuid(), 'held', 'test-holder', '')",
            [(i,) for i in invoice_ids],
        )
    return holder


def blocks_someone(url: str, pid: int) -> bool:
    """Whether some session waits for a lock the session `pid` holds."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid)))", (pid,)
        ).fetchone()
    return bool(row and row[0])
