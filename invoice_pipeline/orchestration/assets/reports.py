"""Reports computed with pandas from the database, with numeric metadata the UI plots over time.

pandas is imported when a report runs: `process` and the run workers never need it.
"""

from typing import TYPE_CHECKING

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from invoice_pipeline.orchestration.assets.lineage import ASSET_DUPLICATES, ASSET_LEDGER
from invoice_pipeline.orchestration.resources import InvoiceDatabase

if TYPE_CHECKING:
    import pandas as pd

GROUP = "reports"


def _table(frame: "pd.DataFrame", rows: int = 20) -> MetadataValue:
    if frame.empty:
        return MetadataValue.md("_no rows_")
    return MetadataValue.md("```\n" + frame.head(rows).to_string(index=False) + "\n```")


@asset(group_name=GROUP, deps=[ASSET_LEDGER], kinds={"pandas", "postgres"})
def vendor_spend(context: AssetExecutionContext, invoice_db: InvoiceDatabase) -> MaterializeResult:
    """Spend per org, vendor and month, from the ledger."""
    frame = invoice_db.store.reporting.frame("vendor_spend")
    total = float(frame["amount"].astype(float).sum()) if not frame.empty else 0.0
    return MaterializeResult(
        metadata={
            "total_posted": total,
            "vendors": int(frame["vendor"].nunique()) if not frame.empty else 0,
            "postings": int(frame["invoices"].sum()) if not frame.empty else 0,
            "preview": _table(frame),
        }
    )


@asset(group_name=GROUP, deps=[ASSET_DUPLICATES], kinds={"pandas", "postgres"})
def duplicate_report(context: AssetExecutionContext, invoice_db: InvoiceDatabase) -> MaterializeResult:
    """Duplicate groups, how each copy matched, and the money that would have been paid twice."""
    frame = invoice_db.store.reporting.frame("duplicate_report")
    at_risk = float(frame["amount_at_risk"].astype(float).sum()) if not frame.empty else 0.0
    by_how = frame.groupby("how").size().to_dict() if not frame.empty else {}
    return MaterializeResult(
        metadata={
            "groups": int(frame["group_id"].nunique()) if not frame.empty else 0,
            "duplicates": len(frame),
            "amount_at_risk": at_risk,
            "exact_key_matches": int(by_how.get("exact_key", 0)),
            "fuzzy_matches": int(by_how.get("fuzzy", 0)),
            "preview": _table(frame.drop(columns=["group_id"]) if not frame.empty else frame),
        }
    )


@asset(group_name=GROUP, deps=[ASSET_LEDGER], kinds={"pandas", "postgres"})
def processing_latency(context: AssetExecutionContext, invoice_db: InvoiceDatabase) -> MaterializeResult:
    """Time from ingest to a terminal state, and attempts per invoice."""
    import pandas as pd

    frame = invoice_db.store.reporting.frame("processing_latency")
    seconds = frame["seconds_to_done"].astype(float) if not frame.empty else pd.Series(dtype=float)
    attempts = frame["attempts"].astype(int) if not frame.empty else pd.Series(dtype=int)

    def pct(q: float) -> float:
        return float(seconds.quantile(q)) if len(seconds) else 0.0

    return MaterializeResult(
        metadata={
            "invoices": len(frame),
            "p50_seconds": pct(0.5),
            "p90_seconds": pct(0.9),
            "p99_seconds": pct(0.99),
            "mean_attempts": float(attempts.mean()) if len(attempts) else 0.0,
            "max_attempts": int(attempts.max()) if len(attempts) else 0,
            "retried_invoices": int((attempts > 1).sum()),
        }
    )


report_assets = [vendor_spend, duplicate_report, processing_latency]
