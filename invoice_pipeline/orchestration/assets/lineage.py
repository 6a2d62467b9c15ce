"""The pipeline's data as assets, so the Lineage page shows the chain.

They are materialized by the stages of process_invoice (one event per invoice, with its id in
the metadata), not by asset jobs: the unit of work is an invoice under its lock.
"""

from dagster import AssetSpec

from invoice_pipeline.engine.stages import (
    ASSET_APPROVALS,
    ASSET_DOCUMENTS,
    ASSET_DUPLICATES,
    ASSET_FIELDS,
    ASSET_LEDGER,
    ASSET_TEXT,
)

GROUP = "invoice_pipeline"

_CHAIN = [
    (ASSET_DOCUMENTS, "Original invoice files, stored by SHA-256 before anything can fail on them."),
    (ASSET_TEXT, "Text (and embedded XML) read from each document: the expensive, checkpointed step."),
    (ASSET_FIELDS, "Invoice number, dates, totals and parties, each with its source and confidence."),
    (ASSET_DUPLICATES, "Original or duplicate, decided under the business key's advisory lock."),
    (ASSET_APPROVALS, "Approval decisions: valid originals approved, duplicates rejected."),
    (ASSET_LEDGER, "Ledger postings: at most one per invoice."),
]

# Upstream first: the chain an invoice's data goes through.
PIPELINE_ASSET_KEYS = tuple(key for key, _ in _CHAIN)

pipeline_assets = [
    AssetSpec(
        key,
        description=description,
        deps=[_CHAIN[i - 1][0]] if i else [],
        group_name=GROUP,
        kinds={"postgres"},
    )
    for i, (key, description) in enumerate(_CHAIN)
]
