"""Dagster's PostgreSQL storage with a connection pool in every process, not only the webserver's.

dagster-postgres opens a new connection for every write outside the webserver (SQLAlchemy
NullPool), so that many DagsterInstances in one process hold no idle connections. A run
worker writes an event for every step start, input, output, success and materialization: on
this machine each of those paid a backend start and a SCRAM authentication (~20 ms), which was
most of what Dagster cost per invoice (benchmarks/end_to_end: "Dagster DB connections per
invoice"). These classes do in every process what the webserver does for itself
(`optimize_for_webserver`): one pooled connection, a few more under load, recycled hourly.

dagster.yaml names them per storage (run, event log, schedule) with the same `postgres_url`
config as dagster-postgres' own classes; see invoice_pipeline.orchestration.dagster_home.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from dagster_postgres.event_log.event_log import PostgresEventLogStorage
from dagster_postgres.run_storage.run_storage import PostgresRunStorage
from dagster_postgres.schedule_storage.schedule_storage import PostgresScheduleStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config

if TYPE_CHECKING:
    # For the annotations only, so nothing private is imported at run time: dagster.yaml loads
    # a storage by `module`/`class` (public), but the class it loads must speak
    # ConfigurableClass, whose `inst_data` type Dagster 1.13 exports only from dagster._serdes
    # (dagster-postgres imports it from there too), and no public setting pools
    # dagster-postgres' connections outside the webserver.
    # invoice_pipeline_tests/orchestration/test_dagster_storage.py pins what this uses.
    from dagster._serdes import ConfigurableClassData

# The webserver's own defaults (dagster-webserver --db-statement-timeout, --db-pool-recycle,
# --db-pool-max-overflow), but with a small overflow: a run worker writes from one thread or two.
STATEMENT_TIMEOUT_MS = 15_000
POOL_RECYCLE_S = 3600
POOL_MAX_OVERFLOW = 4


class _Poolable(Protocol):
    def optimize_for_webserver(
        self, statement_timeout: int, pool_recycle: int, max_overflow: int
    ) -> None: ...


S = TypeVar("S", bound=_Poolable)


def _pooled(cls: type[S], inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]) -> S:
    storage = cls(  # type: ignore[call-arg]
        inst_data=inst_data,
        postgres_url=pg_url_from_config(config_value),
        should_autocreate_tables=config_value.get("should_autocreate_tables", True),
        token_provider=get_token_provider_from_config(config_value),
    )
    storage.optimize_for_webserver(STATEMENT_TIMEOUT_MS, POOL_RECYCLE_S, POOL_MAX_OVERFLOW)
    return storage


class PooledPostgresRunStorage(PostgresRunStorage):
    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> PooledPostgresRunStorage:
        return _pooled(cls, inst_data, config_value)


class PooledPostgresEventLogStorage(PostgresEventLogStorage):
    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> PooledPostgresEventLogStorage:
        return _pooled(cls, inst_data, config_value)


class PooledPostgresScheduleStorage(PostgresScheduleStorage):
    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> PooledPostgresScheduleStorage:
        return _pooled(cls, inst_data, config_value)
