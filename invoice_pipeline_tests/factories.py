"""Small builders for pipeline tests: documents in our JSON format, resources bound to a test database."""

from __future__ import annotations

import json
from typing import Any

from invoice_pipeline.resources import DocumentReader, InvoiceDatabase


def json_invoice(
    number: str = "INV-00123",
    seller: str = "Acme Supplies GmbH",
    total: str = "119.00",
    *,
    vat_id: str | None = "DE123456789",
    currency: str = "EUR",
    issue_date: str = "2026-11-02",
    document_type: str = "invoice",
    buyer: str = "Example Buyer Ltd",
    **extra: Any,
) -> bytes:
    doc = {
        "format_version": 1,
        "invoice_number": number,
        "document_type": document_type,
        "issue_date": issue_date,
        "due_date": "2026-12-02",
        "currency": currency,
        "net_total": str(round(float(total) / 1.19, 2)),
        "tax_total": str(round(float(total) - round(float(total) / 1.19, 2), 2)),
        "payable_total": total,
        "seller_name": seller,
        "seller_vat_id": vat_id,
        "buyer_name": buyer,
        "po_number": None,
    }
    doc.update(extra)
    return json.dumps(doc).encode()


def pipeline_resources(
    database_url: str, reader: DocumentReader | None = None, **db_config: Any
) -> dict[str, object]:
    config: dict[str, Any] = {"heartbeat_seconds": 0.2, "lock_ttl_seconds": 30, "retry_base_seconds": 60}
    config.update(db_config)
    return {
        "invoice_db": InvoiceDatabase(database_url=database_url, **config),
        "document_reader": reader or DocumentReader(),
    }
