"""The code location: jobs, sensor, schedules, assets, checks, resources."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from dagster import (
    AssetSelection,
    BetaWarning,
    DefaultScheduleStatus,
    Definitions,
    JobDefinition,
    ScheduleDefinition,
    SensorDefinition,
    define_asset_job,
)

from invoice_pipeline.orchestration.assets import invariant_checks, pipeline_assets, report_assets
from invoice_pipeline.orchestration.assets.review_queue import review_queue_assets, review_queue_checks
from invoice_pipeline.orchestration.export_jobs import deliver_exports, export_assets, exports_due_sensor
from invoice_pipeline.orchestration.jobs import process_invoice, process_invoice_batch
from invoice_pipeline.orchestration.resources import ReviewAccess, deployment
from invoice_pipeline.orchestration.review_jobs import review_jobs
from invoice_pipeline.orchestration.schedules import sweep_stale_locks_schedule
from invoice_pipeline.orchestration.sensors import mailbox_intake_sensor, new_invoices_sensor

refresh_reports = define_asset_job(
    "refresh_reports",
    selection=AssetSelection.groups("reports"),
    description="Recompute the pandas reports from the database.",
)
check_invariants = define_asset_job(
    "check_invariants",
    selection=AssetSelection.all_asset_checks(),
    description="Run the asset checks on the pipeline's invariants.",
)


def make_definitions(
    resources: dict[str, object],
    *,
    extra_jobs: Sequence[JobDefinition] = (),
    intake: SensorDefinition = new_invoices_sensor,
    review: bool = True,
) -> Definitions:
    """Everything of a code location; `intake` is the one sensor that requests processing runs
    (a location with two would request each invoice from both). `review`: with the Launchpad
    review jobs (the code location passes its deployment's INVOICE_PIPELINE_REVIEW_JOBS, 1
    unless set; a production deployment sets 0, see config.ENV_REVIEW_JOBS)."""
    return resolved(
        Definitions(
            assets=[*pipeline_assets, *export_assets, *report_assets, *review_queue_assets],
            asset_checks=[*invariant_checks, *review_queue_checks],
            jobs=[
                process_invoice,
                process_invoice_batch,
                *extra_jobs,
                deliver_exports,
                refresh_reports,
                check_invariants,
                *(review_jobs if review else ()),
            ],
            sensors=[intake, mailbox_intake_sensor, exports_due_sensor],
            schedules=[
                sweep_stale_locks_schedule,
                ScheduleDefinition(
                    name="hourly_reports",
                    job=refresh_reports,
                    cron_schedule="7 * * * *",
                    default_status=DefaultScheduleStatus.RUNNING,
                ),
                ScheduleDefinition(
                    name="hourly_invariant_checks",
                    job=check_invariants,
                    cron_schedule="17 * * * *",
                    default_status=DefaultScheduleStatus.RUNNING,
                ),
            ],
            # A caller that names no review access gets one that refuses every review run.
            resources={"review_access": ReviewAccess(), **resources},
        )
    )


def resolved(defs: Definitions) -> Definitions:
    """`defs` with its repository built now (Dagster caches it), without the one warning that
    building prints. Binding the resources re-creates the sensor with `owners=[]`, a beta
    parameter this project never sets, and Dagster 1.13 warns about it: a BetaWarning through
    every `process` and `demo` progress bar and in the code server's log. Only that message
    is silenced, only here; any other warning still shows."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="Parameter `owners` of initializer `SensorDefinition", category=BetaWarning
        )
        defs.get_repository_def()
    return defs


# The environment is read here, once: the deployment's resources and settings (resources/deployments.py).
DEPLOYMENT = deployment()
defs = make_definitions(DEPLOYMENT.resources, review=DEPLOYMENT.settings.review_jobs)


def batch_job_for_cli() -> JobDefinition:
    """The batch job with the code location's resources bound, for `invoice-pipeline process`."""
    return defs.resolve_job_def("process_invoice_batch")
