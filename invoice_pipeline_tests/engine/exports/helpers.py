"""What the export tests share (most of it from pipeline_support.exports, which chaos and the
benchmark share too)."""

from __future__ import annotations

from invoice_pipeline.engine.export_records import ExportTarget
from pipeline_support.exports import (
    IBAN,
    SECRET,
    VAT,
    age_export_leases,
    datev_target,
    post_invoices,
    sql,
    statuses,
    webhook_target,
)


def export_ids(url: str, target: ExportTarget) -> set[str]:
    return {str(r[0]) for r in sql(url, "SELECT id FROM exports WHERE target_id = %s", (target.id,))}


def posting_ids(url: str, org: str) -> set[str]:
    return {str(r[0]) for r in sql(url, "SELECT id FROM ledger_postings WHERE org_id = %s", (org,))}


__all__ = [
    "IBAN",
    "SECRET",
    "VAT",
    "age_export_leases",
    "datev_target",
    "post_invoices",
    "sql",
    "statuses",
    "webhook_target",
]
