-- Dashboard accounts: people of one organization who sign in to the dashboard. An e-mail address
-- names one account across every organization, so signing in needs no organization picker.
CREATE TABLE dashboard_accounts (
    id               UUID PRIMARY KEY,
    org_id           UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    email            TEXT NOT NULL CHECK (length(email) BETWEEN 3 AND 320),
    email_normalized TEXT NOT NULL UNIQUE,
    role             TEXT NOT NULL CHECK (role IN ('admin', 'viewer')),
    -- argon2id PHC string; NULL until the person has set a password through a sign-in link.
    password_hash    TEXT,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX dashboard_accounts_org_idx ON dashboard_accounts (org_id, created_at);

-- One-time sign-in links (invitations and password resets): only a SHA-256 of the token is kept.
CREATE TABLE dashboard_sign_in_links (
    token_hash BYTEA PRIMARY KEY,
    account_id UUID NOT NULL REFERENCES dashboard_accounts (id) ON DELETE CASCADE,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL,
    used_at    TIMESTAMPTZ
);
CREATE INDEX dashboard_sign_in_links_account_idx ON dashboard_sign_in_links (account_id);

-- Dashboard sessions (the tower-sessions record as JSON), shared by every API replica.
CREATE TABLE dashboard_sessions (
    id         TEXT PRIMARY KEY,
    data       JSONB NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX dashboard_sessions_expiry_idx ON dashboard_sessions (expires_at);

-- Failed sign-in attempts, counted per account e-mail and per client address to throttle
-- guessing across every replica.
CREATE UNLOGGED TABLE dashboard_sign_in_failures (
    scope     TEXT NOT NULL CHECK (scope IN ('account', 'address')),
    subject   TEXT NOT NULL,
    failed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX dashboard_sign_in_failures_idx ON dashboard_sign_in_failures (scope, subject, failed_at);
