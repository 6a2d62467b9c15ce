"""The parallel layout's tables (invoice_pipeline_tests/scheduling.py) still name what exists: every
chaos scenario is in one of the two chaos groups, and every unit given a length is a group or
names a test file (and function) that is there. A stale entry would only misorder the dispatch,
so nothing else would notice it."""

from __future__ import annotations

import re

from chaos import SCENARIOS
from invoice_pipeline_tests import scheduling


def test_each_chaos_scenario_is_in_one_of_the_two_chaos_groups() -> None:
    groups = {name: scheduling.unit_of(f"{scheduling.CHAOS_SCENARIO}[{name}]") for name in SCENARIOS}
    assert set(groups.values()) == {"chaos-a", "chaos-b"}, groups
    for key in scheduling.XDIST_GROUPS:
        scenario = re.fullmatch(re.escape(scheduling.CHAOS_SCENARIO) + r"\[(\w+)\]", key)
        assert scenario is None or scenario[1] in SCENARIOS, f"{key}: no such chaos scenario"


def test_every_unit_given_a_length_exists() -> None:
    groups = set(scheduling.XDIST_GROUPS.values())
    for unit in scheduling.UNIT_SECONDS:
        if unit in groups:
            continue
        path, _, test = unit.partition("::")
        source = scheduling.TESTS / path
        assert source.is_file(), f"UNIT_SECONDS names {path}, not a test file"
        assert scheduling.unit_of(unit) == unit, f"{unit} is in a group: give the group its length"
        if test:
            assert re.search(rf"^def {re.escape(test)}", source.read_text(), re.M), f"{unit}: no such test"


def test_a_test_in_no_group_is_a_unit_of_its_own_and_a_length_comes_from_the_longest_prefix() -> None:
    assert (
        scheduling.unit_of("domain/test_matching.py::test_org_isolation")
        == "domain/test_matching.py::test_org_isolation"
    )
    assert scheduling.unit_of("cluster/test_asymmetric.py::test_x") == "hosts"
    assert scheduling.unit_seconds("hosts") == scheduling.UNIT_SECONDS["hosts"]
    assert scheduling.unit_seconds("domain/test_matching.py::test_org_isolation") == 0
