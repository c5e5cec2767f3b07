-- Shared rate-limit state: one GCRA "theoretical arrival time" per organization and operation.
-- API replicas lease tokens from it in small batches, so a request rarely touches the database.
CREATE UNLOGGED TABLE rate_limit_counters (
    org_id    UUID NOT NULL,
    operation TEXT NOT NULL,
    tat       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (org_id, operation)
);

-- Takes up to p_want tokens (at least p_need, else none) from the bucket of (p_org, p_op), whose
-- capacity is p_limit tokens per p_window_ms, refilled smoothly.
-- Returns what was granted, how long until p_need tokens are available when none were granted,
-- how long until the bucket is full again, and what remains.
CREATE FUNCTION rate_limit_take(
    p_org UUID, p_op TEXT, p_limit INTEGER, p_window_ms BIGINT, p_want INTEGER, p_need INTEGER
) RETURNS TABLE (granted INTEGER, wait_ms BIGINT, reset_ms BIGINT, remaining INTEGER)
LANGUAGE plpgsql AS $$
DECLARE
    now_ts   TIMESTAMPTZ := clock_timestamp();
    step_us  DOUBLE PRECISION := p_window_ms * 1000.0 / p_limit;
    cur      TIMESTAMPTZ;
    base     TIMESTAMPTZ;
    avail    BIGINT;
    g        INTEGER := 0;
BEGIN
    INSERT INTO rate_limit_counters (org_id, operation, tat) VALUES (p_org, p_op, now_ts)
    ON CONFLICT (org_id, operation) DO NOTHING;
    SELECT c.tat INTO cur FROM rate_limit_counters c
    WHERE c.org_id = p_org AND c.operation = p_op FOR UPDATE;
    base := greatest(cur, now_ts);
    avail := floor(extract(epoch FROM (now_ts + p_window_ms * interval '1 millisecond' - base)) * 1e6 / step_us);
    IF avail >= p_need THEN
        g := least(p_want::BIGINT, avail)::INTEGER;
        base := base + (g * step_us) * interval '1 microsecond';
        UPDATE rate_limit_counters SET tat = base WHERE org_id = p_org AND operation = p_op;
    END IF;
    granted := g;
    IF g = 0 THEN
        wait_ms := ceil(extract(epoch FROM (base + (p_need * step_us) * interval '1 microsecond'
                        - (now_ts + p_window_ms * interval '1 millisecond'))) * 1000);
    ELSE
        wait_ms := 0;
    END IF;
    reset_ms := greatest(0, ceil(extract(epoch FROM (base - now_ts)) * 1000));
    remaining := greatest(0, avail - g)::INTEGER;
    RETURN NEXT;
END;
$$;
