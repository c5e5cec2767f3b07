-- A rolled key keeps working until its expiry, so callers can switch to the new key first.
ALTER TABLE api_keys ADD COLUMN expires_at TIMESTAMPTZ;
