"""The celery app a worker host runs: `celery -A invoice_pipeline.orchestration.celery_worker worker -Q dagster`.

dagster-celery's own `dagster_celery.app` reads its broker from a `dagster_celery_config` module
or defaults to RabbitMQ on localhost; this one takes the broker, the result backend and the
timeouts from the same environment variables as the executor (celery_jobs.celery_app_args),
so both sides cannot disagree. The tasks are dagster-celery's: each executes one step of a run,
loading the job from the code location and writing its events to Dagster's storage.
"""

from __future__ import annotations

from dagster_celery.make_app import make_app
from dagster_celery.tasks import create_task

from invoice_pipeline.orchestration.celery_jobs import celery_app_args

app = make_app(celery_app_args())
execute_plan = create_task(app)
