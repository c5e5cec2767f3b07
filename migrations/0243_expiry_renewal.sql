-- Expiry and renewal (design §16): a flow may carry a validity (calendar months or days) and a
-- renewal window (days before expiry). A completion of such a flow gets `expires_at` (completion
-- + validity in the organization's time zone), fixed when it completes. The scheduler claims each
-- step by a conditional update of the assignment in the transaction that writes its event:
-- `renewal_id` (the renewal assignment's derived id, with `flow.expiring`) and
-- `expiry_settled_at` (with `flow.expired` and `expired_at`, or without when the renewal was
-- completed in time or the user is deactivated), so two schedulers, retries and kills act once.
ALTER TABLE flows
    ADD COLUMN valid_for_months  INTEGER CHECK (valid_for_months BETWEEN 1 AND 120),
    ADD COLUMN valid_for_days    INTEGER CHECK (valid_for_days BETWEEN 1 AND 3650),
    ADD COLUMN renew_before_days INTEGER CHECK (renew_before_days BETWEEN 1 AND 365),
    ADD CONSTRAINT flows_validity_one_unit
        CHECK (valid_for_months IS NULL OR valid_for_days IS NULL),
    -- The window must be shorter than the validity (a month counted as its shortest, 28 days).
    ADD CONSTRAINT flows_renewal_window CHECK (
        renew_before_days IS NULL
        OR renew_before_days < COALESCE(valid_for_days, valid_for_months * 28, 0));

ALTER TABLE assignments
    ADD COLUMN expires_at        TIMESTAMPTZ,
    -- When the renewal window opens: `expires_at` minus the flow's `renew_before_days` local
    -- days (or `expires_at`), set with it at completion and again when the flow's window changes,
    -- so the renewal scan reads only the completions whose window is open.
    ADD COLUMN renew_at          TIMESTAMPTZ,
    ADD COLUMN renewal_id        UUID,
    ADD COLUMN expiry_settled_at TIMESTAMPTZ,
    ADD COLUMN expired_at        TIMESTAMPTZ;

-- The renewal scan reads the completions not renewed yet whose window is open, by `renew_at`; the expiry scan those not
-- settled yet. Each step leaves its index once done.
CREATE INDEX assignments_renewal_scan_idx ON assignments (renew_at)
    WHERE renew_at IS NOT NULL AND renewal_id IS NULL AND expiry_settled_at IS NULL;
CREATE INDEX assignments_expiry_scan_idx ON assignments (expires_at)
    WHERE expires_at IS NOT NULL AND expiry_settled_at IS NULL;
-- `renewalOf` of a renewal assignment.
CREATE INDEX assignments_renewal_of_idx ON assignments (renewal_id) WHERE renewal_id IS NOT NULL;
