-- A person corrects fields in review (issue 22): `correct` joins the audited actions, and an
-- action records the values it changed, before and after (field name -> value, as JSON).
-- Only a correction fills them today; the other actions' before and after are their statuses.

ALTER TABLE review_actions DROP CONSTRAINT review_actions_action_check;
ALTER TABLE review_actions ADD CONSTRAINT review_actions_action_check
    CHECK (action IN ('approve', 'reject', 'not_duplicate', 'confirm_duplicate', 'requeue', 'correct'));
ALTER TABLE review_actions ADD COLUMN values_before jsonb;
ALTER TABLE review_actions ADD COLUMN values_after jsonb;

-- The review page's queue orders by coalesce(review_since, updated_at) (as review_targets
-- does), which the index of 0006 on review_since alone cannot serve: one page at a time.
CREATE INDEX invoices_review_queue_by_wait
    ON invoices ((coalesce(review_since, updated_at)), seq) WHERE status = 'needs_review';
