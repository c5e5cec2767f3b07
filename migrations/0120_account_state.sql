-- Dashboard accounts can be disabled, and every session of an account can be ended at once on
-- every replica: a session remembers its account's session generation at sign-in, and each page
-- request compares it with the account's, which moves on when the account is disabled or demoted
-- and when its password is set or reset.
ALTER TABLE dashboard_accounts
    ADD COLUMN disabled_at        TIMESTAMPTZ,
    ADD COLUMN session_generation BIGINT NOT NULL DEFAULT 0;
