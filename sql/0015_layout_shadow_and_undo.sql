-- Vendor layouts run in shadow until a person approved an invoice read with them, and a
-- rejection undoes what an invoice taught (issue 37; invoice_pipeline/engine/layouts.py).
--
-- state: 'shadow' (read beside template-free reading, its values never used; a disagreement holds
-- the invoice) or 'active' (read first). A new version (learnt, or imported) starts in shadow.
-- Versions stored before this migration: the learnt ones stay active (people's decisions taught
-- them and pages are read with them today); the imported ones (learnt from no invoice) go to
-- shadow, as an import does from now on.
ALTER TABLE vendor_layouts
    ADD COLUMN state text NOT NULL DEFAULT 'active' CHECK (state IN ('shadow', 'active'));
UPDATE vendor_layouts SET state = 'shadow' WHERE learnt_from IS NULL;
ALTER TABLE vendor_layouts ALTER COLUMN state SET DEFAULT 'shadow';

-- What people's decisions did to layouts beyond learning them (the version rows record that):
-- an approval that activated a shadow version, a rejection that undid a version learnt from the
-- rejected invoice and restored the version it had superseded.
CREATE TABLE vendor_layout_events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    layout_id  bigint NOT NULL REFERENCES vendor_layouts (id),
    org_id     text NOT NULL,
    event      text NOT NULL CHECK (event IN ('activated', 'undone', 'restored')),
    invoice_id uuid REFERENCES invoices (id),
    actor      text NOT NULL CHECK (actor <> ''),
    at         timestamptz NOT NULL DEFAULT now(),
    detail     text NOT NULL
);
CREATE INDEX vendor_layout_events_layout ON vendor_layout_events (layout_id, at);
