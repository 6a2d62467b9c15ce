from __future__ import annotations

import os
import subprocess
import sys

from dagster import AssetKey

from invoice_pipeline.orchestration.assets.lineage import PIPELINE_ASSET_KEYS
from invoice_pipeline.orchestration.definitions import defs

JOBS = {"process_invoice", "process_invoice_batch", "refresh_reports", "check_invariants"}
ASSETS = {
    *PIPELINE_ASSET_KEYS,
    "vendor_spend",
    "duplicate_report",
    "processing_latency",
    "review_queue",
}
CHECKS = {
    "no_invoice_posted_twice",
    "no_copy_posted",
    "no_stale_running_locks",
    "one_original_per_duplicate_group",
    "no_stuck_invoices",
    "review_queue_not_overdue",
}


def test_everything_is_defined() -> None:
    repo = defs.get_repository_def()
    assert JOBS <= {j.name for j in repo.get_all_jobs()}
    assert {s.name for s in repo.sensor_defs} == {"new_invoices_sensor"}
    assert {s.name for s in repo.schedule_defs} == {
        "sweep_stale_locks",
        "hourly_reports",
        "hourly_invariant_checks",
    }
    assert {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()} == ASSETS
    assert {k.name for k in repo.asset_graph.asset_check_keys} == CHECKS
    lineage = repo.asset_graph
    chain = PIPELINE_ASSET_KEYS
    for upstream, downstream in zip(chain, chain[1:], strict=False):
        parents = {k.to_user_string() for k in lineage.get(AssetKey(downstream)).parent_keys}
        assert parents == {upstream}


def test_sensor_and_schedules_run_by_default() -> None:
    from dagster import DefaultScheduleStatus, DefaultSensorStatus

    repo = defs.get_repository_def()
    assert all(s.default_status == DefaultSensorStatus.RUNNING for s in repo.sensor_defs)
    assert all(s.default_status == DefaultScheduleStatus.RUNNING for s in repo.schedule_defs)


def test_dagster_definitions_validate_passes(database_url: str) -> None:
    env = dict(os.environ, INVOICE_PIPELINE_DATABASE_URL=database_url)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "dagster",
            "definitions",
            "validate",
            "-m",
            "invoice_pipeline.orchestration.definitions",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Validation successful" in result.stdout + result.stderr
