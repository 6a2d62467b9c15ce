"""`python -m invoice_pipeline.cli`: the `invoice-pipeline` command."""

from invoice_pipeline.cli.parser import console

console()
