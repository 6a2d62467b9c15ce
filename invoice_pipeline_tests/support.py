"""Shared test helpers: ports, databases, waiting on conditions (never on bare sleeps)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def create_database(server_url: str, template: str | None = None, prefix: str = "ip_test") -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        stmt = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            stmt = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
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


def db_seconds_since(url: str, ts_sql: str, params: tuple[object, ...] = ()) -> float:
    """Seconds between a timestamp in the database and the database clock now."""
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT extract(epoch FROM clock_timestamp() - ({ts_sql}))", params).fetchone()  # noqa: S608
        assert row is not None
        return float(row[0])


def stop_process_group(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM a child's whole process group (dagster dev and its children), SIGKILL if it lingers."""
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue
