"""The review queue as a report: what waits for a person, why, for which org, and for how long."""

from datetime import timedelta
from typing import TYPE_CHECKING

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    Config,
    MaterializeResult,
    MetadataValue,
    asset,
    asset_check,
)
from pydantic import Field

from invoice_pipeline.orchestration.resources import InvoiceDatabase

if TYPE_CHECKING:  # imported when the report runs, not by every run worker
    import pandas as pd

GROUP = "reports"
REVIEW_QUEUE = "review_queue"
# Days an invoice may wait for a person before the check warns: payment terms are often 14 or
# 30 days, and an early-payment discount is lost within days.
DEFAULT_MAX_AGE_DAYS = 3.0


def _table(frame: "pd.DataFrame") -> MetadataValue:
    if frame.empty:
        return MetadataValue.md("_no rows_")
    return MetadataValue.md("```\n" + frame.to_string(index=False) + "\n```")


def queue_breakdown(frame: "pd.DataFrame") -> "dict[str, pd.DataFrame]":
    """From one row per (held invoice, reason): counts by reason and by org, and ages."""
    import pandas as pd

    if frame.empty:
        empty = pd.DataFrame(columns=["invoices", "oldest_days"])
        return {"by_reason": empty, "by_org": empty}
    age = frame.assign(age_days=frame["age_days"].astype(float))

    def summarise(key: str) -> "pd.DataFrame":
        grouped = age.groupby(key).agg(
            invoices=("invoice_id", "nunique"),
            oldest_days=("age_days", "max"),
            median_days=("age_days", "median"),
        )
        return grouped.round(2).sort_values("invoices", ascending=False).reset_index()

    return {"by_reason": summarise("reason"), "by_org": summarise("org_id")}


@asset(group_name=GROUP, deps=["approvals"], kinds={"pandas", "postgres"})
def review_queue(context: AssetExecutionContext, invoice_db: InvoiceDatabase) -> MaterializeResult:
    """Invoices held for a person (needs_review): counts by reason and by org, and how long they wait."""
    import pandas as pd

    frame = invoice_db.store.reporting.frame("review_queue_report")
    parts = queue_breakdown(frame)
    ages = (
        frame.drop_duplicates("invoice_id")["age_days"].astype(float)
        if not frame.empty
        else pd.Series(dtype=float)
    )
    by_reason = parts["by_reason"]
    metadata: dict[str, object] = {
        "held_invoices": int(frame["invoice_id"].nunique()) if not frame.empty else 0,
        "oldest_days": float(ages.max()) if len(ages) else 0.0,
        "median_age_days": float(ages.median()) if len(ages) else 0.0,
        "by_reason": _table(by_reason),
        "by_org": _table(parts["by_org"]),
    }
    # One number per reason, so the UI plots each reason's queue over time.
    for row in by_reason.itertuples():
        metadata[f"reason_{row.reason}"] = int(row.invoices)
    return MaterializeResult(metadata=metadata)  # type: ignore[arg-type]


class ReviewQueueAgeConfig(Config):
    max_age_days: float = Field(
        default=DEFAULT_MAX_AGE_DAYS, gt=0, description="Warn when an invoice has waited longer than this"
    )


@asset_check(
    asset=review_queue,
    description="No invoice waits for a person longer than max_age_days (default 3): a warning, not an error.",
)
def review_queue_not_overdue(config: ReviewQueueAgeConfig, invoice_db: InvoiceDatabase) -> AssetCheckResult:
    ids = invoice_db.store.reporting.offending_ids(
        "check_review_queue_age", {"max_age": timedelta(days=config.max_age_days)}
    )
    return AssetCheckResult(
        passed=not ids,
        severity=AssetCheckSeverity.WARN,
        description=(
            f"nothing waits longer than {config.max_age_days:g} day(s)"
            if not ids
            else f"{len(ids)} invoice(s) waiting for a person longer than {config.max_age_days:g} day(s)"
        ),
        metadata={"offending_ids": ", ".join(ids[:100]), "offending_count": len(ids)},
    )


review_queue_assets = [review_queue]
review_queue_checks = [review_queue_not_overdue]
