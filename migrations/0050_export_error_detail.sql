-- A failed export keeps two texts: `error`, worded for the caller (GET /v1/exports/{id} shows it),
-- and `error_detail`, the internal error chain for operators, which callers never see.
ALTER TABLE exports ADD COLUMN error_detail TEXT;

-- Failures recorded before the split carried the internal chain in `error`.
UPDATE exports
SET error_detail = error, error = 'the export could not be generated'
WHERE status = 'failed' AND error LIKE 'the export could not be generated (%';
