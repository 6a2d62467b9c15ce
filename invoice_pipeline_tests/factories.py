"""Resources bound to a test database. Documents (json_invoice) live in pipeline_support.factories."""

from __future__ import annotations

import os
from typing import Any

from invoice_pipeline.config import ENV_INBOX
from invoice_pipeline.orchestration.resources import DocumentReader, InvoiceDatabase

# Temporary: invoice_pipeline_tests/review/ (another change in progress) still imports json_invoice
# from here. Switch it to pipeline_support.factories and delete this line.


def pipeline_resources(
    database_url: str, reader: DocumentReader | None = None, **db_config: Any
) -> dict[str, object]:
    # The sensor's inbox, as a code location configures it when it loads: the tests that tick
    # the sensor set INVOICE_PIPELINE_INBOX first; without it the sensor takes no files.
    config: dict[str, Any] = {
        "heartbeat_seconds": 0.2,
        "lock_ttl_seconds": 30,
        "retry_base_seconds": 60,
        "inbox": os.environ.get(ENV_INBOX),
    }
    config.update(db_config)
    return {
        "invoice_db": InvoiceDatabase(database_url=database_url, **config),
        "document_reader": reader or DocumentReader(),
    }
