-- A corrected invoice (UNTDID 1001 type 384 and its kin, domain/doctypes.py) replaces or reverses
-- the invoice it refers to (BT-25), as the person who approves it chooses; it is never paid on
-- top of it (issue 58; domain/corrected_invoices.py, docs/formats.md "Corrections").
--
-- The approval records the choice and the original it found; the posting books the difference
-- that brings what the ledger holds for that original (its own posting plus every correction's)
-- to the correction's amount due ("replace") or to zero ("reverse"), under an advisory lock on the
-- original (store/payments.py), so two corrections of one original are booked one after the other.

ALTER TABLE approvals
    ADD COLUMN correction_choice   text CHECK (correction_choice IN ('replace', 'reverse')),
    ADD COLUMN corrects_invoice_id uuid REFERENCES invoices (id),
    ADD CONSTRAINT approvals_correction_names_its_original
        CHECK ((correction_choice IS NULL) = (corrects_invoice_id IS NULL));

ALTER TABLE ledger_postings
    ADD COLUMN correction_choice   text CHECK (correction_choice IN ('replace', 'reverse')),
    ADD COLUMN corrects_invoice_id uuid REFERENCES invoices (id),
    ADD CONSTRAINT ledger_postings_correction_names_its_original
        CHECK ((correction_choice IS NULL) = (corrects_invoice_id IS NULL)),
    -- A correction is booked against an original, never against another correction: the chain
    -- of what is booked for an invoice is one level deep, so one sum reads it.
    ADD CONSTRAINT ledger_postings_correction_not_of_itself CHECK (corrects_invoice_id <> invoice_id);

CREATE INDEX ledger_postings_by_corrected_invoice
    ON ledger_postings (corrects_invoice_id) WHERE corrects_invoice_id IS NOT NULL;
