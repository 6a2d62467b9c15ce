"""Pure domain code: no database, no Dagster. Parsing lives in `invoice_pipeline.documents`."""
