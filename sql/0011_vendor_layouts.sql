-- Vendor layouts learnt from a person's decisions (issue 23; invoice_pipeline/documents/reading/
-- layouts.py, invoice_pipeline/engine/layouts.py). A correction or an approval of a page-read
-- invoice teaches how that vendor's page is read: per field, the anchor text near the value and
-- the value's position relative to it. Each row is one version of one vendor's layout in one
-- organisation: no query reads another organisation's rows.
--
-- A version is never rewritten: a correction that contradicts it makes a new version, and the
-- old one is disabled as superseded. What changes in place is only whether it is enabled (a
-- person disables one) and how often a decision confirmed it.

CREATE TABLE vendor_layouts (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id            text NOT NULL CHECK (org_id <> ''),
    -- vat:<id>, iban:<iban> or name:<normalised name>: must be printed on a page to apply to it.
    vendor_key        text NOT NULL CHECK (vendor_key ~ '^(vat|iban|name):.+$'),
    version           integer NOT NULL CHECK (version >= 1),
    -- The layout itself, as exported (docs/layouts.md): fingerprint, rules, the vendor's names.
    layout            jsonb NOT NULL,
    -- The invoice it was learnt from (NULL when imported), who taught it, when.
    learnt_from       uuid REFERENCES invoices (id),
    taught_by         text NOT NULL CHECK (taught_by <> ''),
    taught_at         timestamptz NOT NULL DEFAULT now(),
    enabled           boolean NOT NULL DEFAULT true,
    disabled_reason   text,
    superseded_by     bigint REFERENCES vendor_layouts (id),
    confirmations     integer NOT NULL DEFAULT 0 CHECK (confirmations >= 0),
    last_confirmed_at timestamptz,
    UNIQUE (org_id, vendor_key, version),
    CHECK (enabled OR disabled_reason IS NOT NULL)
);

-- What the field-extraction stage reads, once per chunk: an org's enabled layouts.
CREATE INDEX vendor_layouts_enabled ON vendor_layouts (org_id, vendor_key) WHERE enabled;
