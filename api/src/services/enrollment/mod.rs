//! Enrollment rules, for every surface: an organization's conditions on user attributes and
//! group membership, each assigning a flow to the users it matches (docs/enrollment-rules.md).
//! Rules run when users change ([`users_changed`], called by every user write) and, on request,
//! over everyone ([`backfill`]); [`preview`] answers what a rule would do before it is saved.
//!
//! Each (rule, user) assigns at most once: the match is claimed in Postgres (its generation, 1 at
//! the first match and one more only at a re-match of a rule that re-assigns), the assignment id
//! is derived from (rule, user, generation), and the ledger row naming it is committed before the
//! command goes to the organization's bulk queue. Replicas and retries therefore publish the same
//! id, which the assign-worker applies once; a command lost before it was persisted is published
//! again by the next evaluation of that user.

pub mod condition;

use std::collections::HashMap;

use chrono::{DateTime, Duration, Utc};
use flow_common::amqp::{Lane, Submission};
use flow_common::db::audit;
use flow_common::db::enrollment_rules::{
    self as db, Evaluated, LedgerEntry, Match, Profile, RuleFields, RuleRecord,
};
use flow_domain::ids::{AssignmentId, EnrollmentRuleId, FlowId, UserId};
use flow_domain::messages::{ASSIGN_COMMAND_VERSION, AssignCommand};
use flow_domain::{DayBound, Invalid, Notes, Priority, TextRule, parse_date_input};
use serde_json::Value;

pub use self::condition::Condition;
use super::{Acting, ServiceError};
use crate::state::AppState;

/// Most rules an organization may have.
pub const MAX_RULES: i64 = 100;

/// Largest `due.days`.
pub const MAX_DUE_DAYS: i32 = 3_650;

/// Users a preview lists (it counts them all).
pub const PREVIEW_USERS: usize = 20;

/// Users read, evaluated and assigned per round of a backfill or a preview.
const PAGE: i64 = 1_000;

/// Most users one [`users_changed`] call evaluates at once; more are taken in rounds.
const CHANGED_BATCH: usize = 1_000;

/// How often a claim is tried again when concurrent evaluations of the same users deadlock.
const CLAIM_ATTEMPTS: usize = 3;

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

/// A rule as a surface received it, before validation.
#[derive(Debug, Clone, Default)]
pub struct RuleInput {
    /// Name: one line, at most 200 characters. Required.
    pub name: Option<String>,
    /// The condition (see [`Condition`]). Required.
    pub condition: Option<Value>,
    /// The flow to assign. Required.
    pub flow_id: Option<String>,
    /// Days to the due date; none without.
    pub due_days: Option<i32>,
    /// `start_date` or `matched` (default `matched`).
    pub due_from: Option<String>,
    /// low, medium (default) or high.
    pub priority: Option<String>,
    /// Notes of each assignment.
    pub notes: Option<String>,
    /// Whether a user who stops matching and matches again is assigned again (default false).
    pub reassign: Option<bool>,
}

/// A validated rule.
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
    /// Due date, if any.
    pub due: Option<Due>,
    /// Priority.
    pub priority: Priority,
    /// Notes.
    pub notes: Option<String>,
    /// Re-assign on a re-match.
    pub reassign: bool,
}

