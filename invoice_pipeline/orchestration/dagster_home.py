"""The Dagster instance: dagster-postgres storage in the same PostgreSQL server, its own database."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from invoice_pipeline.config import ENV_DAGSTER_HOME, Settings
from invoice_pipeline.db.embedded import create_database_if_missing
from invoice_pipeline.engine.runs import RunShape

ENV_DAGSTER_PG_URL = "DAGSTER_PG_URL"

# The URL is read from the environment, so no password is ever written to disk.
# `postgresql+psycopg2`: with psycopg 3 installed too, a plain postgresql:// URL makes SQLAlchemy
# pick psycopg 3, and the daemon then fails on every NOTIFY it sends.
DAGSTER_YAML = """\
# Written by invoice-pipeline. Storage: PostgreSQL, URL from $DAGSTER_PG_URL, through
# dagster-postgres' classes with a connection pool in every process
# (invoice_pipeline.orchestration.dagster_storage).
run_storage:
  module: invoice_pipeline.orchestration.dagster_storage
  class: PooledPostgresRunStorage
  config:
    postgres_url:
      env: DAGSTER_PG_URL
event_log_storage:
  module: invoice_pipeline.orchestration.dagster_storage
  class: PooledPostgresEventLogStorage
  config:
    postgres_url:
      env: DAGSTER_PG_URL
schedule_storage:
  module: invoice_pipeline.orchestration.dagster_storage
  class: PooledPostgresScheduleStorage
  config:
    postgres_url:
      env: DAGSTER_PG_URL
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    max_concurrent_runs: {max_concurrent_runs}
    # A queued run waits for the next dequeue: every second, not Dagster's default 5 s (a
    # trickle's drop-to-posted latency; the query is on the run storage's index).
    dequeue_interval_seconds: 1
run_monitoring:
  enabled: true
  start_timeout_seconds: 180
  poll_interval_seconds: 30
# A run whose worker crashed is retried by Dagster; a run that failed on an op is not:
# invoice-level retries (with backoff and a dead-letter state) belong to the sweep schedule.
run_retries:
  enabled: true
  max_retries: 2
  retry_on_asset_or_op_failure: false
# The sensor ticks every 5 s: its skipped ticks (nothing due) are kept one day, not the default week.
retention:
  sensor:
    purge_after_days:
      skipped: 1
      failure: 30
      success: -1
telemetry:
  enabled: false
nux:
  enabled: false
"""


def dagster_database_url(database_url: str, name: str | None = None) -> str:
    """Same server, database `name` (default `<invoice db>_dagster`), in the form dagster-postgres needs.

    Two independent deployments on one invoice database need two names: each Dagster instance
    keeps its own runs, schedules and daemon heartbeats.
    """
    parts = urlsplit(database_url)
    name = name or f"{parts.path.lstrip('/') or 'postgres'}_dagster"
    return urlunsplit(parts._replace(scheme="postgresql+psycopg2", path=f"/{name}"))


def import_instance_classes() -> None:
    """Import what DagsterInstance.get() loads for dagster.yaml (the storage classes, SQLAlchemy
    under them, the run coordinator) without opening anything: a process about to fork workers
    imports them once instead of each worker importing them on its own (1.4 s each, side by
    side on two cores)."""
    from dagster import QueuedRunCoordinator  # noqa: F401

    from invoice_pipeline.orchestration import dagster_storage  # noqa: F401


def prepare_dagster_home(settings: Settings, database_url: str) -> Path:
    """Create the Dagster database and dagster.yaml; export DAGSTER_HOME and DAGSTER_PG_URL."""
    dagster_url = dagster_database_url(database_url, settings.dagster_database_name)
    created = create_database_if_missing(database_url, urlsplit(dagster_url).path.lstrip("/"))
    home = settings.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    concurrent = RunShape(settings.batch_size).concurrent_runs
    (home / "dagster.yaml").write_text(DAGSTER_YAML.format(max_concurrent_runs=concurrent))
    os.environ[ENV_DAGSTER_HOME] = str(home)
    os.environ[ENV_DAGSTER_PG_URL] = dagster_url
    if created:
        # Dagster creates its tables when an instance first opens its storage, and the run
        # storage's id (the scope every request owner is stamped with, request_owner.py) when
        # it is first asked. Done here, once, before anything forks: `process`'s workers did
        # both side by side. The tables took twice as long; the id is a read-then-insert, so
        # two workers could each insert their own, stamp requests with the one nobody else
        # reads, and leave them to the hour-long request timeout.
        from dagster import DagsterInstance

        from invoice_pipeline.orchestration.request_owner import instance_scope

        with DagsterInstance.get() as instance:
            instance_scope(instance)
    return home
