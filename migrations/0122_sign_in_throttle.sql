-- Sign-in throttling by a growing delay instead of a hard lock: one row per account e-mail and
-- per client address group (an IPv4 address, an IPv6 /64) with the attempts checked in its
-- current streak and when the last one was checked. An attempt is counted before its password is
-- hashed, under the row's lock, so concurrent guesses count one by one; a correct password takes
-- its attempt back. Throttling state may be lost in a crash (unlogged): that only forgives.
CREATE UNLOGGED TABLE dashboard_sign_in_throttle (
    scope           TEXT NOT NULL CHECK (scope IN ('account', 'address')),
    subject         TEXT NOT NULL,
    failures        INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0),
    last_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, subject)
);
CREATE INDEX dashboard_sign_in_throttle_age_idx ON dashboard_sign_in_throttle (last_attempt_at);

-- The failure log it replaces.
DROP TABLE dashboard_sign_in_failures;
