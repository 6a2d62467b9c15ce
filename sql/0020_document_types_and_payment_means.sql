-- How a posted invoice is settled (issue 58; domain/doctypes.py, docs/formats.md "Payment means").
--
-- A direct-debit invoice (payment means 49/59, a mandate BG-19) is collected by the seller from
-- the buyer's account: posted as if it were a transfer to make, it was paid twice, once by the
-- transfer and once by the debit. The posting records the means ("transfer", "direct_debit",
-- "card", "cash", "cheque", "clearing", "other"; NULL: the document names none, as every posting
-- before this file), and the export passes it on.
--
-- The document type code (BT-3) and the payment means code itself stay in invoices.fields (JSON):
-- nothing queries them by column.

ALTER TABLE ledger_postings ADD COLUMN payment_means text;
