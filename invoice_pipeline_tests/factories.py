"""Resources bound to a test database. Documents (json_invoice) live in pipeline_support.factories."""

from __future__ import annotations

from typing import Any

from invoice_pipeline.orchestration.resources import DocumentReader, InvoiceDatabase

# Temporary: invoice_pipeline_tests/review/ (another change in progress) still imports json_invoice
# from here. Switch it to pipeline_support.factories and delete this line.


def pipeline_resources(
    database_url: str, reader: DocumentReader | None = None, **db_config: Any
) -> dict[str, object]:
    config: dict[str, Any] = {"heartbeat_seconds": 0.2, "lock_ttl_seconds": 30, "retry_base_seconds": 60}
    config.update(db_config)
    return {
        "invoice_db": InvoiceDatabase(database_url=database_url, **config),
        "document_reader": reader or DocumentReader(),
    }
