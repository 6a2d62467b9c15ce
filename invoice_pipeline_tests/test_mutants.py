"""The sabotage list (pipeline_support/mutants.py) stays true to the code: every entry's text is
still in the code it breaks, and names a test that exists. Running the sabotages is `make mutants`.

The runner's verdict is checked on real pytest runs of tiny tests: only a test's own failure
kills a sabotage; an error before its assertions, a skip or a hang is a broken entry."""

from __future__ import annotations

import dataclasses
import os
import sys
from datetime import date, timedelta
from pathlib import Path

import pytest

from pipeline_support.mutants import (
    ROOT,
    SABOTAGES,
    Edit,
    RunVerdict,
    Sabotage,
    check_applies,
    run_test,
    todays,
    unexampled_draws,
)


def test_every_sabotage_applies_and_names_an_existing_test() -> None:
    problems = {s.name: check_applies(ROOT, s) for s in SABOTAGES}
    assert {name: why for name, why in problems.items() if why} == {}
    assert len({s.name for s in SABOTAGES}) == len(SABOTAGES), "sabotage names are unique"
    assert len(SABOTAGES) >= 25


def test_every_sabotage_of_a_property_is_killed_by_an_explicit_case() -> None:
    """A property's kill must not hang on what the derandomized draw makes of the test's source."""
    problems = {s.name: unexampled_draws(ROOT, s) for s in SABOTAGES}
    assert {name: why for name, why in problems.items() if why} == {}


MODULE = """
from dataclasses import dataclass


@dataclass
class PrintedPage:
    text: str


def witness(text: str) -> bool:
    page = PrintedPage(text)
    return bool(page.text)


def unknown() -> object:
    return NotDefinedHereEither
"""
WITNESS = "    page = PrintedPage(text)\n"


@pytest.mark.parametrize(
    ("path", "old", "new", "problem"),
    [
        ("pkg/mod.py", WITNESS, "    page = PrintedPage(text.upper())\n", ""),
        ("pkg/mod.py", WITNESS, "    page = _Page(text)\n", "brings in F821 Undefined name `_Page`"),
        ("pkg/mod.py", WITNESS, "    page = PrintedPage(text\n", "does not compile: '(' was never closed"),
        # Renamed away: every use of the old name is undefined.
        ("pkg/mod.py", "class PrintedPage", "class Page", "brings in F821 Undefined name `PrintedPage`"),
        # What the original already lacks (NotDefinedHereEither) is not the sabotage's doing, but
        # one more use of it is.
        ("pkg/mod.py", "return NotDefinedHereEither", "return None", ""),
        ("pkg/mod.py", "return bool(page.text)", "return NotDefinedHereEither", "brings in F821"),
        ("pkg/mod.py", "class Gone", "class Here", "no longer applies"),
        # SQL is not parsed: nothing as cheap resolves PL/pgSQL's names without a database.
        ("sql/0001.sql", "SELECT 1;", "SELECT no_such_column FROM nowhere;", ""),
    ],
)
def test_a_sabotage_that_does_not_compile_or_names_what_is_not_defined_does_not_apply(
    tmp_path: Path, path: str, old: str, new: str, problem: str
) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(MODULE)
    (tmp_path / "sql").mkdir()
    (tmp_path / "sql" / "0001.sql").write_text("SELECT 1;\n")
    (tmp_path / "test_mod.py").write_text("def test_witness():\n    pass\n")
    sabotage = Sabotage("fake", "a fake", (Edit(path, old, new),), "test_mod.py::test_witness")
    found = check_applies(tmp_path, sabotage)
    if problem == "no longer applies":
        assert found and "the text occurs 0 times" in found[0], found
    elif problem:
        assert len(found) == 1 and problem in found[0], found
    else:
        assert found == []


PROPERTY_TESTS = """
from hypothesis import example, given, strategies as st
from hypothesis.stateful import run_state_machine_as_test


@given(st.integers())
def test_drawn(n):
    pass


@example(0)
@given(st.integers())
def test_with_an_example(n):
    pass


def test_draws_inside():
    @given(st.integers())
    def draw(n):
        pass

    draw()


def test_runs_a_machine():
    run_state_machine_as_test(Machine)


def test_plain():
    pass
"""


@pytest.mark.parametrize(
    ("test", "problem"),
    [
        ("test_drawn", "test_drawn draws with @given and has no @example"),
        ("test_with_an_example", ""),
        ("test_draws_inside", "draw draws with @given and has no @example"),
        ("test_runs_a_machine", "runs a state machine"),
        ("test_plain", ""),
    ],
)
def test_a_sabotage_of_a_property_needs_an_explicit_case(tmp_path: Path, test: str, problem: str) -> None:
    (tmp_path / "test_props.py").write_text(PROPERTY_TESTS)
    sabotage = Sabotage("fake", "a fake", (), f"test_props.py::{test}")
    found = unexampled_draws(tmp_path, sabotage)
    assert problem in (found[0] if found else "") and len(found) == bool(problem), found
    assert not unexampled_draws(tmp_path, dataclasses.replace(sabotage, any_draw_kills=True))


