"""The fast subset of the chaos scenarios, part of the normal test run (`make test`).

The long version with the same code and more trials: `python -m chaos`.
A failure message lists the violated invariants and the seed, which replays the trial.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos import SCENARIOS
from chaos.common import ChaosContext

SEED = 20261101


@pytest.fixture
def chaos(server_url: str, template_database: str, tmp_path: Path) -> Iterator[ChaosContext]:
    ctx = ChaosContext(server_url, template_database, tmp_path)
    yield ctx
    ctx.cleanup()


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_fast_subset_holds_every_invariant(chaos: ChaosContext, name: str) -> None:
    scenario = SCENARIOS[name]
    result = scenario.load()(chaos, scenario.sized(long=False, scale=1.0), SEED)
    assert result.violations == [], f"{name} (seed {SEED}): {result.violations}"
    assert result.trials > 0