impl Rule {
    /// Validates a surface's input; the flow is checked against the organization separately.
    pub fn parse(id: EnrollmentRuleId, input: RuleInput) -> Result<Self, ServiceError> {
        let name = TextRule::NAME.parse("name", input.name.as_deref().unwrap_or(""))?;
        if name.is_empty() {
            return Err(Invalid::new("name is required").into());
        }
        let condition = Condition::parse(
            "condition",
            input
                .condition
                .as_ref()
                .ok_or_else(|| Invalid::new("condition is required"))?,
        )?;
        let flow_text = input.flow_id.unwrap_or_default();
        if flow_text.trim().is_empty() {
            return Err(Invalid::new("flowId is required").into());
        }
        // An id that does not parse names no flow: 404, as for an assign.
        let flow_id = FlowId::parse(flow_text.trim()).ok_or(ServiceError::NotFound("flow"))?;
        let from = match input.due_from.as_deref() {
            None => DueFrom::Matched,
            Some(text) => DueFrom::parse(text)
                .ok_or_else(|| Invalid::new("due.from must be one of: start_date, matched"))?,
        };
        let due = match input.due_days {
            None if input.due_from.is_some() => {
                return Err(Invalid::new("due.days is required with due.from").into());
            }
            None => None,
            Some(days) if !(1..=MAX_DUE_DAYS).contains(&days) => {
                return Err(
                    Invalid(format!("due.days must be between 1 and {MAX_DUE_DAYS}")).into(),
                );
            }
            Some(days) => Some(Due { days, from }),
        };
        let priority = match input.priority.as_deref() {
            None => Priority::default(),
            Some(text) => Priority::parse_field("priority", text)?,
        };
        let notes = input
            .notes
            .map(|notes| Notes::parse("notes", notes).map(Notes::into_inner))
            .transpose()?
            .filter(|notes| !notes.is_empty());
        Ok(Self {
            id,
            name,
            condition,
            flow_id,
            due,
            priority,
            notes,
            reassign: input.reassign.unwrap_or(false),
        })
    }

    /// Reads a stored rule.
    pub fn from_record(record: &RuleRecord) -> Result<Self, ServiceError> {
        let corrupt = |what: &str| {
            ServiceError::Internal(anyhow::anyhow!(
                "enrollment rule {} has an unreadable {what}",
                record.id
            ))
        };
        Ok(Self {
            id: record.id,
            name: record.name.clone(),
            condition: Condition::parse("condition", &record.condition)
                .map_err(|_| corrupt("condition"))?,
            flow_id: record.flow_id,
            due: match record.due_days {
                Some(days) => Some(Due {
                    days,
                    from: DueFrom::parse(&record.due_from).ok_or_else(|| corrupt("due_from"))?,
                }),
                None => None,
            },
            priority: Priority::parse_field("priority", &record.priority)
                .map_err(|_| corrupt("priority"))?,
            notes: record.notes.clone(),
            reassign: record.reassign,
        })
    }

    fn fields(&self) -> RuleFields {
        RuleFields {
            name: self.name.clone(),
            condition: self.condition.to_json(),
            flow_id: self.flow_id,
            due_days: self.due.map(|due| due.days),
            due_from: self.due.map_or(DueFrom::Matched, |due| due.from).as_str(),
            priority: self.priority.as_str().to_owned(),
            notes: self.notes.clone(),
            reassign: self.reassign,
        }
    }

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

/// Checks that the rule's flow is the organization's.
async fn check_flow(state: &AppState, acting: Acting<'_>, rule: &Rule) -> Result<(), ServiceError> {
    state
        .caches
        .flow(&state.db, acting.org_id(), rule.flow_id)
        .await?
        .map(|_| ())
        .ok_or(ServiceError::NotFound("flow"))
}

/// A page of the organization's rules, after `after` when given.
pub async fn list(
    state: &AppState,
    acting: Acting<'_>,
    after: Option<EnrollmentRuleId>,
    limit: i64,
) -> Result<Vec<RuleRecord>, ServiceError> {
    Ok(db::list(&state.db, acting.org_id(), after, limit).await?)
}

/// One rule.
pub async fn get(
    state: &AppState,
    acting: Acting<'_>,
    id: EnrollmentRuleId,
) -> Result<RuleRecord, ServiceError> {
    db::get(&state.db, acting.org_id(), id)
        .await?
        .ok_or(ServiceError::NotFound("enrollment rule"))
}

/// Creates a rule. It applies to users as they are created or changed from now on; users who
/// match already are assigned by a [`backfill`].
pub async fn create(
    state: &AppState,
    acting: Acting<'_>,
    input: RuleInput,
) -> Result<RuleRecord, ServiceError> {
    let rule = Rule::parse(EnrollmentRuleId::new(), input)?;
    check_flow(state, acting, &rule).await?;
    let org_id = acting.org_id();
    let mut transaction = state.db.begin().await?;
    // One creation at a time per organization, so the cap holds under concurrent requests.
    sqlx::query("SELECT id FROM organizations WHERE id = $1 FOR UPDATE")
        .bind(org_id)
        .execute(&mut *transaction)
        .await?;
    if db::count(&mut *transaction, org_id).await? >= MAX_RULES {
        return Err(ServiceError::Conflict(format!(
            "an organization has at most {MAX_RULES} enrollment rules; delete one first"
        )));
    }
    let record = db::create(&mut transaction, org_id, &rule.fields()).await?;
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        "enrollment_rule.created",
        &record.id.to_string(),
        &record.name,
    )
    .await?;
    transaction.commit().await?;
    tracing::info!(rule_id = %record.id, "enrollment rule created");
    Ok(record)
}

