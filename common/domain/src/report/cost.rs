//! What a report costs against the organization's report limit: a large page, a detailed page
//! of a flow with many modules, or a large export reads more, so it counts as several requests.
//! The API charges the page before reading, the module progress of a detailed page once it knows
//! the flow, and the export once it knows how many rows the file will hold. A detailed page is
//! also bounded, so that one answer cannot take the API's memory.

use crate::Invalid;

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

/// Most module-progress entries one page of a detailed report may hold: its assignments times
/// the flow's modules.
pub const MAX_DETAILED_ENTRIES: i64 = 100_000;
/// Module-progress entries of a detailed page that cost one more report request.
const DETAILED_ENTRIES_PER_REQUEST: i64 = 10_000;

/// Assignments a page of a detailed report on a flow of `modules` modules holds. `limit` is the
/// page size asked for, or the default when `given` is false: a default too large for the flow
/// shrinks to fit [`MAX_DETAILED_ENTRIES`] (the caller pages with `nextCursor` as ever), while a
/// limit the caller chose is refused, naming the largest that fits.
pub fn detailed_page_limit(limit: i64, given: bool, modules: i64) -> Result<i64, Invalid> {
    let modules = modules.max(1);
    let largest = (MAX_DETAILED_ENTRIES / modules).max(1);
    if limit <= largest {
        return Ok(limit);
    }
    if !given {
        return Ok(largest);
    }
    Err(Invalid(format!(
        "a detailed report holds at most {MAX_DETAILED_ENTRIES} module-progress entries a page \
         (limit × the flow's {modules} modules): use a limit of at most {largest} and follow \
         nextCursor for the next pages"
    )))
}

/// Further requests the module progress of a detailed page of `limit` assignments on a flow of
/// `modules` modules costs: one per started 10,000 entries it may hold.
pub fn detailed(limit: i64, modules: i64, allowance: u32) -> u32 {
    capped(
        ceil_div(
            limit.saturating_mul(modules.max(1)),
            DETAILED_ENTRIES_PER_REQUEST,
        ),
        allowance,
    )
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

    #[test]
    fn a_detailed_page_is_bounded_by_its_entries_and_costs_by_them() {
        assert_eq!(detailed_page_limit(10_000, true, 10), Ok(10_000));
        assert_eq!(detailed_page_limit(1_000, false, 500), Ok(200));
        let refused = detailed_page_limit(201, true, 500).unwrap_err();
        assert!(refused.0.contains("at most 200"), "{refused:?}");
        assert!(
            refused.0.contains("100000 module-progress entries"),
            "{refused:?}"
        );
        assert_eq!(detailed_page_limit(5, true, 1_000_000), Err(Invalid(
            "a detailed report holds at most 100000 module-progress entries a page (limit × the \
             flow's 1000000 modules): use a limit of at most 1 and follow nextCursor for the next \
             pages".to_owned()
        )));
        assert_eq!(detailed(1_000, 2, 50), 1);
        assert_eq!(detailed(200, 500, 50), 10);
        assert_eq!(detailed(200, 500, 5), 5, "never more than the allowance");
    }
}
