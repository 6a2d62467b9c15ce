-- The review page's login lockouts (issue 41; invoice_pipeline/review_ui/auth.py LoginThrottle).
-- After repeated wrong passwords an account is locked for a while; each lockout is also a row
-- here, so that a person can see who was being guessed, from where and when, after the page's
-- memory (and its log) is gone. Append-only: nothing updates or deletes a row.

CREATE TABLE review_login_lockouts (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The account name, as the users file has it (a lockout is only ever of a known account).
    reviewer        text NOT NULL CHECK (reviewer <> ''),
    -- The client address of the failure that locked it (the proxy's, behind one).
    client_address  text NOT NULL,
    failures        integer NOT NULL CHECK (failures >= 1),
    locked_at       timestamptz NOT NULL DEFAULT now(),
    locked_until    timestamptz NOT NULL
);

CREATE INDEX review_login_lockouts_reviewer ON review_login_lockouts (reviewer, locked_at);
