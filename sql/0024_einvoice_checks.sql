-- EN 16931 validation of structured e-invoices (issue 55; documents/einvoice_rules.py,
-- domain/einvoice.py). One row per checked invoice: the rule set that ran, its version and the
-- profile the document declares (or, rule_set '', why none ran); and one row per failed assertion.
-- Written with the fields (the extract_fields stage) and replaced when they are read again. The
-- hold itself is a review reason (einvoice_invalid), decided like every hold; the findings are
-- also in invoices.fields (einvoice_check), which the reasons are computed from.
CREATE TABLE einvoice_checks (
    invoice_id       uuid PRIMARY KEY REFERENCES invoices (id),
    job_id           uuid NOT NULL REFERENCES processing_jobs (id),
    rule_set         text NOT NULL,
    rule_set_version text NOT NULL,
    profile          text NOT NULL,
    skipped          text NOT NULL DEFAULT '',
    fatal_count      integer NOT NULL CHECK (fatal_count >= 0),
    warning_count    integer NOT NULL CHECK (warning_count >= 0),
    checked_at       timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE einvoice_findings (
    invoice_id uuid NOT NULL REFERENCES einvoice_checks (invoice_id) ON DELETE CASCADE,
    position   integer NOT NULL,
    rule_id    text NOT NULL,
    flag       text NOT NULL CHECK (flag IN ('fatal', 'warning')),
    text       text NOT NULL,
    location   text NOT NULL,
    PRIMARY KEY (invoice_id, position)
);

-- Where on its page each segment of a hybrid PDF's text layer is (reading.words.TextBoxes JSON):
-- `structured` holds the embedded XML there, and the page is compared with it (issue 55), each
-- disagreeing value shown with the box it was read from. NULL for every other document.
ALTER TABLE extracted_texts ADD COLUMN page_boxes text;
