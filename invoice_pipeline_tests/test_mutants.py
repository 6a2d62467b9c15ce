"""The sabotage list (pipeline_support/mutants.py) stays true to the code: every entry's text is
still in the code it breaks, and names a test that exists. Running the sabotages is `make mutants`."""

from __future__ import annotations

from datetime import date, timedelta

from pipeline_support.mutants import ROOT, SABOTAGES, check_applies, todays


def test_every_sabotage_applies_and_names_an_existing_test() -> None:
    problems = {s.name: check_applies(ROOT, s) for s in SABOTAGES}
    assert {name: why for name, why in problems.items() if why} == {}
    assert len({s.name for s in SABOTAGES}) == len(SABOTAGES), "sabotage names are unique"
    assert len(SABOTAGES) >= 25


def test_a_week_of_rotating_subsets_runs_every_sabotage_once() -> None:
    monday = date(2026, 11, 30)
    week = [s.name for day in range(7) for s in todays(SABOTAGES, monday + timedelta(days=day))]
    assert sorted(week) == sorted(s.name for s in SABOTAGES)
