//! What a report costs against the organization's report limit: a large page or a large export
//! reads more, so it counts as several requests. The API charges the page before reading and the
//! export once it knows how many rows the file will hold.

/// Rows of an inline page that cost one report request.
const PAGE_ROWS_PER_REQUEST: i64 = 1_000;
/// Rows of an export that cost one more report request.
const EXPORT_ROWS_PER_REQUEST: i64 = 10_000;

/// Requests a page of `limit` rows costs: one per started 1,000 rows.
pub fn page(limit: i64, allowance: u32) -> u32 {
    capped(ceil_div(limit, PAGE_ROWS_PER_REQUEST), allowance)
}

/// Further requests an export of `rows` rows costs (one per started 10,000 rows); `None` when it
/// costs nothing beyond its page.
pub fn export(rows: i64, allowance: u32) -> Option<u32> {
    let cost = ceil_div(rows, EXPORT_ROWS_PER_REQUEST);
    (cost > 0).then(|| capped(cost, allowance))
}

/// `value / divisor` rounded up, for non-negative values.
fn ceil_div(value: i64, divisor: i64) -> i64 {
    (value.max(0) + divisor - 1) / divisor
}

/// A cost never above the allowance: a bucket of `allowance` tokens could never grant more, so a
/// larger request takes the whole allowance instead of being refused forever.
fn capped(cost: i64, allowance: u32) -> u32 {
    u32::try_from(cost)
        .unwrap_or(u32::MAX)
        .clamp(1, allowance.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_started_block_of_rows_costs_one_request() {
        assert_eq!(page(1, 50), 1);
        assert_eq!(page(1_000, 50), 1);
        assert_eq!(page(1_001, 50), 2);
        assert_eq!(page(10_000, 5), 5, "never more than the allowance");
        assert_eq!(export(0, 50), None);
        assert_eq!(export(25_000, 50), Some(3));
        assert_eq!(export(1_000_000, 50), Some(50));
    }
}
