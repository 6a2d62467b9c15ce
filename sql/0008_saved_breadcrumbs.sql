-- A crash costs seconds, not a chunk (issue 19): stages save each finished document's result
-- within about a second, and the audit trail says what was saved.
--
-- 'started'  a stage began the invoice (written when the stage starts its chunk; it moves
--            invoices.processing_stage);
-- 'executed' the stage's result was saved: written in the same fenced transaction as the
--            result (the text, the fields, the decision, the verdict, the posting, or the
--            quarantine), so it is never recorded for work a crash threw away;
-- 'skipped'  the stage found its result saved before and fast-forwarded.
-- Rows written before this migration used 'executed' for what is now 'started'.
ALTER TABLE step_events DROP CONSTRAINT step_events_event_check;
ALTER TABLE step_events
    ADD CONSTRAINT step_events_event_check CHECK (event IN ('started', 'executed', 'skipped'));
