"""Data sets the benchmarks (and a few tests) load in bulk, keyed exactly as the product keys them."""

from __future__ import annotations

import json
from collections.abc import Iterable
from decimal import Decimal

import psycopg

from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.matching import MatchCandidate


def insert_decided_originals(url: str, org: str, fields: Iterable[InvoiceFields]) -> int:
    """Invoices already decided 'original', written in one COPY; returns how many.

    Deciding tens of thousands of invoices one by one only to have a large org would dominate a
    test's run time; the keys come from the same domain functions the store uses.
    """
    n = 0
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        with cur.copy(
            "COPY invoices (org_id, status, fields, invoice_number, payable_total, currency, seller_name,"
            " seller_vat_id, duplicate_status, business_key, business_key_hash, vendor_key, block_key, number_key)"
            " FROM STDIN"
        ) as copy:
            for f in fields:
                c = MatchCandidate.from_fields(f"bulk-{n}", org, f)
                copy.write_row(
                    (
                        org,
                        "processed",
                        json.dumps(f.to_json()),
                        f.invoice_number,
                        f.payable_total,
                        f.currency,
                        f.seller_name,
                        f.seller_vat_id,
                        "original",
                        *c.stored_keys.values(),  # business_key, business_key_hash, vendor_key, block_key, number_key
                    )
                )
                n += 1
    return n


def invoice_fields(
    number: str,
    *,
    seller: str = "Acme Supplies GmbH",
    vat: str | None = "DE123456789",
    total: Decimal | str = "100.00",
    currency: str = "EUR",
) -> InvoiceFields:
    return InvoiceFields(
        invoice_number=number,
        currency=currency,
        payable_total=Decimal(total),
        seller_name=seller,
        seller_vat_id=vat,
    )
