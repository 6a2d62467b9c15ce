"""The needs_tool marker (invoice_pipeline_tests/tools.py): a test whose tool is missing is skipped
with its reason, except under CI, where the skip is a failure naming the tool. Run on a small
suite in a pytest of its own, with and without CI=true."""

from __future__ import annotations

import os
from pathlib import Path

from invoice_pipeline_tests.support import run_plugin_suite

SUITE = """
import pytest

from invoice_pipeline_tests.tools import needs_tool


@needs_tool("frobnicator", "frobnicator not installed (Debian: frobnicator)")
def test_missing_tool() -> None:
    raise AssertionError("a test whose tool is missing must not run")


@needs_tool("pg_frob")
def test_found_missing_while_running() -> None:
    pytest.skip("no pg_frob of PostgreSQL 99 here")


@needs_tool("true", None)
def test_tool_present() -> None:
    assert True


def test_unmarked_skip() -> None:
    pytest.skip("not a tool: the corpus is absent")
"""


def run_suite(tmp_path: Path, ci: str | None) -> dict[str, tuple[str, str]]:
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": ci} if ci is not None else {})
    return run_plugin_suite(tmp_path, "invoice_pipeline_tests.tools", SUITE, env)


def test_under_ci_a_missing_tool_fails_the_test_and_names_the_tool(tmp_path: Path) -> None:
    outcomes = run_suite(tmp_path, "true")
    # Missing before the test starts: an error in its set-up, naming the tool and how to get it.
    verdict, message = outcomes["test_missing_tool"]
    assert verdict == "error" and "needs frobnicator" in message and "Debian: frobnicator" in message, (
        outcomes
    )
    # Found missing only while running: the test's own skip fails it.
    verdict, message = outcomes["test_found_missing_while_running"]
    assert verdict == "failure" and "pg_frob" in message, outcomes
    assert outcomes["test_tool_present"] == ("passed", ""), outcomes
    # A skip that is not about a tool stays a skip.
    assert outcomes["test_unmarked_skip"][0] == "skipped", outcomes


def test_outside_ci_a_missing_tool_is_a_skip_with_its_reason(tmp_path: Path) -> None:
    outcomes = run_suite(tmp_path, None)
    assert outcomes["test_missing_tool"] == (
        "skipped",
        "needs frobnicator: frobnicator not installed (Debian: frobnicator)",
    ), outcomes
    assert outcomes["test_found_missing_while_running"] == ("skipped", "no pg_frob of PostgreSQL 99 here"), (
        outcomes
    )
    assert outcomes["test_tool_present"] == ("passed", ""), outcomes
    assert outcomes["test_unmarked_skip"][0] == "skipped", outcomes
