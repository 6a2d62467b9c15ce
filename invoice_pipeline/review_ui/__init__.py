"""The review page (`invoice-pipeline review-ui`): an adapter over the engine's review functions.

Parts over a small web core (web.py; app.py wires them). Only the CLI imports this package
(`invoice_pipeline_tests/test_architecture.py`).
"""
