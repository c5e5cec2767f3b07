//! Enrollment rules without infrastructure (docs/enrollment-rules.md): the [`Condition`] a rule
//! checks, the [`Profile`] of a user it is checked on, and a checked [`Rule`] with the due date
//! of its assignments. The API evaluates rules right after a user write; the scheduler evaluates
//! what such an evaluation left pending, and runs backfills; both use these.

pub mod condition;

use chrono::{DateTime, Duration, NaiveDate, Utc};

pub use self::condition::Condition;
use crate::ids::{EnrollmentRuleId, FlowId, UserId};
use crate::{DayBound, Priority, parse_date_input};

/// Largest number of days of a rule's due date.
pub const MAX_DUE_DAYS: i32 = 3_650;

/// What a rule's condition looks at on a user.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "sqlx", derive(sqlx::FromRow))]
pub struct Profile {
    /// The user.
    pub id: UserId,
    /// E-mail.
    pub email: String,
    /// Display name.
    pub name: Option<String>,
    /// False once deactivated: never assigned by a rule.
    pub active: bool,
    /// Department.
    pub department: Option<String>,
    /// Job title.
    pub title: Option<String>,
    /// First day at work.
    pub start_date: Option<NaiveDate>,
    /// Ids of the groups the user is a member of.
    pub group_ids: Vec<uuid::Uuid>,
    /// Their display names, lowercased.
    pub group_names: Vec<String>,
}

/// What a due date counts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DueFrom {
    /// The user's start date (the match, for a user without one or whose start date plus the
    /// days has passed).
    StartDate,
    /// The moment the rule matched the user.
    Matched,
}

impl DueFrom {
    /// The name the API and the database use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StartDate => "start_date",
            Self::Matched => "matched",
        }
    }

    /// Reads a stored or requested name; `None` for any other.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "start_date" => Some(Self::StartDate),
            "matched" => Some(Self::Matched),
            _ => None,
        }
    }
}

/// A rule's due date: `days` after `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// Days, 1 to [`MAX_DUE_DAYS`].
    pub days: i32,
    /// What they count from.
    pub from: DueFrom,
}

/// A checked rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Identifier.
    pub id: EnrollmentRuleId,
    /// Name.
    pub name: String,
    /// Condition.
    pub condition: Condition,
    /// Flow.
    pub flow_id: FlowId,
    /// The flow's name as the rule was read (put on its assignments).
    pub flow_name: String,
    /// Due date, if any.
    pub due: Option<Due>,
    /// Priority.
    pub priority: Priority,
    /// Notes.
    pub notes: Option<String>,
    /// Re-assign on a re-match.
    pub reassign: bool,
    /// Cancel the open assignments it made for a user who stops matching.
    pub cancel_on_unmatch: bool,
}

impl Rule {
    /// The due date of this rule's assignment to `profile`, matched at `matched_at`: the days
    /// after the start date (end of that day in `zone`), or after the match when the rule counts
    /// from the match, the user has no start date, or that date has already passed.
    pub fn due_at(
        &self,
        profile: &Profile,
        matched_at: DateTime<Utc>,
        zone: chrono_tz::Tz,
    ) -> Option<DateTime<Utc>> {
        let due = self.due?;
        let after_match = matched_at + Duration::days(i64::from(due.days));
        let from_start = match (due.from, profile.start_date) {
            (DueFrom::StartDate, Some(start)) => start
                .checked_add_days(chrono::Days::new(u64::from(due.days.unsigned_abs())))
                .and_then(|date| {
                    parse_date_input(
                        "dueDate",
                        &date.format("%Y-%m-%d").to_string(),
                        zone,
                        DayBound::End,
                    )
                    .ok()
                })
                .filter(|at| *at > matched_at),
            _ => None,
        };
        Some(from_start.unwrap_or(after_match))
    }
}

/// What an evaluation or a backfill did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Active users the rules match now.
    pub matching: u64,
    /// Assignments queued (new ones, and ones not persisted yet that are published again).
    pub queued: u64,
}

impl std::ops::AddAssign for Applied {
    fn add_assign(&mut self, other: Self) {
        self.matching += other.matching;
        self.queued += other.queued;
    }
}

string_enum!(
    /// Where a backfill (a background job assigning everyone a rule matches) stands.
    BackfillStatus {
        /// Waiting for a scheduler.
        Queued => "queued",
        /// A scheduler is walking the users.
        Running => "running",
        /// Every user was evaluated and every assignment queued.
        Succeeded => "succeeded",
        /// Given up after repeated failures; its `error` says why.
        Failed => "failed",
    }
);

impl BackfillStatus {
    /// Whether the job is over.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }
}