/// Replaces a rule's fields. Matches recorded so far stay: a user already assigned is not
/// assigned again because the rule changed.
pub async fn update(
    state: &AppState,
    acting: Acting<'_>,
    id: EnrollmentRuleId,
    input: RuleInput,
) -> Result<RuleRecord, ServiceError> {
    let rule = Rule::parse(id, input)?;
    check_flow(state, acting, &rule).await?;
    let org_id = acting.org_id();
    let mut transaction = state.db.begin().await?;
    if !db::update(&mut transaction, org_id, id, &rule.fields()).await? {
        return Err(ServiceError::NotFound("enrollment rule"));
    }
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        "enrollment_rule.updated",
        &id.to_string(),
        &rule.name,
    )
    .await?;
    let record = db::get(&mut *transaction, org_id, id)
        .await?
        .ok_or(ServiceError::NotFound("enrollment rule"))?;
    transaction.commit().await?;
    Ok(record)
}

/// Deletes a rule; the assignments it made stay.
pub async fn delete(
    state: &AppState,
    acting: Acting<'_>,
    id: EnrollmentRuleId,
) -> Result<(), ServiceError> {
    let org_id = acting.org_id();
    let mut transaction = state.db.begin().await?;
    if !db::delete(&mut *transaction, org_id, id).await? {
        return Err(ServiceError::NotFound("enrollment rule"));
    }
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        "enrollment_rule.deleted",
        &id.to_string(),
        "",
    )
    .await?;
    transaction.commit().await?;
    Ok(())
}

/// What a rule would do now.
#[derive(Debug, Clone)]
pub struct Preview {
    /// Active users it matches now.
    pub matching: u64,
    /// The first [`PREVIEW_USERS`] of them, in id order.
    pub users: Vec<Profile>,
}

/// Evaluates a rule that is not saved over every active user of the organization, a page at a
/// time.
pub async fn preview(
    state: &AppState,
    acting: Acting<'_>,
    input: RuleInput,
) -> Result<Preview, ServiceError> {
    let rule = Rule::parse(EnrollmentRuleId::new(), input)?;
    check_flow(state, acting, &rule).await?;
    let mut preview = Preview {
        matching: 0,
        users: Vec::new(),
    };
    let mut after = None;
    loop {
        let page = db::profiles_page(&state.db, acting.org_id(), after, PAGE).await?;
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        let full = page.len() as i64 == PAGE;
        for profile in page {
            if profile.active && rule.condition.matches(&profile) {
                preview.matching += 1;
                if preview.users.len() < PREVIEW_USERS {
                    preview.users.push(profile);
                }
            }
        }
        if !full {
            break;
        }
    }
    Ok(preview)
}

/// What a backfill or an evaluation did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Active users the rules match now.
    pub matching: u64,
    /// Assignments queued (new ones, and ones not persisted yet that are published again).
    pub queued: u64,
}

/// Assigns the rule's flow to every active user who matches it now and has not been assigned by
/// it (at their current generation), a page of users at a time through the bulk lane.
pub async fn backfill(
    state: &AppState,
    acting: Acting<'_>,
    id: EnrollmentRuleId,
) -> Result<Applied, ServiceError> {
    let record = get(state, acting, id).await?;
    let rules = [Rule::from_record(&record)?];
    let mut total = Applied::default();
    let mut after = None;
    loop {
        let page = db::profiles_page(&state.db, acting.org_id(), after, PAGE).await?;
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        let full = page.len() as i64 == PAGE;
        let applied = apply(state, acting, &rules, &page, Utc::now()).await?;
        total.matching += applied.matching;
        total.queued += applied.queued;
        if !full {
            break;
        }
    }
    tracing::info!(rule_id = %id, matching = total.matching, queued = total.queued, "enrollment backfill");
    Ok(total)
}

