-- Step outputs passed between hosts (invoice_pipeline/engine/store/step_outputs.py).

-- name: save_step_output
INSERT INTO dagster_step_outputs (key, run_id, value) VALUES (%(key)s, %(run_id)s, %(value)s)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value

-- name: load_step_output
SELECT value FROM dagster_step_outputs WHERE key = %(key)s

-- name: connected_from
SELECT host(inet_client_addr()) AS address
