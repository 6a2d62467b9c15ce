"""A pool that gives up says what it held: all busy, or none opened (issue 38's unexplained
`PoolTimeout` in a forked `process` worker left nothing to tell the two apart)."""

from __future__ import annotations

import re
import socket

import pytest
from psycopg_pool import PoolTimeout

from invoice_pipeline.engine.store import InvoiceStore
from pipeline_support.helpers import wait_for


def test_a_timeout_with_every_connection_busy_says_so(database_url: str) -> None:
    store = InvoiceStore(database_url, min_size=1, max_size=1)
    try:
        held = store.database.pool.getconn()
        with pytest.raises(PoolTimeout) as timed_out:
            store.database.pool.getconn(timeout=0.2)
        message = str(timed_out.value)
        assert "1 of 1 connections (open or being opened), 0 idle" in message, message
        assert "1 attempts to connect, 0 failed" in message, message
        store.database.pool.putconn(held)
    finally:
        store.close()


def test_a_timeout_with_no_server_to_connect_to_says_so() -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = InvoiceStore(f"postgresql://nobody@127.0.0.1:{port}/none", min_size=1, max_size=2)
    try:
        wait_for(lambda: store.database.pool.get_stats().get("connections_errors", 0) >= 1, timeout=30)
        with pytest.raises(PoolTimeout) as timed_out:
            store.database.pool.getconn(timeout=0.1)
        message = str(timed_out.value)
        attempts = re.search(r"(\d+) attempts to connect, (\d+) failed", message)
        assert attempts is not None, message
        assert int(attempts[1]) == int(attempts[2]) >= 1, message  # every attempt failed
    finally:
        store.close()
