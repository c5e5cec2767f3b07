//! Enrollment rules, for every surface: an organization's conditions on user attributes and
//! group membership, each assigning a flow to the users it matches (docs/enrollment-rules.md).
//! Rules run when users change ([`users_changed`], called by every user write, with the rules
//! from the API's cache) and, on request, over everyone ([`backfill`]: a job the scheduler
//! runs); [`preview`] answers what a rule would do before it is saved.
//!
//! The evaluation itself (matching, the claim that makes each (rule, user) assign once, the
//! publish) is `crate::engine::enrollment`'s, shared with the scheduler, which also evaluates what
//! a write's own evaluation left pending.

use flow_common::db::audit;
use flow_common::db::enrollment_backfills::{self as backfills, Backfill, Requested};
use flow_common::db::enrollment_rules::{self as db, RuleFields, RuleRecord};
use flow_common::db::flows;
use flow_domain::Invalid;
use flow_domain::audit::AuditAction;
use flow_domain::enrollment::{Applied, Due, DueFrom, Profile, Rule};
use flow_domain::ids::{BackfillId, EnrollmentRuleId, FlowId, UserId};
use flow_domain::{Notes, Priority, TextRule};
use serde_json::Value;

pub use crate::engine::enrollment::MAX_RULES;
pub use flow_common::db::enrollment_backfills::MAX_UNFINISHED as MAX_UNFINISHED_BACKFILLS;
pub use flow_domain::enrollment::{Condition, MAX_DUE_DAYS};

use crate::Context;
use crate::engine::enrollment::{Assigner, EnrollmentError, PAGE};
use crate::ratelimit::{Operation, RateInfo, preview_cost};
use crate::{Acting, ServiceError};

/// Users a preview lists (it counts them all).
pub const PREVIEW_USERS: usize = 20;

impl From<EnrollmentError> for ServiceError {
    fn from(error: EnrollmentError) -> Self {
        match error {
            EnrollmentError::Database(error) => Self::Database(error),
            error @ EnrollmentError::Unavailable { .. } => Self::Unavailable(error.to_string()),
            other => Self::Internal(anyhow::Error::new(other)),
        }
    }
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
    /// Whether the open assignments it made for a user are cancelled when the user no longer
    /// matches (default false).
    pub cancel_on_unmatch: Option<bool>,
}

/// Validates a surface's input; the flow is checked against the organization separately (its
/// name is filled in then).
pub fn parse(id: EnrollmentRuleId, input: RuleInput) -> Result<Rule, ServiceError> {
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
            return Err(Invalid(format!("due.days must be between 1 and {MAX_DUE_DAYS}")).into());
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
    Ok(Rule {
        id,
        name,
        condition,
        flow_id,
        flow_name: String::new(),
        due,
        priority,
        notes,
        reassign: input.reassign.unwrap_or(false),
        cancel_on_unmatch: input.cancel_on_unmatch.unwrap_or(false),
    })
}

/// The rule's columns.
fn fields(rule: &Rule) -> RuleFields {
    RuleFields {
        name: rule.name.clone(),
        condition: rule.condition.to_json(),
        flow_id: rule.flow_id,
        due_days: rule.due.map(|due| due.days),
        due_from: rule.due.map_or(DueFrom::Matched, |due| due.from).as_str(),
        priority: rule.priority.as_str().to_owned(),
        notes: rule.notes.clone(),
        reassign: rule.reassign,
        cancel_on_unmatch: rule.cancel_on_unmatch,
    }
}

/// Checks that the rule's flow is the organization's.
async fn check_flow(ctx: &Context, acting: Acting<'_>, rule: &Rule) -> Result<(), ServiceError> {
    ctx.caches
        .flow(&ctx.db, acting.org_id(), rule.flow_id)
        .await?
        .map(|_| ())
        .ok_or(ServiceError::NotFound("flow"))
}

/// Checks that the rule's flow is the organization's and takes new assignments: a rule saved
/// (created or replaced) may not point at an archived flow (409).
async fn check_live_flow(
    ctx: &Context,
    acting: Acting<'_>,
    rule: &Rule,
) -> Result<(), ServiceError> {
    let flow = ctx
        .caches
        .flow(&ctx.db, acting.org_id(), rule.flow_id)
        .await?
        .ok_or(ServiceError::NotFound("flow"))?;
    if flow.archived {
        return Err(ServiceError::Conflict(format!(
            "flow \"{}\" is archived and takes no new assignments, so an enrollment rule cannot \
             assign it; unarchive it (PATCH /v1/flows/{{id}} {{\"archived\": false}}) first",
            flow.name
        )));
    }
    Ok(())
}

/// Tells every API replica, when the transaction commits, to drop its cached rules of the
/// organization, and only those (this one drops its own right after the commit; a replica that
/// misses the notice keeps them at most [`crate::caches::RULES_TIME_TO_LIVE`]).
async fn notify_rules_changed(
    connection: &mut sqlx::PgConnection,
    org_id: flow_domain::ids::OrgId,
) -> Result<(), sqlx::Error> {
    flow_common::db::notify(
        connection,
        flow_common::db::INVALIDATE_CHANNEL,
        &crate::caches::rules_changed_payload(org_id),
    )
    .await
}

