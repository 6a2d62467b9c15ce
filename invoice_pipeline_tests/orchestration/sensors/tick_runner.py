"""Evaluate new_invoices_sensor once in a process of its own and print what it did as JSON.

`python -m invoice_pipeline_tests.orchestration.sensors.tick_runner DATABASE_URL [CURSOR]`, with
INVOICE_PIPELINE_INBOX set. The intake tests run it with fewer privileges than the test: root
reads every file, so "permission denied" needs a process that root's capabilities do not cover.
"""

from __future__ import annotations

import json
import sys

from dagster import DagsterInstance, RunRequest, SkipReason, build_sensor_context

from invoice_pipeline.orchestration.definitions import make_definitions
from invoice_pipeline.orchestration.resources.invoice_database import close_shared_stores
from invoice_pipeline.orchestration.run_requests import invoice_ids_of
from invoice_pipeline.orchestration.sensors import new_invoices_sensor
from invoice_pipeline_tests.factories import pipeline_resources


def main() -> None:
    url = sys.argv[1]
    cursor = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else None
    defs = make_definitions(pipeline_resources(url))
    with DagsterInstance.ephemeral() as instance:
        context = build_sensor_context(
            instance=instance, definitions=defs, resources=defs.resources, cursor=cursor
        )
        try:
            results = list(new_invoices_sensor(context))  # type: ignore[arg-type]
        finally:
            close_shared_stores()
    requests = [r for r in results if isinstance(r, RunRequest)]
    print(
        json.dumps(
            {
                "cursor": context.cursor,
                "skip": [str(r.skip_message) for r in results if isinstance(r, SkipReason)],
                "run_requests": [
                    {
                        "run_key": r.run_key,
                        "job_name": r.job_name,
                        "run_config": r.run_config,
                        "invoice_ids": invoice_ids_of(r.run_config),
                    }
                    for r in requests
                ],
            }
        )
    )


if __name__ == "__main__":
    main()
