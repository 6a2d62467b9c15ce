"""Asymmetric partitions with celery workers: a host reaches the broker but not PostgreSQL, and
the other way round (chaos.asymmetric). One trial of each kind on a BrokerCluster; the
invariants are the partition scenarios': 0 double postings, 0 lost, 0 zombie writes accepted.

Skips with one line without root (namespaces) or without dagster-celery / redis-server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos.common import ScenarioResult
from invoice_pipeline_tests.tools import needs_tool
from pipeline_support.celery_cluster import celery_unavailable_reason
from pipeline_support.netns import unavailable_reason

pytestmark = [
    needs_tool("network namespaces", unavailable_reason()),
    needs_tool("redis-server", celery_unavailable_reason()),
]


def test_a_host_cut_from_one_of_database_and_broker_breaks_no_invariant(tmp_path: Path) -> None:
    from chaos.asymmetric import run_trials

    result = ScenarioResult("partitions_asym", 21, {})
    figures: dict[str, Any] = {}
    run_trials(2, tmp_path, 21, result, figures)
    assert result.violations == [], (result.violations, figures)
    assert result.trials == 2
    assert figures["asym_zombie_writes_accepted"] == 0
    assert figures["asym_double_postings"] == 0
    # Cut from the broker only, the zombie kept its leases: nothing was claimed twice.
    assert figures["asym_broker"].get("invoices_claimed_twice", 0) == 0, figures
