//! Reminder policies (design §16): when the scheduler reminds an assignee of a flow's assignment
//! before and after its due date, and after how many overdue days it escalates to their manager.
//! Each reminder is one `flow.reminder` event, once per (assignment, due date, kind, offset).

use serde::{Deserialize, Serialize};

use crate::Invalid;

/// Most offsets in each list of a policy.
pub const MAX_OFFSETS: usize = 10;

/// Largest offset, in days.
pub const MAX_OFFSET_DAYS: i32 = 365;

string_enum!(
    /// What a reminder is about.
    ReminderKind {
        /// The due date is near (`beforeDueDays`).
        DueSoon => "due_soon",
        /// The due date passed (`afterDueDays`).
        Overdue => "overdue",
        /// Overdue long enough to tell the manager (`escalateAfterDays`).
        Escalation => "escalation",
    }
);

/// A flow's reminder policy, as stored and as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReminderPolicy {
    /// Days before the due date to remind the assignee (e.g. `[7, 1]`).
    #[serde(default)]
    pub before_due_days: Vec<i32>,
    /// Days after the due date to remind them (e.g. `[1, 3, 7]`).
    #[serde(default)]
    pub after_due_days: Vec<i32>,
    /// Days after the due date to escalate to their manager (SCIM enterprise `manager`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalate_after_days: Option<i32>,
}

impl ReminderPolicy {
    /// Checks a policy: each list at most [`MAX_OFFSETS`] offsets of 1 to [`MAX_OFFSET_DAYS`]
    /// days; sorted and without repeats once checked.
    pub fn checked(mut self) -> Result<Self, Invalid> {
        for (field, list) in [
            ("reminders.beforeDueDays", &mut self.before_due_days),
            ("reminders.afterDueDays", &mut self.after_due_days),
        ] {
            if list.len() > MAX_OFFSETS {
                return Err(Invalid(format!(
                    "{field} must hold at most {MAX_OFFSETS} offsets"
                )));
            }
            if list
                .iter()
                .any(|days| !(1..=MAX_OFFSET_DAYS).contains(days))
            {
                return Err(Invalid(format!(
                    "{field} must hold days between 1 and {MAX_OFFSET_DAYS}"
                )));
            }
            list.sort_unstable();
            list.dedup();
        }
        if self
            .escalate_after_days
            .is_some_and(|days| !(1..=MAX_OFFSET_DAYS).contains(&days))
        {
            return Err(Invalid(format!(
                "reminders.escalateAfterDays must be between 1 and {MAX_OFFSET_DAYS}"
            )));
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_is_sorted_deduplicated_and_bounded() {
        let policy = ReminderPolicy {
            before_due_days: vec![7, 1, 7],
            after_due_days: vec![3, 1],
            escalate_after_days: Some(5),
        }
        .checked()
        .unwrap();
        assert_eq!(policy.before_due_days, [1, 7]);
        assert_eq!(policy.after_due_days, [1, 3]);
        for bad in [
            ReminderPolicy {
                before_due_days: vec![0],
                after_due_days: vec![],
                escalate_after_days: None,
            },
            ReminderPolicy {
                before_due_days: vec![],
                after_due_days: (1..=11).collect(),
                escalate_after_days: None,
            },
            ReminderPolicy {
                before_due_days: vec![],
                after_due_days: vec![],
                escalate_after_days: Some(366),
            },
        ] {
            assert!(bad.checked().is_err());
        }
    }
}
