"""Documents in our JSON format, for the tests, benchmarks and chaos scenarios."""

from __future__ import annotations

import json
from typing import Any


def json_invoice(
    number: str = "INV-00123",
    seller: str = "Acme Supplies GmbH",
    total: str = "119.00",
    *,
    vat_id: str | None = "DE123456788",  # check digits valid: an identifier
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
