"""The engine: stages, the store, leases, runs, ingest, review actions, dedupe and the sweep.

Dagster-free (invoice_pipeline_tests/test_architecture.py checks it): the Dagster adapter in
invoice_pipeline/orchestration drives it, and so do the CLI and the tests.
"""