def test_a_week_of_rotating_subsets_runs_every_sabotage_once() -> None:
    monday = date(2026, 11, 30)
    week = [s.name for day in range(7) for s in todays(SABOTAGES, monday + timedelta(days=day))]
    assert sorted(week) == sorted(s.name for s in SABOTAGES)


# -- the runner's verdict, on real pytest runs of tiny tests ---------------------------------------

TINY_TESTS = """
import threading

import pytest


@pytest.fixture
def broken_fixture():
    raise RuntimeError("the fixture could not set up")


def test_passes():
    assert 1 + 1 == 2


def test_fails_an_assertion():
    total = 1 + 1
    assert total == 3, "the mechanism's effect is gone"


def test_fails_a_plain_assert():
    total = 1 + 1
    assert total == 3


def test_fails_with_pytest_raises():
    with pytest.raises(ValueError):
        pass


def test_errors_in_setup(broken_fixture):
    assert True


def test_raises_value_error():
    raise ValueError("not enough values to unpack")


def test_raises_a_group_of_assertions():
    raise ExceptionGroup("two distinct failures", [AssertionError("one"), AssertionError("two")])


def test_raises_a_group_with_another_error():
    raise ExceptionGroup("two distinct failures", [AssertionError("one"), KeyError("two")])


@pytest.mark.skip(reason="the tool is missing")
def test_skipped():
    assert False


@pytest.mark.timeout(1)
def test_hangs_until_pytest_timeout():
    threading.Event().wait()


@pytest.mark.timeout(0)
def test_hangs_until_the_runner_stops_it():
    threading.Event().wait()
"""


def _run_tiny(tmp_path: Path, name: str, raises: tuple[str, ...] = (), timeout: float = 300) -> RunVerdict:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_tiny.py").write_text(TINY_TESTS)
    (tmp_path / "test_does_not_import.py").write_text(
        "import no_such_module_anywhere\n\ndef test_x():\n    pass\n"
    )
    # Only the plugin the verdict depends on (pytest-timeout): autoloading every installed one
    # costs seconds of imports per run on a loaded machine.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | {
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTEST_ADDOPTS": "-p pytest_timeout",
    }
    return run_test(sys.executable, name, tmp_path, env, timeout, raises)


@pytest.mark.parametrize(
    ("name", "raises", "verdict", "assertion"),
    [
        (
            "test_tiny.py::test_fails_an_assertion",
            (),
            "killed",
            "AssertionError: the mechanism's effect is gone",
        ),
        (
            "test_tiny.py::test_fails_with_pytest_raises",
            (),
            "killed",
            "Failed: DID NOT RAISE ValueError",
        ),
        ("test_tiny.py::test_fails_a_plain_assert", (), "killed", "assert 2 == 3"),
        (
            "test_tiny.py::test_raises_value_error",
            ("ValueError",),
            "killed",
            "ValueError: not enough values to unpack",
        ),
        (
            "test_tiny.py::test_raises_a_group_of_assertions",
            (),
            "killed",
            "ExceptionGroup: two distinct failures (2 sub-exceptions)",
        ),
        ("test_tiny.py::test_passes", (), "SURVIVED", ""),
        ("test_tiny.py::test_raises_value_error", (), "BROKEN", ""),
        ("test_tiny.py::test_raises_a_group_with_another_error", (), "BROKEN", ""),
        ("test_tiny.py::test_errors_in_setup", (), "BROKEN", ""),
        ("test_does_not_import.py::test_x", (), "BROKEN", ""),
        ("test_tiny.py::test_skipped", (), "BROKEN", ""),
        ("test_tiny.py::test_hangs_until_pytest_timeout", (), "BROKEN", ""),
    ],
)
def test_only_an_assertion_or_the_named_exception_kills_a_sabotage(
    tmp_path: Path, name: str, raises: tuple[str, ...], verdict: str, assertion: str
) -> None:
    """A sabotage is killed by its test's own failure (an assert, pytest.fail, pytest.raises that
    saw nothing, or the exception its entry names); an import error, a fixture's error, another
    exception, a skip or a pytest-timeout is BROKEN: the test never reached its assertions."""
    got = _run_tiny(tmp_path, name, raises)
    assert (got.verdict, got.assertion) == (verdict, assertion), got.detail


def test_a_test_the_runner_has_to_stop_is_broken_not_killed(tmp_path: Path) -> None:
    got = _run_tiny(tmp_path, "test_tiny.py::test_hangs_until_the_runner_stops_it", timeout=3)
    assert got.verdict == "BROKEN" and "the runner stopped it" in got.detail, got