/// A page of the organization's rules, after `after` when given.
pub async fn list(
    ctx: &Context,
    acting: Acting<'_>,
    after: Option<EnrollmentRuleId>,
    limit: i64,
) -> Result<Vec<RuleRecord>, ServiceError> {
    Ok(db::list(&ctx.db, acting.org_id(), after, limit).await?)
}

/// One rule.
pub async fn get(
    ctx: &Context,
    acting: Acting<'_>,
    id: EnrollmentRuleId,
) -> Result<RuleRecord, ServiceError> {
    db::get(&ctx.db, acting.org_id(), id)
        .await?
        .ok_or(ServiceError::NotFound("enrollment rule"))
}

/// Creates a rule. It applies to users as they are created or changed from now on; users who
/// match already are assigned by a [`backfill`].
pub async fn create(
    ctx: &Context,
    acting: Acting<'_>,
    input: RuleInput,
) -> Result<RuleRecord, ServiceError> {
    let rule = parse(EnrollmentRuleId::new(), input)?;
    check_live_flow(ctx, acting, &rule).await?;
    let org_id = acting.org_id();
    let mut transaction = ctx.db.begin().await?;
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
    let record = db::create(&mut transaction, org_id, &fields(&rule)).await?;
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        AuditAction::EnrollmentRuleCreated,
        &record.id.to_string(),
        &record.name,
    )
    .await?;
    notify_rules_changed(&mut transaction, org_id).await?;
    transaction.commit().await?;
    ctx.caches.rules_changed(org_id);
    tracing::info!(rule_id = %record.id, "enrollment rule created");
    Ok(record)
}

/// Replaces a rule's fields. Matches recorded so far stay: a user already assigned is not
/// assigned again because the rule changed.
pub async fn update(
    ctx: &Context,
    acting: Acting<'_>,
    id: EnrollmentRuleId,
    input: RuleInput,
) -> Result<RuleRecord, ServiceError> {
    let rule = parse(id, input)?;
    check_live_flow(ctx, acting, &rule).await?;
    let org_id = acting.org_id();
    let mut transaction = ctx.db.begin().await?;
    if !db::update(&mut transaction, org_id, id, &fields(&rule)).await? {
        return Err(ServiceError::NotFound("enrollment rule"));
    }
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        AuditAction::EnrollmentRuleUpdated,
        &id.to_string(),
        &rule.name,
    )
    .await?;
    let record = db::get(&mut *transaction, org_id, id)
        .await?
        .ok_or(ServiceError::NotFound("enrollment rule"))?;
    notify_rules_changed(&mut transaction, org_id).await?;
    transaction.commit().await?;
    ctx.caches.rules_changed(org_id);
    Ok(record)
}

/// The refusal to delete a rule that flows are required for, naming them.
fn rule_is_an_audience(flows: &[(FlowId, String)]) -> ServiceError {
    let named: Vec<String> = flows
        .iter()
        .map(|(id, name)| format!("\"{name}\" ({id})"))
        .collect();
    ServiceError::Conflict(format!(
        "this rule is the audience of the required flow{} {}: make {} required of everyone or \
         of another rule first (PATCH /v1/flows/{{id}} {{\"requiredForRuleId\": null}})",
        if flows.len() == 1 { "" } else { "s" },
        named.join(", "),
        if flows.len() == 1 { "it" } else { "them" },
    ))
}

/// Deletes a rule; the assignments it made stay. A rule that a flow is required for (its
/// audience: `requiredForRuleId`) is not deleted (409 naming the flows): the flow would
/// silently become required of everyone, or of no one.
pub async fn delete(
    ctx: &Context,
    acting: Acting<'_>,
    id: EnrollmentRuleId,
) -> Result<(), ServiceError> {
    let org_id = acting.org_id();
    let mut transaction = ctx.db.begin().await?;
    let audience_of = flows::required_of_rule(&mut *transaction, org_id, id).await?;
    if !audience_of.is_empty() {
        return Err(rule_is_an_audience(&audience_of));
    }
    // A flow made required of the rule meanwhile breaks the foreign key: refused the same way.
    let deleted = match db::delete(&mut *transaction, org_id, id).await {
        Err(sqlx::Error::Database(error))
            if error.constraint() == Some(flows::AUDIENCE_RULE_KEY) =>
        {
            drop(transaction);
            let audience_of = flows::required_of_rule(&ctx.db, org_id, id).await?;
            return Err(rule_is_an_audience(&audience_of));
        }
        other => other?,
    };
    if !deleted {
        return Err(ServiceError::NotFound("enrollment rule"));
    }
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        AuditAction::EnrollmentRuleDeleted,
        &id.to_string(),
        "",
    )
    .await?;
    notify_rules_changed(&mut transaction, org_id).await?;
    transaction.commit().await?;
    ctx.caches.rules_changed(org_id);
    Ok(())
}

