"""The needs_tool marker (invoice_pipeline_tests/tools.py): a test whose tool is missing is skipped
with its reason, except under CI, where the skip is a failure naming the tool. Run on a small
suite in a pytest of its own, with and without CI=true."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

from invoice_pipeline_tests.conftest import ROOT

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
VERDICTS = ("failure", "error", "skipped")


def run_suite(tmp_path: Path, ci: str | None) -> dict[str, tuple[str, str]]:
    """Each test's outcome (passed, failed, error or skipped) and its message, by test name."""
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": ci} if ci is not None else {})
    # Only this plugin: the installed ones (hypothesis, xdist, Dagster's ...) cost seconds to load.
    env |= {"PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "invoice_pipeline_tests.tools", "-p", "no:cacheprovider",
         "-W", "ignore::pytest.PytestUnknownMarkWarning", "--junitxml", "report.xml", "test_suite.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (tmp_path / "report.xml").exists(), done.stdout + done.stderr
    outcomes: dict[str, tuple[str, str]] = {}
    for case in ElementTree.parse(tmp_path / "report.xml").iter("testcase"):
        verdicts = [(child.tag, child.get("message", "")) for child in case if child.tag in VERDICTS]
        outcomes[case.get("name", "")] = verdicts[0] if verdicts else ("passed", "")
    return outcomes


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
