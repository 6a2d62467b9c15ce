"""The code location for scale-out over several hosts: the default one, with the celery batch job
and a sensor that launches it.

Opt-in: load this module (`dagster api grpc -m invoice_pipeline.orchestration.celery_definitions`,
`dagster dev -m ...`) instead of `invoice_pipeline.orchestration.definitions`, with the `celery`
extra installed and INVOICE_PIPELINE_CELERY_BROKER set. Workers on every host run
`celery -A invoice_pipeline.orchestration.celery_worker worker -Q dagster` with the same
environment (their own database and broker addresses). See celery_jobs.py and docs/scale-out.md.

Every invoice the sensor requests here runs on a worker host, a lone one as a batch of one, and
every run carries a deadline (`dagster/max_runtime`, INVOICE_PIPELINE_CELERY_MAX_RUN_SECONDS):
dagster-celery's coordinator waits for each task's result with none of its own, so a task the
broker lost would keep its run, and the requests of the run's invoices, open for ever. Past the
deadline Dagster's run monitoring (on in the dagster.yaml invoice-pipeline writes and in
deploy/dagster.production.yaml) fails the run; Dagster's run retry or the sweep's release of
an ended run's requests then has the invoices processed again. Nothing a late task of the
failed run might still do can post twice: it claims under the same durable locks.
"""

from __future__ import annotations

from dagster import JobDefinition

from invoice_pipeline.config import Settings
from invoice_pipeline.orchestration.celery_jobs import PROCESS_INVOICE_BATCH_CELERY, make_celery_batch_job
from invoice_pipeline.orchestration.definitions import make_definitions
from invoice_pipeline.orchestration.resources import deployment
from invoice_pipeline.orchestration.sensors.new_invoices import RunTargets, make_new_invoices_sensor

# Dagster's run monitoring reads this tag (dagster._core.storage.tags.MAX_RUNTIME_SECONDS_TAG).
MAX_RUNTIME_TAG = "dagster/max_runtime"


def celery_run_targets(settings: Settings) -> RunTargets:
    return RunTargets(
        batch_job=PROCESS_INVOICE_BATCH_CELERY,
        single_job=None,
        tags={MAX_RUNTIME_TAG: str(int(settings.celery_max_run.total_seconds()))},
    )


# The environment is read here, once, as in definitions.py (resources/deployments.py).
DEPLOYMENT = deployment()
_celery_job = make_celery_batch_job(DEPLOYMENT.resources)
new_invoices_celery_sensor = make_new_invoices_sensor(
    "new_invoices_celery_sensor", [_celery_job], celery_run_targets(DEPLOYMENT.settings)
)
defs = make_definitions(
    DEPLOYMENT.resources,
    extra_jobs=[_celery_job],
    intake=new_invoices_celery_sensor,
    review=DEPLOYMENT.settings.review_jobs,
)


def celery_batch_job() -> JobDefinition:
    """The celery batch job, for `execute_job(reconstructable(celery_batch_job), ...)`: a celery
    worker re-imports this module and calls this function to load the job's steps."""
    return defs.resolve_job_def(PROCESS_INVOICE_BATCH_CELERY)
