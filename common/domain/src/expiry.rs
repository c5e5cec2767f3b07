//! Expiry and renewal of completions (design §16): a flow's validity (calendar months or days)
//! and renewal window (days before expiry). A completion of such a flow expires at its
//! completion time plus the validity on the organization's calendar (same local time; a month
//! end clamps, 31 January + 1 month is the last day of February); the scheduler assigns its
//! renewal when the window opens (`flow.expiring`) and records the expiry (`flow.expired`) unless
//! the renewal was completed in time.

use serde::{Deserialize, Serialize};

use crate::Invalid;

/// Longest validity in months.
pub const MAX_VALID_MONTHS: i32 = 120;

/// Longest validity in days.
pub const MAX_VALID_DAYS: i32 = 3650;

/// Longest renewal window in days.
pub const MAX_RENEW_BEFORE_DAYS: i32 = 365;

/// How long a completion of a flow stays valid: exactly one of `months` and `days`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Validity {
    /// Calendar months (1 to 120).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub months: Option<i32>,
    /// Days (1 to 3650).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub days: Option<i32>,
}

impl Validity {
    /// Checks a validity: exactly one unit, within its bounds.
    pub fn checked(self) -> Result<Self, Invalid> {
        match (self.months, self.days) {
            (Some(months), None) if (1..=MAX_VALID_MONTHS).contains(&months) => Ok(self),
            (Some(_), None) => Err(Invalid(format!(
                "validFor.months must be between 1 and {MAX_VALID_MONTHS}"
            ))),
            (None, Some(days)) if (1..=MAX_VALID_DAYS).contains(&days) => Ok(self),
            (None, Some(_)) => Err(Invalid(format!(
                "validFor.days must be between 1 and {MAX_VALID_DAYS}"
            ))),
            _ => Err(Invalid::new(
                "validFor must give exactly one of months and days",
            )),
        }
    }

    /// Its shortest length in days (a month counted as 28): a renewal window must be shorter.
    pub fn shortest_days(self) -> i32 {
        self.days.unwrap_or_else(|| self.months.unwrap_or(0) * 28)
    }
}

/// Checks a renewal window: 1 to [`MAX_RENEW_BEFORE_DAYS`] days.
pub fn check_renew_before(days: i32) -> Result<i32, Invalid> {
    if (1..=MAX_RENEW_BEFORE_DAYS).contains(&days) {
        Ok(days)
    } else {
        Err(Invalid(format!(
            "renewBeforeDays must be between 1 and {MAX_RENEW_BEFORE_DAYS}"
        )))
    }
}

/// Checks that a renewal window is shorter than the validity it belongs to.
pub fn check_window(validity: Option<Validity>, renew_before: Option<i32>) -> Result<(), Invalid> {
    match (validity, renew_before) {
        (None, Some(_)) => Err(Invalid::new(
            "renewBeforeDays needs validFor (a flow without a validity does not expire)",
        )),
        (Some(validity), Some(days)) if days >= validity.shortest_days() => Err(Invalid(format!(
            "renewBeforeDays must be less than the validity ({} days, a month counted as 28)",
            validity.shortest_days()
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_validity_has_one_unit_within_bounds() {
        let months = |months| Validity {
            months: Some(months),
            days: None,
        };
        let days = |days| Validity {
            months: None,
            days: Some(days),
        };
        assert!(months(1).checked().is_ok());
        assert!(months(120).checked().is_ok());
        assert!(months(0).checked().is_err());
        assert!(months(121).checked().is_err());
        assert!(days(3650).checked().is_ok());
        assert!(days(3651).checked().is_err());
        assert!(
            Validity {
                months: None,
                days: None
            }
            .checked()
            .is_err()
        );
        assert!(
            Validity {
                months: Some(1),
                days: Some(1)
            }
            .checked()
            .is_err()
        );
        assert!(check_window(Some(months(1)), Some(27)).is_ok());
        assert!(check_window(Some(months(1)), Some(28)).is_err());
        assert!(check_window(Some(days(10)), Some(10)).is_err());
        assert!(check_window(None, Some(1)).is_err());
        assert!(check_window(None, None).is_ok());
        assert!(check_renew_before(0).is_err());
        assert!(check_renew_before(366).is_err());
    }
}
