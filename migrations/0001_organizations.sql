-- Tenants. Every other row belongs to exactly one organization.
CREATE TABLE organizations (
    id                      UUID PRIMARY KEY,
    name                    TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    tier                    TEXT NOT NULL DEFAULT 'standard' CHECK (tier IN ('standard', 'enterprise')),
    timezone                TEXT NOT NULL DEFAULT 'UTC',
    -- Per-organization overrides of the tier's per-minute limits (NULL = tier default).
    assign_limit_per_minute INTEGER CHECK (assign_limit_per_minute > 0),
    report_limit_per_minute INTEGER CHECK (report_limit_per_minute > 0),
    created_at              TIMESTAMPTZ NOT NULL DEFAULT now()
);
