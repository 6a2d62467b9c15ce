"""The guard every test runs under (invoice_pipeline_tests/dagster_guard.py): a test that leaves a
Dagster instance entered fails at its own teardown, and the tests after it find none entered. Run
on a small suite in a pytest of its own, the guard its only plugin."""

from __future__ import annotations

import os
from pathlib import Path

from invoice_pipeline_tests.support import run_plugin_suite

SUITE = """
from dagster import DagsterInstance
from dagster._core.storage.defs_state.base import DefsStateStorage

KEPT = []  # the instance a test leaves entered stays alive, as a leaked one does in a real suite


def test_enters_an_instance_and_leaves_it() -> None:
    KEPT.append(DagsterInstance.local_temp().__enter__())
    assert DefsStateStorage.get() is not None  # entered: the suite means what it says


def test_after_it() -> None:
    # What every Definitions built in this test would resolve its state storage from.
    assert DefsStateStorage.get() is None, "the instance the test before left is still current"


def test_exits_its_instance() -> None:
    with DagsterInstance.local_temp():
        assert DefsStateStorage.get() is not None
"""


def test_a_test_that_leaves_an_instance_entered_fails_and_the_next_finds_none(tmp_path: Path) -> None:
    outcomes = run_plugin_suite(tmp_path, "invoice_pipeline_tests.dagster_guard", SUITE, os.environ)
    verdict, message = outcomes["test_enters_an_instance_and_leaves_it"]
    assert verdict == "error" and "left a Dagster instance entered" in message, outcomes
    assert outcomes["test_after_it"] == ("passed", ""), outcomes
    assert outcomes["test_exits_its_instance"] == ("passed", ""), outcomes
