"""What the tests, the benchmarks and the chaos suite share: process and database helpers,
document factories, the hostile-input corpus, the secrets scanner and a real run worker
(`python -m pipeline_support.run_worker INVOICE_ID`).

Nothing here imports invoice_pipeline_tests: benchmarks and chaos scenarios import no test modules.
"""
