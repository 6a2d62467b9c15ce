"""The code location for scale-out over several hosts: the default one plus the celery batch job.

Opt-in: load this module (`dagster api grpc -m invoice_pipeline.orchestration.celery_definitions`,
`dagster dev -m ...`) instead of `invoice_pipeline.orchestration.definitions`, with the `celery`
extra installed and INVOICE_PIPELINE_CELERY_BROKER set. Workers on every host run
`celery -A invoice_pipeline.orchestration.celery_worker worker -Q dagster` with the same
environment (their own database and broker addresses). See celery_jobs.py and docs/scale-out.md.
"""

from __future__ import annotations

from dagster import Definitions, JobDefinition

from invoice_pipeline.orchestration.celery_jobs import PROCESS_INVOICE_BATCH_CELERY, make_celery_batch_job
from invoice_pipeline.orchestration.definitions import make_definitions, make_resources

resources = make_resources()
defs = Definitions.merge(make_definitions(resources), Definitions(jobs=[make_celery_batch_job(resources)]))


def celery_batch_job() -> JobDefinition:
    """The celery batch job, for `execute_job(reconstructable(celery_batch_job), ...)`: a celery
    worker re-imports this module and calls this function to load the job's steps."""
    return defs.resolve_job_def(PROCESS_INVOICE_BATCH_CELERY)