/// Evaluates the organization's rules for these users after a change to them (a create, an
/// update, an import, a group membership) and assigns what they now match. Cheap when the
/// organization has no rules (one query); safe to call from any replica, any number of times.
pub async fn users_changed(
    state: &AppState,
    acting: Acting<'_>,
    user_ids: &[UserId],
) -> Result<Applied, ServiceError> {
    if user_ids.is_empty() {
        return Ok(Applied::default());
    }
    let org_id = acting.org_id();
    let records = db::list(&state.db, org_id, None, MAX_RULES).await?;
    if records.is_empty() {
        return Ok(Applied::default());
    }
    let rules = records
        .iter()
        .map(Rule::from_record)
        .collect::<Result<Vec<_>, _>>()?;
    let mut total = Applied::default();
    for chunk in user_ids.chunks(CHANGED_BATCH) {
        let profiles = db::profiles(&state.db, org_id, chunk).await?;
        let applied = apply(state, acting, &rules, &profiles, Utc::now()).await?;
        total.matching += applied.matching;
        total.queued += applied.queued;
    }
    Ok(total)
}

/// Evaluates `rules` for `profiles` (inactive users are left out: never assigned, their matches
/// left as they stand), records the matches, and publishes the assignments not persisted yet.
async fn apply(
    state: &AppState,
    acting: Acting<'_>,
    rules: &[Rule],
    profiles: &[Profile],
    now: DateTime<Utc>,
) -> Result<Applied, ServiceError> {
    let mut evaluated: Vec<Evaluated> = Vec::new();
    for rule in rules {
        for profile in profiles.iter().filter(|profile| profile.active) {
            evaluated.push(Evaluated {
                rule_id: rule.id,
                user_id: profile.id,
                matching: rule.condition.matches(profile),
            });
        }
    }
    if evaluated.is_empty() {
        return Ok(Applied::default());
    }
    // Rows are claimed in one order, so concurrent evaluations wait for each other rather than
    // deadlock (mostly: a deadlock is retried).
    evaluated.sort_by_key(|pair| (pair.rule_id, pair.user_id));
    let matching = evaluated.iter().filter(|pair| pair.matching).count() as u64;
    let mut attempt = 0;
    let pending = loop {
        attempt += 1;
        match claim(state, acting, rules, profiles, &evaluated, now).await {
            Err(ServiceError::Database(error))
                if attempt < CLAIM_ATTEMPTS && flow_common::db::is_transient(&error) =>
            {
                tracing::debug!(%error, "enrollment claim retried");
            }
            other => break other?,
        }
    };
    let rules: HashMap<EnrollmentRuleId, &Rule> =
        rules.iter().map(|rule| (rule.id, rule)).collect();
    let profiles: HashMap<UserId, &Profile> = profiles
        .iter()
        .map(|profile| (profile.id, profile))
        .collect();
    let mut submissions = Vec::with_capacity(pending.len());
    for found in &pending {
        let (Some(rule), Some(profile)) = (rules.get(&found.rule_id), profiles.get(&found.user_id))
        else {
            continue;
        };
        let Some(flow) = state
            .caches
            .flow(&state.db, acting.org_id(), rule.flow_id)
            .await?
        else {
            // The flow was deleted (and the rule with it) since the rules were read.
            continue;
        };
        let command = AssignCommand {
            version: ASSIGN_COMMAND_VERSION,
            assignment_id: AssignmentId::for_enrollment(rule.id, profile.id, found.generation),
            existing_assignment_id: None,
            org_id: acting.org_id(),
            flow_id: flow.id,
            flow_name: flow.name.clone(),
            user_id: profile.id,
            assignee_email: profile.email.clone(),
            priority: rule.priority,
            notes: rule.notes.clone(),
            due_at: rule.due_at(profile, found.matched_at, acting.caller.zone),
            assigned_at: found.matched_at,
            request_id: None,
            schedule_id: None,
            traceparent: flow_common::telemetry::current_traceparent(),
        };
        submissions.push(submission(&command)?);
    }
    if submissions.is_empty() {
        return Ok(Applied {
            matching,
            queued: 0,
        });
    }
    metrics::counter!("flow_assign_commands_total", "lane" => Lane::Bulk.as_str())
        .increment(submissions.len() as u64);
    let queue = acting.caller.org.assign_queue(Lane::Bulk).suffix();
    let published = state
        .assign_publisher
        .publish_all(Some(queue.as_str()), &submissions)
        .await;
    let failed = published.iter().filter(|outcome| outcome.is_err()).count();
    if let Some(Err(error)) = published.into_iter().find(Result::is_err) {
        // The matches are recorded: the next evaluation of these users (a retry of this
        // request, a backfill) publishes the same ids again.
        tracing::warn!(%error, failed, "enrollment assignments not queued");
        return Err(ServiceError::Unavailable(format!(
            "{failed} rule assignments could not be queued durably ({error}); retry shortly"
        )));
    }
    Ok(Applied {
        matching,
        queued: submissions.len() as u64,
    })
}

