from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from dagster import AssetKey

from invoice_pipeline.orchestration.assets.lineage import PIPELINE_ASSET_KEYS
from invoice_pipeline.orchestration.definitions import defs
from invoice_pipeline_tests.tools import needs_tool

JOBS = {"process_invoice", "process_invoice_batch", "deliver_exports", "refresh_reports", "check_invariants"}
ASSETS = {
    *PIPELINE_ASSET_KEYS,
    "export_batches",
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
    assert {s.name for s in repo.sensor_defs} == {
        "new_invoices_sensor",
        "mailbox_intake",
        "exports_due_sensor",
    }
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


@needs_tool("dagster-celery (the celery extra)")  # importorskip below
def test_the_celery_location_requests_only_the_celery_job_each_run_with_its_deadline() -> None:
    """Its intake sensor replaces the default one (two would request each invoice twice), and
    even a lone invoice goes to a worker host, never to the in-process one-invoice job."""
    from uuid import uuid4

    from invoice_pipeline.config import Settings
    from invoice_pipeline.engine.records import DueInvoice
    from invoice_pipeline.engine.runs import RunShape
    from invoice_pipeline.orchestration.celery_jobs import PROCESS_INVOICE_BATCH_CELERY
    from invoice_pipeline.orchestration.run_requests import invoice_ids_of
    from invoice_pipeline.orchestration.sensors.new_invoices import plan_run_requests

    pytest.importorskip("dagster_celery")
    from invoice_pipeline.orchestration.celery_definitions import celery_run_targets
    from invoice_pipeline.orchestration.celery_definitions import defs as celery_defs

    repo = celery_defs.get_repository_def()
    assert sorted((s.name, [j.name for j in s.jobs] if s.has_jobs else []) for s in repo.sensor_defs) == [
        ("exports_due_sensor", ["deliver_exports"]),
        ("mailbox_intake", []),  # requests no run: what it stores, the intake sensor plans
        ("new_invoices_celery_sensor", [PROCESS_INVOICE_BATCH_CELERY]),
    ]

    targets = celery_run_targets(Settings.from_env({"INVOICE_PIPELINE_CELERY_MAX_RUN_SECONDS": "900"}))
    for n in (1, 3):
        due = [DueInvoice(uuid4(), "acme", 1, 0, i) for i in range(n)]
        (request,) = plan_run_requests(due, RunShape(500), targets)
        assert request.job_name == PROCESS_INVOICE_BATCH_CELERY
        assert request.tags["dagster/max_runtime"] == "900"
        assert invoice_ids_of(request.run_config) == [str(d.invoice_id) for d in due]


ROOT = Path(__file__).resolve().parents[2]


def test_dg_sees_the_code_location_that_workspace_yaml_gives_dagster_dev(database_url: str) -> None:
    """Dagster's project CLI finds the checkout as a project ([tool.dg] in pyproject.toml) and lists
    every job, sensor, schedule, asset and check of the code location, which is the one module
    workspace.yaml loads for `dagster dev` (issue 57)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (location,) = yaml.safe_load((ROOT / "workspace.yaml").read_text())["load_from"]
    module = location["python_module"]["module_name"]
    assert pyproject["tool"]["dg"]["directory_type"] == "project"
    assert pyproject["tool"]["dg"]["project"]["code_location_target_module"] == module
    assert pyproject["tool"]["dagster"]["module_name"] == module

    dg = Path(sys.executable).parent / "dg"
    env = dict(os.environ, INVOICE_PIPELINE_DATABASE_URL=database_url, VIRTUAL_ENV=str(dg.parent.parent))
    result = subprocess.run(
        [str(dg), "list", "defs", "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    listed = json.loads(result.stdout)
    repo = defs.get_repository_def()
    assert {j["name"] for j in listed["jobs"]} == {
        j.name for j in repo.get_all_jobs() if not j.name.startswith("__")
    }
    assert {s["name"] for s in listed["sensors"]} == {s.name for s in repo.sensor_defs}
    assert {s["name"] for s in listed["schedules"]} == {s.name for s in repo.schedule_defs}
    assert {a["asset_key"] for a in listed["assets"]} >= {*ASSETS}
    assert {c["name"] for c in listed["asset_checks"]} == CHECKS
