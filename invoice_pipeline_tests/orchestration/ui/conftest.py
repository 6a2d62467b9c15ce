"""One real `invoice-pipeline dev` (dagster dev: webserver, daemon, code server) for the UI tests.

Own process group, ephemeral port, temporary home and DAGSTER_HOME, Dagster storage in
PostgreSQL (a `<db>_dagster` database next to the test database). Stopped, whole group, also
when a test fails.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from invoice_pipeline.engine.store import InvoiceStore
from pipeline_support.helpers import (
    create_database,
    drop_database,
    free_port,
    start_dev_server,
    stop_process_group,
)


@dataclass(frozen=True)
class DevServer:
    port: int
    database_url: str
    home: Path
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="package")
def dev_server(
    server_url: str, template_database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DevServer]:
    database_url = create_database(server_url, template=template_database)
    home = tmp_path_factory.mktemp("dev-home")
    port = free_port()
    log = home / "dagster-dev.log"
    env = dict(
        os.environ,
        INVOICE_PIPELINE_HOME=str(home),
        INVOICE_PIPELINE_DATABASE_URL=database_url,
        # The tests launch retries themselves; the sensor must not race them to it.
        INVOICE_PIPELINE_RETRY_BASE_SECONDS="3600",
        DAGSTER_HOME=str(home / "dagster_home"),
    )
    proc = start_dev_server(env, port, log)
    server = DevServer(port, database_url, home, log)
    try:
        assert proc.poll() is None, log.read_text()[-3000:]
        yield server
    finally:
        stop_process_group(proc)
        drop_database(
            server_url, database_url.rsplit("/", 1)[0] + "/" + database_url.rsplit("/", 1)[1] + "_dagster"
        )
        drop_database(server_url, database_url)


@pytest.fixture
def dev_store(dev_server: DevServer) -> Iterator[InvoiceStore]:
    store = InvoiceStore(dev_server.database_url, max_size=2)
    yield store
    store.close()


def hide_from_sensor(database_url: str, invoice_id: object) -> None:
    """Mark an invoice as already requested, so only the test launches runs for it."""
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "UPDATE invoices SET requested_at = now() + interval '1 day' WHERE id = %s", (invoice_id,)
        )


__all__ = ["DevServer", "hide_from_sensor", "sql"]