/// Records the evaluation in one transaction: the matches, the ledger rows of the generations
/// not persisted yet, and an audit row for each generation claimed now. Answers the matches whose
/// assignment is still to be published.
async fn claim(
    state: &AppState,
    acting: Acting<'_>,
    rules: &[Rule],
    profiles: &[Profile],
    evaluated: &[Evaluated],
    now: DateTime<Utc>,
) -> Result<Vec<Match>, ServiceError> {
    let org_id = acting.org_id();
    let mut transaction = state.db.begin().await?;
    let matches = db::record_matches(&mut transaction, org_id, evaluated, now).await?;
    let pending: Vec<Match> = matches
        .into_iter()
        .filter(|found| !found.persisted)
        .collect();
    let entries: Vec<LedgerEntry> = pending
        .iter()
        .map(|found| LedgerEntry {
            assignment_id: AssignmentId::for_enrollment(
                found.rule_id,
                found.user_id,
                found.generation,
            ),
            rule_id: found.rule_id,
            user_id: found.user_id,
            generation: found.generation,
        })
        .collect();
    let claimed = db::record_ledger(&mut transaction, org_id, &entries).await?;
    if !claimed.is_empty() {
        let names: HashMap<EnrollmentRuleId, &str> = rules
            .iter()
            .map(|rule| (rule.id, rule.name.as_str()))
            .collect();
        let emails: HashMap<UserId, &str> = profiles
            .iter()
            .map(|profile| (profile.id, profile.email.as_str()))
            .collect();
        let (targets, details): (Vec<String>, Vec<String>) = entries
            .iter()
            .filter(|entry| claimed.contains(&entry.assignment_id))
            .map(|entry| {
                (
                    entry.assignment_id.to_string(),
                    format!(
                        "rule \"{}\" ({}) assigned {}",
                        names.get(&entry.rule_id).copied().unwrap_or(""),
                        entry.rule_id,
                        emails.get(&entry.user_id).copied().unwrap_or(""),
                    ),
                )
            })
            .unzip();
        audit::record_many(
            &mut *transaction,
            org_id,
            acting.actor,
            "enrollment_rule.assigned",
            &targets,
            &details,
        )
        .await?;
    }
    transaction.commit().await?;
    Ok(pending)
}

/// An assign command as the batch publisher takes it.
fn submission(command: &AssignCommand) -> Result<Submission, ServiceError> {
    let json = serde_json::to_vec(command).map_err(|error| {
        ServiceError::Internal(anyhow::Error::new(error).context("encoding a command"))
    })?;
    Ok(Submission {
        json,
        message_id: command.assignment_id.to_string(),
        request_id: None,
        traceparent: command.traceparent.clone(),
    })
}
