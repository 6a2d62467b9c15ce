"""Pins the private Dagster API the pooled storage (orchestration/dagster_storage.py) rests on.

Dagster exports ConfigurableClassData only from `dagster._serdes`. An upgrade that moves or
changes it, or the dagster-postgres constructor and pooling call the pooled classes use, fails
here first, by name, instead of at the first `dagster.yaml` load.
"""

from __future__ import annotations

import inspect
from typing import Any, get_type_hints

import dagster
import pytest
from dagster_postgres.event_log.event_log import PostgresEventLogStorage
from dagster_postgres.run_storage.run_storage import PostgresRunStorage
from dagster_postgres.schedule_storage.schedule_storage import PostgresScheduleStorage

from invoice_pipeline.orchestration import dagster_storage
from invoice_pipeline.orchestration.dagster_home import DAGSTER_YAML

PARENTS = (PostgresRunStorage, PostgresEventLogStorage, PostgresScheduleStorage)


def test_the_private_import_is_checked_against_this_dagster() -> None:
    assert dagster.__version__ == "1.13.27", (
        "Dagster was upgraded: check whether it now exports ConfigurableClassData publicly "
        "(then import it from there in orchestration/dagster_storage.py), and that the pins below hold"
    )
    assert "ConfigurableClassData" not in dir(dagster), "now public: import it from dagster"
    from dagster._serdes import ConfigurableClass, ConfigurableClassData

    # dagster_storage imports it for its annotations only (under TYPE_CHECKING: mypy checks the
    # name there); here, that it is the type dagster-postgres' storages take as inst_data.
    assert "ConfigurableClassData" not in vars(dagster_storage), "imported at run time again"
    for parent in PARENTS:
        assert get_type_hints(parent.from_config_value)["inst_data"] == ConfigurableClassData | None
        assert get_type_hints(
            getattr(dagster_storage, f"Pooled{parent.__name__}").from_config_value,
            vars(dagster_storage) | {"ConfigurableClassData": ConfigurableClassData},
        )["inst_data"] == (ConfigurableClassData | None)
    assert ConfigurableClassData._fields == ("module_name", "class_name", "config_yaml")
    assert all(issubclass(parent, ConfigurableClass) for parent in PARENTS)


@pytest.mark.parametrize("parent", PARENTS, ids=lambda c: c.__name__)
def test_dagster_postgres_takes_what_the_pooled_classes_pass(parent: Any) -> None:
    init = inspect.signature(parent.__init__).parameters
    assert {"inst_data", "postgres_url", "should_autocreate_tables", "token_provider"} <= set(init)
    pooling = inspect.signature(parent.optimize_for_webserver).parameters
    assert list(pooling) == ["self", "statement_timeout", "pool_recycle", "max_overflow"]
    assert list(inspect.signature(parent.from_config_value).parameters) == ["inst_data", "config_value"]


def test_dagster_yaml_names_the_pooled_classes_where_they_live() -> None:
    for name in (
        "PooledPostgresRunStorage",
        "PooledPostgresEventLogStorage",
        "PooledPostgresScheduleStorage",
    ):
        assert issubclass(getattr(dagster_storage, name), PARENTS)
        assert f"class: {name}" in DAGSTER_YAML
    assert DAGSTER_YAML.count(f"module: {dagster_storage.__name__}\n") == 3
