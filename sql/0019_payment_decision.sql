-- Money decided at posting, under the lock (issue 52; invoice_pipeline/domain/payment.py,
-- engine/store/payments.py, docs/vendors.md "How the payment is decided").
--
-- Who is paid is decided in the fenced transaction that posts, under advisory locks on the
-- identity keys it depends on, from the registry as it is at that moment. Two things must be
-- kept for that decision and for the audit:
--
-- * what a person vouched for when approving (approvals.vouched): each reason they were shown,
--   as "code<US>subject" (the IBAN, the vendor, the identity the reason is about). A reason of
--   the posting's moment that is not among them holds the invoice again;
-- * what the ledger paid against: the registry's name and VAT id of the vendor at posting time,
--   beside the seller name and VAT id the document printed.

ALTER TABLE approvals ADD COLUMN vouched text[] NOT NULL DEFAULT '{}';

ALTER TABLE ledger_postings
    ADD COLUMN registered_name text,
    ADD COLUMN registered_vat_id text,
    ADD COLUMN printed_seller_name text,
    ADD COLUMN printed_seller_vat_id text;
