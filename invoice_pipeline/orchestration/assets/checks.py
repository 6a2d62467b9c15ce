"""Asset checks on the invariants the locks exist for. A failing check lists the offending ids."""

from datetime import timedelta

from dagster import AssetCheckResult, AssetCheckSeverity, asset_check

from invoice_pipeline.orchestration.assets.lineage import ASSET_DOCUMENTS, ASSET_DUPLICATES, ASSET_LEDGER
from invoice_pipeline.orchestration.resources import InvoiceDatabase

STUCK_AFTER = timedelta(hours=24)


def _result(offending: list[str], holds: str, broken: str) -> AssetCheckResult:
    return AssetCheckResult(
        passed=not offending,
        severity=AssetCheckSeverity.ERROR,
        description=holds if not offending else f"{broken}: {len(offending)}",
        metadata={"offending_ids": ", ".join(offending[:100]), "offending_count": len(offending)},
    )


@asset_check(asset=ASSET_LEDGER, description="No invoice is posted to the ledger twice.")
def no_invoice_posted_twice(invoice_db: InvoiceDatabase) -> AssetCheckResult:
    return _result(
        invoice_db.store.reporting.offending_ids("check_posted_twice"),
        "every invoice posted at most once",
        "invoices posted twice",
    )


@asset_check(
    asset=ASSET_LEDGER, description="No exact or suspected duplicate is posted: one invoice is paid once."
)
def no_copy_posted(invoice_db: InvoiceDatabase) -> AssetCheckResult:
    return _result(
        invoice_db.store.reporting.offending_ids("check_copies_posted"),
        "no duplicate or suspected duplicate posted",
        "duplicates posted to the ledger (invoice ids)",
    )


@asset_check(
    asset=ASSET_DOCUMENTS,
    description="No running lock is older than the lease TTL (the sweep is keeping up).",
)
def no_stale_running_locks(invoice_db: InvoiceDatabase) -> AssetCheckResult:
    ids = invoice_db.store.reporting.offending_ids(
        "check_stale_running_locks", {"ttl": invoice_db.store.lock_ttl}
    )
    return _result(ids, "no running job past its TTL", "running jobs past their TTL (job ids)")


@asset_check(
    asset=ASSET_DUPLICATES,
    description="Every duplicate group has exactly one original, and every copy points at it.",
)
def one_original_per_duplicate_group(invoice_db: InvoiceDatabase) -> AssetCheckResult:
    ids = invoice_db.store.reporting.offending_ids("check_groups_without_one_original")
    return _result(
        ids, "every group has exactly one original", "groups without exactly one original (group ids)"
    )


@asset_check(
    asset=ASSET_DOCUMENTS, description="No invoice sits without a terminal state for more than 24 hours."
)
def no_stuck_invoices(invoice_db: InvoiceDatabase) -> AssetCheckResult:
    ids = invoice_db.store.reporting.offending_ids("check_stuck_invoices", {"threshold": STUCK_AFTER})
    return _result(ids, "no invoice stuck", "invoices without a terminal state after 24 h (invoice ids)")


invariant_checks = [
    no_invoice_posted_twice,
    no_copy_posted,
    no_stale_running_locks,
    one_original_per_duplicate_group,
    no_stuck_invoices,
]
