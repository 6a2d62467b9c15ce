"""Reliability and security scenarios, parameterised by counts and a seed.

The same scenario functions serve two callers: the pytest tests in invoice_pipeline_tests/chaos/
run the FAST sizes inside the normal test suite, and `python -m chaos` (make chaos) runs the LONG
sizes (times --trials-scale) and writes the figures to benchmarks/results/chaos.json.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chaos.common import ChaosContext, ScenarioResult


@dataclass(frozen=True)
class Scenario:
    name: str
    module: str
    fast: dict[str, int]
    long: dict[str, int]
    # Count parameters that --trials-scale multiplies (the others, e.g. process counts, stay).
    scaled: tuple[str, ...] = ("trials",)

    def load(self) -> Callable[[ChaosContext, dict[str, int], int], ScenarioResult]:
        return importlib.import_module(self.module).run

    def sized(self, long: bool, scale: float) -> dict[str, int]:
        params = dict(self.long if long else self.fast)
        for key in self.scaled:
            if key in params:
                params[key] = max(1, round(params[key] * scale))
        return params


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "redelivery_storm",
            "chaos.redelivery",
            fast={"trials": 50, "processes": 3},
            long={"trials": 1000, "processes": 3},
        ),
        Scenario(
            "kill9",
            "chaos.kill9",
            fast={"trials": 12},
            long={"trials": 150},
        ),
        Scenario(
            "postgres_restart",
            "chaos.pg_restart",
            fast={"trials": 2, "invoices": 12},
            long={"trials": 15, "invoices": 30},
        ),
        Scenario(
            "two_deployments",
            "chaos.deployments",
            fast={"trials": 1, "invoices": 40},
            long={"trials": 4, "invoices": 150},
        ),
        Scenario(
            "dedupe_properties",
            "chaos.properties",
            fast={"trials": 25},
            long={"trials": 400},
        ),
        Scenario(
            "hostile_inputs",
            "chaos.hostile",
            fast={"trials": 30},
            long={"trials": 600},
        ),
        Scenario(
            "dedupe_race_storm",
            "chaos.dedupe_race",
            # pairs per variation kind (four kinds); lanes: pairs raced at once, two processes each.
            fast={"pairs": 8, "lanes": 1},
            long={"pairs": 1000, "lanes": 1},
            scaled=("pairs",),
        ),
        Scenario(
            "contention",
            "chaos.contention",
            # trials: racing runs (4 per wave, over overlapping chunks of the wave's invoices).
            fast={"trials": 100, "runs": 4},
            long={"trials": 1000, "runs": 4},
        ),
        Scenario(
            "crash_cost",
            "chaos.crash_cost",
            # kills per chunk (one chunk of scans, one of UBL XML), then the run that finishes it.
            fast={"kills": 2, "scans": 4, "xml": 120},
            long={"kills": 8, "scans": 12, "xml": 600},
            scaled=("kills",),
        ),
        Scenario(
            "partitions",
            "chaos.partitions",
            # trials cycle over cut_long, cut_short, db_restart, freeze, lossy (see the module);
            # default_ttl_trials: cut_long trials with the default 30 s TTL (takeover figure);
            # asym_trials: asymmetric cuts with celery workers and a broker host (chaos.asymmetric;
            # in the suite: invoice_pipeline_tests/cluster/test_asymmetric.py);
            # asym_rabbitmq_trials: the broker cut with RabbitMQ as the broker (in the suite:
            # invoice_pipeline_tests/cluster/test_rabbitmq_broker.py).
            fast={"trials": 5, "default_ttl_trials": 0, "asym_trials": 0, "asym_rabbitmq_trials": 0},
            long={"trials": 100, "default_ttl_trials": 1, "asym_trials": 10, "asym_rabbitmq_trials": 5},
        ),
        Scenario(
            "export_delivery",
            "chaos.export_delivery",
            # rounds: delivery workers SIGKILLed per trial before the last one runs to the end.
            fast={"trials": 2, "postings": 6, "rounds": 2},
            long={"trials": 40, "postings": 8, "rounds": 3},
        ),
        Scenario(
            "security",
            "chaos.security",
            fast={"trials": 1, "dev_server": 1},
            long={"trials": 3, "dev_server": 1},
        ),
    )
}
