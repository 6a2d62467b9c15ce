"""The pipeline's data as assets, so the Lineage page shows the chain.

They are materialized by the stage ops (one event per asset and chunk, with the invoice ids in
the metadata), not by asset jobs: the unit of work is an invoice under its lock. The engine's
stages know nothing of assets; STAGE_ASSETS says which a stage's op materializes.
"""

from collections.abc import Mapping

from dagster import AssetSpec

GROUP = "invoice_pipeline"

ASSET_DOCUMENTS = "invoice_documents"
ASSET_TEXT = "extracted_text"
ASSET_FIELDS = "invoice_fields"
ASSET_DUPLICATES = "duplicate_decisions"
ASSET_APPROVALS = "approvals"
ASSET_LEDGER = "ledger_postings"

# By the engine's stage name (stages.STAGES); validate stores nothing of its own, so it has none.
STAGE_ASSETS: Mapping[str, tuple[str, ...]] = {
    "extract_text": (ASSET_DOCUMENTS, ASSET_TEXT),
    "extract_fields": (ASSET_FIELDS,),
    "validate": (),
    "detect_duplicates": (ASSET_DUPLICATES,),
    "approve": (ASSET_APPROVALS,),
    "post_to_ledger": (ASSET_LEDGER,),
}

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
