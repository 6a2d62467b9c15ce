-- A request belongs to a run: who was asked to process the invoice, not only when.
--
-- requested_by names the Dagster run (or run key) that a request is waiting for, scoped to the
-- Dagster instance that will run it (invoice_pipeline/requests.py: RequestOwner). When the sweep
-- finds that run ended or dead without claiming the invoice, it releases the request at once,
-- instead of waiting out the request timeout (an hour by default). NULL: an owner nobody
-- recorded (a request made before this migration, or by a caller that names none); only the
-- timeout frees those.
ALTER TABLE invoices ADD COLUMN requested_by text;

-- The sweep reads the open requests by owner on every tick; there are few of them at any time.
CREATE INDEX invoices_open_requests ON invoices (requested_by)
    WHERE requested_at IS NOT NULL AND status IN ('pending', 'failed');
