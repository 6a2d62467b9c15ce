-- What the steps of one run pass each other when they run on several hosts (the celery
-- scale-out, docs/scale-out.md): plain JSON in the invoice database, the one thing every host
-- reaches; never pickles, never a local disk. Keyed by Dagster's output identifier
-- (run id / step / output name).
CREATE TABLE IF NOT EXISTS dagster_step_outputs (
    key        text PRIMARY KEY,
    run_id     text NOT NULL,
    value      jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS dagster_step_outputs_by_run ON dagster_step_outputs (run_id);
