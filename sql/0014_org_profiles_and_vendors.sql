-- Who is paid (issue 37; invoice_pipeline/domain/identity.py, engine/store/vendors.py,
-- docs/vendors.md). Three things the organisation knows and the page does not:
--
-- * its own identity (org_identities): the legal names, VAT ids, tax numbers and IBANs it is
--   known by. It is the buyer on every invoice it receives, so the reader never takes these for
--   the seller's;
-- * its vendor registry (vendors, vendor_identifiers): who it pays, with the identifiers and
--   bank accounts that confirm an invoice's seller, and the source of each entry: a structured
--   e-invoice, a person's approval, or an import of the ERP's vendor master;
-- * what happened to the registry (vendor_events), for the audit.
--
-- Every row carries its org_id, and an identifier references its vendor by (org_id, id): one
-- org's identifier can never point at another org's vendor.

CREATE TABLE org_identities (
    org_id   text NOT NULL CHECK (org_id <> ''),
    kind     text NOT NULL CHECK (kind IN ('name', 'vat', 'tax', 'iban')),
    -- Normalised (domain/identity.normalise): what comparisons use.
    value    text NOT NULL CHECK (value <> ''),
    shown    text NOT NULL,
    source   text NOT NULL CHECK (source <> ''),
    added_by text NOT NULL CHECK (added_by <> ''),
    added_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, kind, value)
);

CREATE TABLE vendors (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id           text NOT NULL CHECK (org_id <> ''),
    name             text NOT NULL CHECK (name <> ''),
    default_currency text CHECK (default_currency ~ '^[A-Z]{3}$'),
    source           text NOT NULL CHECK (source IN ('e-invoice', 'approval', 'import')),
    created_by       text NOT NULL CHECK (created_by <> ''),
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (org_id, id)
);

CREATE TABLE vendor_identifiers (
    org_id      text NOT NULL,
    vendor_id   bigint NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('name', 'vat', 'tax', 'iban')),
    value       text NOT NULL CHECK (value <> ''),
    shown       text NOT NULL,
    source      text NOT NULL CHECK (source IN ('e-invoice', 'approval', 'import')),
    added_by    text NOT NULL CHECK (added_by <> ''),
    -- The invoice whose approval or posting taught it (NULL for an import).
    learnt_from uuid REFERENCES invoices (id),
    added_at    timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (org_id, vendor_id) REFERENCES vendors (org_id, id),
    PRIMARY KEY (org_id, vendor_id, kind, value)
);
-- A VAT id, tax number or IBAN names one vendor of an org, never two (a name may be shared:
-- it confirms nothing).
CREATE UNIQUE INDEX vendor_identifiers_owner ON vendor_identifiers (org_id, kind, value) WHERE kind <> 'name';

CREATE TABLE vendor_events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id     text NOT NULL,
    vendor_id  bigint NOT NULL,
    event      text NOT NULL CHECK (event IN ('registered', 'identifier_added', 'imported')),
    detail     text NOT NULL,
    actor      text NOT NULL CHECK (actor <> ''),
    invoice_id uuid REFERENCES invoices (id),
    at         timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (org_id, vendor_id) REFERENCES vendors (org_id, id)
);
CREATE INDEX vendor_events_by_vendor ON vendor_events (org_id, vendor_id, at);

-- Whether a vendor's first structured e-invoice registers it by itself (the default), or is
-- held as vendor_unconfirmed like a page-read one.
ALTER TABLE review_policies ADD COLUMN register_einvoice_vendors boolean NOT NULL DEFAULT true;

-- A posting says whom it pays and for what, not only how much.
ALTER TABLE ledger_postings
    ADD COLUMN vendor_id      bigint REFERENCES vendors (id),
    ADD COLUMN invoice_number text,
    ADD COLUMN issue_date     date,
    ADD COLUMN due_date       date,
    ADD COLUMN iban           text;

-- Quarantine is for unusable files. A legible page whose number, total or seller was not read
-- (or a scan read with low confidence) was quarantined before this version; it is due again,
-- and the pipeline now holds it for review with a reason per unread field. Its stored text
-- (and fields) fast-forward the expensive stages: nothing is OCRed again.
UPDATE invoices i
-- A redrive, like `requeue`: a new run key, since Dagster skips a key it has seen.
SET status = 'pending', quarantine_code = NULL, quarantine_reason = NULL, attempts = 0, redrives = i.redrives + 1,
    next_attempt_at = now(), requested_at = NULL, requested_by = NULL,
    last_error = 'was quarantined as ' || i.quarantine_code || '; due again: a legible page is held for review (sql/0014)',
    updated_at = now()
FROM extracted_texts t
WHERE t.invoice_id = i.id
  AND i.status = 'quarantined'
  AND t.format IN ('pdf', 'image')
  AND i.quarantine_code IN ('missing_invoice_number', 'missing_total', 'missing_seller', 'illegible_scan',
                            'bad_date', 'bad_amount', 'amount_too_large', 'unknown_currency');
