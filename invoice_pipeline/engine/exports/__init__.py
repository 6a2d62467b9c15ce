"""Delivering ledger postings to the books (issue 56; docs/exports.md): the DATEV and webhook
targets, and the delivery loop over the outbox that `invoice-pipeline export run` and the
Dagster delivery job both call."""
