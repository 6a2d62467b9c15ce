"""Real hosts in network namespaces: a zombie cut off or frozen past the TTL, and a short cut.

Builds a Cluster (pipeline_support.netns): a database host and three worker hosts. Skips with
one line without root or without `ip`. Each trial is the chaos scenario's own (chaos.partitions).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from chaos.common import AUDIT_SQL, ScenarioResult, check_common_invariants
from chaos.partitions import HEARTBEAT_S, TTL_S, trial_one
from invoice_pipeline.db.migrate import migrate
from pipeline_support.netns import Cluster, unavailable_reason

REASON = unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Cluster, str]]:
    with Cluster(3) as c:
        url = c.create_database("partitions")
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(AUDIT_SQL)
        yield c, url


def _trial(
    cluster: tuple[Cluster, str], tmp_path: Path, n: int, kind: str, self_fence: bool
) -> tuple[ScenarioResult, dict[str, Any]]:
    c, url = cluster
    result = ScenarioResult("partitions", n, {})
    figures: dict[str, Any] = {kind: {"trials": 0}}
    takeovers: list[float] = []
    trial_one(
        c,
        url,
        tmp_path,
        n,
        kind,
        self_fence,
        TTL_S,
        HEARTBEAT_S,
        random.Random(n),
        result,
        figures,
        takeovers,
    )
    check_common_invariants(url, result, audited=True)
    assert result.violations == [], result.violations
    return result, figures[kind] | {"takeovers": takeovers}


def test_a_cut_past_the_ttl_is_taken_over_and_every_zombie_write_is_refused(
    cluster: Any, tmp_path: Path
) -> None:
    _, fig = _trial(cluster, tmp_path, 0, "cut_long", self_fence=False)
    assert fig["takeovers"], "another host took the invoices over"
    assert fig["zombie_writes_attempted"] > 0
    assert fig["zombie_writes_refused"] == fig["zombie_writes_attempted"]
    assert fig["zombie_writes_accepted"] == 0


def test_a_self_fencing_zombie_abandons_its_chunk_without_writing(cluster: Any, tmp_path: Path) -> None:
    _, fig = _trial(cluster, tmp_path, 1, "cut_long", self_fence=True)
    assert fig["zombie_writes_attempted"] == 0
    assert fig["zombie_self_fenced_invoices"] > 0


def test_a_cut_shorter_than_the_ttl_causes_no_takeover_and_no_double_work(
    cluster: Any, tmp_path: Path
) -> None:
    _, fig = _trial(cluster, tmp_path, 2, "cut_short", self_fence=True)
    assert fig["zombie_resumed_and_finished"] == 1
    assert "takeover_s" not in fig


def test_a_frozen_host_is_taken_over_and_refused_when_it_wakes(cluster: Any, tmp_path: Path) -> None:
    _, fig = _trial(cluster, tmp_path, 3, "freeze", self_fence=False)
    assert fig["takeovers"]
    assert fig["zombie_writes_refused"] > 0
    assert fig["zombie_writes_accepted"] == 0
