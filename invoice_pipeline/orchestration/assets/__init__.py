from invoice_pipeline.orchestration.assets.checks import invariant_checks
from invoice_pipeline.orchestration.assets.lineage import pipeline_assets
from invoice_pipeline.orchestration.assets.reports import report_assets

__all__ = ["invariant_checks", "pipeline_assets", "report_assets"]