/// What a rule would do now.
#[derive(Debug, Clone)]
pub struct Preview {
    /// Active users it matches now.
    pub matching: u64,
    /// The first [`PREVIEW_USERS`] of them, in id order.
    pub users: Vec<Profile>,
    /// Where the organization stands against its read limit, after the preview's cost.
    pub rate: RateInfo,
}

/// Evaluates a rule that is not saved over every active user of the organization, a page at a
/// time. It walks every user, so it costs one read request per started
/// [`crate::ratelimit::USERS_PER_PREVIEW_READ`] users of the organization, charged before the
/// walk (429 when the read limit has not that much left), whichever surface asks.
pub async fn preview(
    ctx: &Context,
    acting: Acting<'_>,
    input: RuleInput,
) -> Result<Preview, ServiceError> {
    let rule = parse(EnrollmentRuleId::new(), input)?;
    check_flow(ctx, acting, &rule).await?;
    let users = db::user_count(&ctx.db, acting.org_id()).await?;
    let rate = ctx
        .limiter
        .check(acting.caller, Operation::Read, preview_cost(users))
        .await?;
    let mut preview = Preview {
        matching: 0,
        users: Vec::new(),
        rate,
    };
    let mut after = None;
    loop {
        let page = db::profiles_page(&ctx.db, acting.org_id(), after, PAGE).await?;
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

/// Queues a backfill of the rule: a scheduler assigns its flow to every active user who matches
/// it and has not been assigned by it (at their current generation), a page of users at a time
/// through the bulk lane. While one is queued or running for the rule, answers that one instead
/// (`false`: not created now). An organization has at most [`MAX_UNFINISHED_BACKFILLS`] queued
/// or running (409 past it).
pub async fn backfill(
    ctx: &Context,
    acting: Acting<'_>,
    id: EnrollmentRuleId,
) -> Result<(Backfill, bool), ServiceError> {
    let org_id = acting.org_id();
    let mut transaction = ctx.db.begin().await?;
    let rule = db::get(&mut *transaction, org_id, id)
        .await?
        .ok_or(ServiceError::NotFound("enrollment rule"))?;
    let (backfill, created) =
        match backfills::request(&mut transaction, org_id, id, acting.actor).await? {
            Requested::Created(backfill) => (backfill, true),
            Requested::Existing(backfill) => (backfill, false),
            Requested::Full => {
                return Err(ServiceError::Conflict(format!(
                    "an organization has at most {MAX_UNFINISHED_BACKFILLS} backfills queued or \
                     running; wait for one to finish"
                )));
            }
        };
    if created {
        audit::record(
            &mut *transaction,
            org_id,
            acting.actor,
            AuditAction::EnrollmentRuleBackfillRequested,
            &id.to_string(),
            &format!("{} ({})", rule.name, backfill.id),
        )
        .await?;
    }
    transaction.commit().await?;
    if created {
        tracing::info!(rule_id = %id, backfill_id = %backfill.id, "enrollment backfill queued");
    }
    Ok((backfill, created))
}

/// One backfill of one of the organization's rules.
pub async fn backfill_status(
    ctx: &Context,
    acting: Acting<'_>,
    rule_id: EnrollmentRuleId,
    id: BackfillId,
) -> Result<Backfill, ServiceError> {
    backfills::get(&ctx.db, acting.org_id(), rule_id, id)
        .await?
        .ok_or(ServiceError::NotFound("backfill"))
}

/// The latest backfill of each of the organization's rules that has one.
pub async fn latest_backfills(
    ctx: &Context,
    acting: Acting<'_>,
) -> Result<Vec<Backfill>, ServiceError> {
    Ok(backfills::latest(&ctx.db, acting.org_id()).await?)
}

/// Evaluates the organization's rules (cached for a few seconds) for these users after a change
/// to them (a create, an update, an import, a group membership) and assigns what they now match;
/// then deletes the pending rows the change left (a scheduler evaluates what is left, should
/// this not finish). Cheap when the organization has no rules; safe to call from any replica,
/// any number of times.
pub async fn users_changed(
    ctx: &Context,
    acting: Acting<'_>,
    user_ids: &[UserId],
) -> Result<Applied, ServiceError> {
    if user_ids.is_empty() {
        return Ok(Applied::default());
    }
    let rules = ctx
        .caches
        .enrollment_rules(&ctx.db, acting.org_id())
        .await?;
    if rules.is_empty() {
        // Rows a write queued while this replica's copy was stale are the scheduler's.
        return Ok(Applied::default());
    }
    let assigner = Assigner {
        pool: &ctx.db,
        publisher: &ctx.assign_publisher,
        org: &acting.caller.org,
        actor: acting.actor,
    };
    Ok(assigner.users_changed(&rules, user_ids).await?)
}
