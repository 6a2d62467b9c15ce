"""A real run worker for crash tests: `python -m pipeline_support.run_worker INVOICE_ID`.

It executes process_invoice against the Dagster instance in DAGSTER_HOME and the database in
INVOICE_PIPELINE_DATABASE_URL, like a run launched from the UI. With GATE_METHOD and
GATE_FILE set, the document reader stops inside that method until the gate file exists, so a
test can kill or freeze the worker at a known point of a real step.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from dagster import DagsterInstance, JobDefinition, execute_job, reconstructable

from invoice_pipeline.documents import ExtractedText
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.orchestration.jobs import make_jobs
from invoice_pipeline.orchestration.resources import DocumentReader, InvoiceDatabase


class GatedReader(DocumentReader):
    gate_method: str = ""
    gate_file: str = ""

    def _wait(self, method: str) -> None:
        if method != self.gate_method:
            return
        deadline = time.monotonic() + 600
        while not Path(self.gate_file).exists():
            if time.monotonic() > deadline:
                raise TimeoutError("gate never opened")
            time.sleep(0.02)

    def read_text(self, content: bytes, filename: str | None, max_bytes: int) -> ExtractedText:
        self._wait("read_text")
        return super().read_text(content, filename, max_bytes)

    def read_fields(self, extracted: ExtractedText) -> InvoiceFields:
        self._wait("read_fields")
        return super().read_fields(extracted)


def gated_process_invoice() -> JobDefinition:
    job, _ = make_jobs(
        {
            "invoice_db": InvoiceDatabase(
                database_url=os.environ["INVOICE_PIPELINE_DATABASE_URL"],
                heartbeat_seconds=float(os.environ.get("HEARTBEAT_SECONDS", "0.2")),
                lock_ttl_seconds=1,
                retry_base_seconds=0,
            ),
            "document_reader": GatedReader(
                gate_method=os.environ.get("GATE_METHOD", ""), gate_file=os.environ.get("GATE_FILE", "")
            ),
        }
    )
    return job


def main(invoice_id: str) -> int:
    with DagsterInstance.get() as instance:
        result = execute_job(
            reconstructable(gated_process_invoice),
            instance=instance,
            run_config={"ops": {"start": {"config": {"invoice_id": invoice_id}}}},
        )
        print(f"RUN {result.run_id} {'SUCCESS' if result.success else 'FAILURE'}", flush=True)
        return 0 if result.success else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
