-- Fencing of webhook deliveries. Every claim (the fan-out that creates a delivery, a due retry, a
-- takeover of an expired lease) sets a new claim token; the outcome, deferral and lease-renewal
-- writes apply only while the row still carries the writer's token. A worker whose lease was
-- taken over therefore cannot overwrite the new owner's result (a stale 'failed' over
-- 'succeeded'), and an outcome is never recorded twice. Recording an outcome clears the token.
ALTER TABLE webhook_deliveries ADD COLUMN claim_token UUID;
