"""The Dagster adapter: definitions, ops, jobs, sensors, schedules, assets, resources, and the
Dagster home and storage. Everything here drives the engine (invoice_pipeline/engine)."""
