"""One marker for tests that need a tool from outside the Python environment (podman, promtool,
Chromium, redis-server, network namespaces, a matching pg_dump, the OCR engine ...):

    pytestmark = needs_tool("podman", containers.unavailable_reason())

`unavailable` is None when the tool is there (the test runs), else one line saying why not.
Outside CI such a test is skipped with that line. Under CI (the environment variable CI=true, which
.ci/run sets) a skip of a marked test is a failure naming the tool: a CI machine installs every
tool the tests drive (invoice_pipeline_tests.browser_setup, run by `make test`), so a missing one
is a broken machine, and a suite that skipped it would pass without testing what it claims.

A test that only finds out while running (which pg_dump matches the server's version) carries the
marker with unavailable=None and calls pytest.skip itself: under CI that skip fails the same way.

The hooks below are a pytest plugin: conftest.py imports them, and a test of this file loads it
with `-p invoice_pipeline_tests.tools`.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

MARKER = "needs_tool"
ENV_CI = "CI"


def in_ci() -> bool:
    return os.environ.get(ENV_CI, "").strip().lower() in {"1", "true", "yes"}


def needs_tool(tool: str, unavailable: str | None = None) -> pytest.MarkDecorator:
    """The marker: `tool` is what a person would install, `unavailable` why it cannot run here."""
    return getattr(pytest.mark, MARKER)(tool, unavailable)


def _needed(item: pytest.Item) -> list[tuple[str, str | None]]:
    return [
        (str(mark.args[0]), mark.args[1] if len(mark.args) > 1 else None)
        for mark in item.iter_markers(MARKER)
    ]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before any fixture: a missing tool must not start servers or build images first.
    for tool, unavailable in _needed(item):
        if unavailable is not None:
            pytest.skip(f"needs {tool}: {unavailable}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not (report.skipped and in_ci()) or hasattr(report, "wasxfail"):
        return
    tools = [tool for tool, _ in _needed(item)]
    if not tools:
        return
    longrepr = report.longrepr
    reason = (longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)).removeprefix("Skipped: ")
    report.outcome = "failed"
    report.longrepr = (
        f"CI={os.environ[ENV_CI]} and this test needs {', '.join(tools)}, missing here: {reason}"
    )
