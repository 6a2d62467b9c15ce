"""A guard every test runs under: it must leave no Dagster instance entered.

A pytest plugin: conftest.py imports its fixture to register it, and test_dagster_guard.py loads
it alone with `-p invoice_pipeline_tests.dagster_guard`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _no_dagster_instance_left_current() -> Iterator[None]:
    """A test must leave no Dagster instance entered. Entering one (a schedule context built
    without `with` enters an instance of its own) makes its defs-state storage Dagster's current
    one; once that instance is collected, every later Definitions in this worker fails with
    "Attempted to resolve undefined DagsterInstance weakref", far from the cause. Failed here, at
    the test that left it, and reset so that the tests after it are not failed too."""
    # Private to Dagster: the context variable that its DefsStateStorage.get() reads.
    from dagster._core.storage.defs_state.base import _current_storage

    yield
    left = _current_storage.get()
    if left is not None:
        _current_storage.set(None)
        pytest.fail(f"this test left a Dagster instance entered ({type(left).__name__} is current): exit it")
