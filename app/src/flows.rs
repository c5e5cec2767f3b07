//! Flows, for every surface: create one with its ordered modules (checked by one rule: a name of
//! one line, a description, 1 to [`MAX_MODULES`] modules each with a name and an estimate), and
//! read one with its modules; edit one where it is safe ([`edit`]: name, description, archived,
//! reminder policy, whether it is required and of whom: everyone, or an enrollment rule's
//! audience). The dashboard's figures of flows ([`counts`]) and its page of a
//! flow's assignments ([`assignments`]) are read on a fresh replica, else the primary.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use flow_common::db::assignments::AssignmentRecord;
use flow_common::db::audit;
use flow_common::db::dashboard::{self, FlowCounts};
use flow_common::db::enrollment_rules;
use flow_common::db::flows::{self, Flow, FlowEdit, FlowSettings, FlowSummary, Module, NewModule};
use flow_common::db::replicas::ReadPurpose;
use flow_domain::AssignmentStatus;
use flow_domain::audit::AuditAction;
use flow_domain::expiry::{self, Validity};
use flow_domain::ids::{AssignmentId, EnrollmentRuleId, FlowId, ModuleId};
use flow_domain::reminders::ReminderPolicy;
use flow_domain::{Invalid, TextRule};

use crate::Context;
use crate::{Acting, ServiceError};

/// Most modules in a flow.
pub const MAX_MODULES: usize = 500;

/// Largest estimate of a module, in minutes.
pub const MAX_ESTIMATED_MINUTES: i32 = 100_000;

/// A flow as a surface received it.
#[derive(Debug, Clone, Default)]
pub struct FlowFields {
    /// Name (required).
    pub name: Option<String>,
    /// Description.
    pub description: Option<String>,
    /// Modules in order (1 to [`MAX_MODULES`]).
    pub modules: Vec<ModuleFields>,
    /// Its reminder policy.
    pub reminders: Option<ReminderPolicy>,
    /// How long a completion stays valid.
    pub valid_for: Option<Validity>,
    /// Days before expiry the renewal is assigned (needs `valid_for`).
    pub renew_before_days: Option<i32>,
    /// The flow's own xAPI activity IRI.
    pub activity_id: Option<String>,
    /// Required (default false): the compliance report covers it by default.
    pub required: Option<bool>,
    /// Required only of this enrollment rule's audience (`enr_…`; needs `required`).
    pub required_for_rule_id: Option<String>,
}

/// An enrollment rule id given as `requiredForRuleId` (a malformed one is refused by name; one
/// that is not the organization's is not found, when the flow is saved).
fn audience_rule(text: &str) -> Result<EnrollmentRuleId, Invalid> {
    EnrollmentRuleId::parse(text.trim()).ok_or_else(|| {
        Invalid::new("requiredForRuleId must be an enrollment rule id (enr_…) or null")
    })
}

/// A flow has an audience only when it is required, said in the same request.
fn audience_needs_required(required: Option<bool>) -> Result<(), Invalid> {
    if required == Some(true) {
        Ok(())
    } else {
        Err(Invalid::new(
            "requiredForRuleId needs \"required\": true in the same request (a flow is required \
             of a rule's audience only when it is required)",
        ))
    }
}

/// Longest xAPI activity IRI of a module or a flow, in characters.
pub const MAX_ACTIVITY_ID_CHARS: usize = 2_048;

/// Checks an activity IRI given as `field`: absolute, at most [`MAX_ACTIVITY_ID_CHARS`].
fn activity_id(field: &str, text: Option<String>) -> Result<Option<String>, Invalid> {
    let Some(text) = text else {
        return Ok(None);
    };
    let text = text.trim().to_owned();
    if text.chars().count() > MAX_ACTIVITY_ID_CHARS || !flow_domain::xapi::is_iri(&text) {
        return Err(Invalid(format!(
            "{field} must be an absolute IRI of at most {MAX_ACTIVITY_ID_CHARS} characters"
        )));
    }
    Ok(Some(text))
}

/// A module as a surface received it.
#[derive(Debug, Clone, Default)]
pub struct ModuleFields {
    /// Name (required).
    pub name: Option<String>,
    /// Estimated minutes, 0 to [`MAX_ESTIMATED_MINUTES`] (default 0).
    pub estimated_minutes: Option<i32>,
    /// Its xAPI activity IRI, unique within the flow.
    pub activity_id: Option<String>,
}

/// A flow that passed the rules.
#[derive(Debug, Clone)]
pub struct NewFlow {
    /// Name.
    pub name: String,
    /// Description, when not empty.
    pub description: Option<String>,
    /// Modules in order.
    pub modules: Vec<NewModule>,
    /// Reminder policy, validity and renewal window, checked.
    pub settings: FlowSettings,
}

/// Checks a flow's fields; the error names the field as the API spells it
/// (`modules[2].estimatedMinutes`).
pub fn check(fields: FlowFields) -> Result<NewFlow, Invalid> {
    let name = TextRule::NAME.parse("name", fields.name.as_deref().unwrap_or(""))?;
    if name.is_empty() {
        return Err(Invalid::new("name is required"));
    }
    let description = fields
        .description
        .map(|text| TextRule::DESCRIPTION.parse("description", &text))
        .transpose()?
        .filter(|text| !text.is_empty());
    if fields.modules.is_empty() || fields.modules.len() > MAX_MODULES {
        return Err(Invalid(format!(
            "modules must contain between 1 and {MAX_MODULES} items"
        )));
    }
    let modules = fields
        .modules
        .into_iter()
        .enumerate()
        .map(|(index, module)| {
            let field = format!("modules[{index}].name");
            let name = TextRule::NAME.parse(&field, module.name.as_deref().unwrap_or(""))?;
            if name.is_empty() {
                return Err(Invalid(format!("{field} is required")));
            }
            let minutes = module.estimated_minutes.unwrap_or(0);
            if !(0..=MAX_ESTIMATED_MINUTES).contains(&minutes) {
                return Err(Invalid(format!(
                    "modules[{index}].estimatedMinutes must be between 0 and {MAX_ESTIMATED_MINUTES}"
                )));
            }
            Ok(NewModule {
                name,
                estimated_minutes: minutes,
                activity_id: activity_id(
                    &format!("modules[{index}].activityId"),
                    module.activity_id,
                )?,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let flow_activity = activity_id("activityId", fields.activity_id)?;
    for (index, module) in modules.iter().enumerate() {
        let Some(activity) = &module.activity_id else {
            continue;
        };
        let repeated = modules[..index]
            .iter()
            .any(|other| other.activity_id.as_ref() == Some(activity));
        if repeated || flow_activity.as_ref() == Some(activity) {
            return Err(Invalid(format!(
                "modules[{index}].activityId repeats another activity id of the flow"
            )));
        }
    }
    let reminders = fields.reminders.map(ReminderPolicy::checked).transpose()?;
    let valid_for = fields.valid_for.map(Validity::checked).transpose()?;
    let renew_before_days = fields
        .renew_before_days
        .map(expiry::check_renew_before)
        .transpose()?;
    expiry::check_window(valid_for, renew_before_days)?;
    let required_for_rule_id = fields
        .required_for_rule_id
        .as_deref()
        .map(audience_rule)
        .transpose()?;
    if required_for_rule_id.is_some() {
        audience_needs_required(fields.required)?;
    }
    Ok(NewFlow {
        name,
        description,
        modules,
        settings: FlowSettings {
            reminders,
            valid_for,
            renew_before_days,
            activity_id: flow_activity,
            required: fields.required.unwrap_or(false),
            required_for_rule_id,
        },
    })
}

/// Checks that the rule a flow is required for is the organization's: one that is not (another
/// organization's, or none) is not found, as a flow id in a body is.
async fn check_audience_rule<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    acting: Acting<'_>,
    rule: EnrollmentRuleId,
) -> Result<enrollment_rules::RuleRecord, ServiceError> {
    enrollment_rules::get(executor, acting.org_id(), rule)
        .await?
        .ok_or(ServiceError::NotFound("enrollment rule"))
}

/// A rule deleted between the check and the write breaks the flow's foreign key: not found.
fn audience_rule_gone(error: sqlx::Error) -> ServiceError {
    match &error {
        sqlx::Error::Database(database)
            if database.constraint() == Some(flows::AUDIENCE_RULE_KEY) =>
        {
            ServiceError::NotFound("enrollment rule")
        }
        _ => error.into(),
    }
}

/// Creates a flow with its modules in one transaction.
pub async fn create(
    ctx: &Context,
    acting: Acting<'_>,
    flow: &NewFlow,
) -> Result<(Flow, Vec<Module>), ServiceError> {
    if let Some(activity) = &flow.settings.activity_id
        && flows::activity_taken(&ctx.db, acting.org_id(), activity).await?
    {
        return Err(ServiceError::Conflict(
            "activityId is already the activity id of another flow of the organization".into(),
        ));
    }
    if let Some(rule) = flow.settings.required_for_rule_id {
        check_audience_rule(&ctx.db, acting, rule).await?;
    }
    let created = flows::create_with(
        &ctx.db,
        acting.org_id(),
        &flow.name,
        flow.description.as_deref(),
        &flow.modules,
        &flow.settings,
    )
    .await
    .map_err(audience_rule_gone)?;
    tracing::info!(flow_id = %created.0.id, modules = created.1.len(), "flow created");
    Ok(created)
}

/// One flow of the organization with its modules in order.
pub async fn get(
    ctx: &Context,
    acting: Acting<'_>,
    id: FlowId,
) -> Result<(Flow, Vec<Module>), ServiceError> {
    let flow = flows::get(&ctx.db, acting.org_id(), id)
        .await?
        .ok_or(ServiceError::NotFound("flow"))?;
    let modules = flows::modules(&ctx.db, id).await?;
    Ok((flow, modules))
}

/// The flow `id` of the organization without its modules, if it has it (a page that names the
/// flow of an export shows nothing for a flow gone since).
pub async fn find(
    ctx: &Context,
    acting: Acting<'_>,
    id: FlowId,
) -> Result<Option<Flow>, ServiceError> {
    Ok(flows::get(&ctx.db, acting.org_id(), id).await?)
}

/// The flow `id` of the organization with its module count, from the flows cache; not found when
/// it has none.
pub async fn summary(
    ctx: &Context,
    acting: Acting<'_>,
    id: FlowId,
) -> Result<Arc<FlowSummary>, ServiceError> {
    ctx.caches
        .flow(&ctx.db, acting.org_id(), id)
        .await?
        .ok_or(ServiceError::NotFound("flow"))
}

/// Up to `limit` of the organization's flows after `after`, in id order, with their module
/// counts (a page of the API, the dashboard's list and its choices of a flow).
pub async fn list(
    ctx: &Context,
    acting: Acting<'_>,
    after: Option<FlowId>,
    limit: i64,
) -> Result<Vec<FlowSummary>, ServiceError> {
    Ok(flows::list(&ctx.db, acting.org_id(), after, limit).await?)
}

/// The figures of the organization's flows among `ids` (assignments, completed, overdue), at the
/// instant they are read: on a fresh replica, else the primary, read again elsewhere when the
/// replica fell behind meanwhile.
pub async fn counts(
    ctx: &Context,
    acting: Acting<'_>,
    ids: &[FlowId],
) -> Result<Vec<FlowCounts>, ServiceError> {
    let mut read = ctx.reads.read(ReadPurpose::Dashboard, None);
    loop {
        let (mut snapshot, source) = read.begin().await?;
        let now = snapshot.now();
        let outcome =
            dashboard::flow_counts(snapshot.connection(), acting.org_id(), ids, now).await;
        if let Some(served) = read.end(snapshot, source, outcome).await? {
            return Ok(served.value);
        }
    }
}

/// Which of a flow's assignments [`assignments`] lists.
#[derive(Debug, Clone, Copy, Default)]
pub struct AssignmentFilter<'a> {
    /// Only assignees whose e-mail contains this.
    pub email: Option<&'a str>,
    /// Only assignments of this status (judged at the instant of the read).
    pub status: Option<AssignmentStatus>,
    /// Only assignments after this one (assigned at, id), newest first.
    pub after: Option<(DateTime<Utc>, AssignmentId)>,
}

/// Up to `limit` assignments of the flow `flow_id` that `filter` lets through, newest first, and
/// the instant they were read at (their statuses are judged at it): on a fresh replica, else the
/// primary, as [`counts`].
pub async fn assignments(
    ctx: &Context,
    acting: Acting<'_>,
    flow_id: FlowId,
    filter: AssignmentFilter<'_>,
    limit: i64,
) -> Result<(Vec<AssignmentRecord>, DateTime<Utc>), ServiceError> {
    let mut read = ctx.reads.read(ReadPurpose::Dashboard, None);
    loop {
        let (mut snapshot, source) = read.begin().await?;
        let read_at = snapshot.now();
        let outcome = dashboard::flow_assignments(
            snapshot.connection(),
            acting.org_id(),
            flow_id,
            filter.email,
            filter.status,
            filter.after,
            limit,
            read_at,
        )
        .await
        .map(|rows| (rows, read_at));
        if let Some(served) = read.end(snapshot, source, outcome).await? {
            return Ok(served.value);
        }
    }
}

/// A flow edit as a surface received it: each field absent (`None`) or set (`description` may be
/// cleared).
#[derive(Debug, Clone, Default)]
pub struct FlowEditFields {
    /// New name.
    pub name: Option<String>,
    /// New description (`Some(None)` or empty: none).
    pub description: Option<Option<String>>,
    /// Archive or bring back.
    pub archived: Option<bool>,
    /// The reminder policy (`Some(None)`: none).
    pub reminders: Option<Option<ReminderPolicy>>,
    /// The validity of a completion (`Some(None)`: none, which clears the renewal window too).
    pub valid_for: Option<Option<Validity>>,
    /// Days before expiry the renewal is assigned (`Some(None)`: at expiry).
    pub renew_before_days: Option<Option<i32>>,
    /// Mark the flow required, or not (false also clears its audience).
    pub required: Option<bool>,
    /// Required of a rule's audience (`Some(Some(enr_…))`, needs `required: Some(true)`) or of
    /// everyone (`Some(None)`).
    pub required_for_rule_id: Option<Option<String>>,
    /// The flow's own xAPI activity IRI (`Some(None)`: none).
    pub activity_id: Option<Option<String>>,
    /// Modules (by id, as sent) whose xAPI activity IRI is set (`None`: removed).
    pub module_activities: Option<Vec<(String, Option<String>)>>,
}

/// Checks the modules' activity IRIs of an edit: each module named once, by a module id, each
/// IRI as on creation (the modules being the flow's is checked against it).
fn check_module_activities(
    edits: Vec<(String, Option<String>)>,
) -> Result<Vec<(ModuleId, Option<String>)>, Invalid> {
    if edits.is_empty() || edits.len() > MAX_MODULES {
        return Err(Invalid(format!(
            "modules must list 1 to {MAX_MODULES} modules when given"
        )));
    }
    let mut checked: Vec<(ModuleId, Option<String>)> = Vec::with_capacity(edits.len());
    for (index, (module, activity)) in edits.into_iter().enumerate() {
        let id = ModuleId::parse(&module).ok_or_else(|| {
            Invalid(format!(
                "modules[{index}].moduleId must be a module id (mod_…)"
            ))
        })?;
        if checked.iter().any(|(other, _)| *other == id) {
            return Err(Invalid(format!(
                "modules[{index}].moduleId names a module listed before"
            )));
        }
        let activity = activity_id(&format!("modules[{index}].activityId"), activity)?;
        if let Some(activity) = &activity
            && checked
                .iter()
                .any(|(_, other)| other.as_ref() == Some(activity))
        {
            return Err(Invalid(format!(
                "modules[{index}].activityId repeats another activity id of the flow"
            )));
        }
        checked.push((id, activity));
    }
    Ok(checked)
}

/// Checks an edit with the rules of a new flow's fields.
pub fn check_edit(fields: FlowEditFields) -> Result<FlowEdit, Invalid> {
    let name = fields
        .name
        .map(|name| {
            let name = TextRule::NAME.parse("name", &name)?;
            if name.is_empty() {
                return Err(Invalid::new("name must not be empty"));
            }
            Ok(name)
        })
        .transpose()?;
    let description = fields
        .description
        .map(|text| {
            text.map(|text| TextRule::DESCRIPTION.parse("description", &text))
                .transpose()
                .map(|text| text.filter(|text| !text.is_empty()))
        })
        .transpose()?;
    let reminders = fields
        .reminders
        .map(|policy| policy.map(ReminderPolicy::checked).transpose())
        .transpose()?;
    let valid_for = fields
        .valid_for
        .map(|validity| validity.map(Validity::checked).transpose())
        .transpose()?;
    let renew_before_days = fields
        .renew_before_days
        .map(|days| days.map(expiry::check_renew_before).transpose())
        .transpose()?;
    // Both given: checked together here; one alone against the other as stored (the
    // constraint of migration 0243, answered as the same 400).
    if let (Some(validity), Some(days)) = (valid_for, renew_before_days) {
        expiry::check_window(validity, days)?;
    }
    let activity = fields
        .activity_id
        .map(|activity| activity_id("activityId", activity))
        .transpose()?;
    let module_activities = fields
        .module_activities
        .map(check_module_activities)
        .transpose()?;
    let required_for_rule_id = fields
        .required_for_rule_id
        .map(|rule| rule.as_deref().map(audience_rule).transpose())
        .transpose()?;
    if matches!(required_for_rule_id, Some(Some(_))) {
        audience_needs_required(fields.required)?;
    }
    if let (Some(Some(flow)), Some(modules)) = (&activity, &module_activities)
        && let Some(index) = modules
            .iter()
            .position(|(_, module)| module.as_ref() == Some(flow))
    {
        return Err(Invalid(format!(
            "modules[{index}].activityId repeats another activity id of the flow"
        )));
    }
    if name.is_none()
        && description.is_none()
        && fields.archived.is_none()
        && reminders.is_none()
        && valid_for.is_none()
        && renew_before_days.is_none()
        && fields.required.is_none()
        && required_for_rule_id.is_none()
        && activity.is_none()
        && module_activities.is_none()
    {
        return Err(Invalid::new(
            "nothing to change: give name, description, archived, reminders, validFor, \
             renewBeforeDays, required, requiredForRuleId, activityId or modules' activityId \
             (modules are not \
             otherwise edited in place: create a new flow)",
        ));
    }
    Ok(FlowEdit {
        name,
        description,
        archived: fields.archived,
        reminders,
        valid_for,
        renew_before_days,
        required: fields.required,
        required_for_rule_id,
        activity_id: activity,
        module_activities: module_activities.unwrap_or_default(),
    })
}

/// Edits the flow `id` of the organization: its name, description, archived state, whether it is
/// required and of whom (a rule that is not the organization's is not found), … (every replica's
/// flow cache is told at once). Audited as `flow.updated`. Answers the flow with its modules.
pub async fn edit(
    ctx: &Context,
    acting: Acting<'_>,
    id: FlowId,
    edit: &FlowEdit,
) -> Result<(Flow, Vec<Module>), ServiceError> {
    let mut transaction = ctx.db.begin().await?;
    let audience_rule = match edit.required_for_rule_id {
        Some(Some(rule)) => Some(check_audience_rule(&mut *transaction, acting, rule).await?),
        _ => None,
    };
    let flow = match flows::edit(&mut transaction, acting.org_id(), id, edit).await {
        Err(sqlx::Error::Database(error)) => {
            return Err(match error.constraint() {
                Some(flows::RENEWAL_WINDOW_CONSTRAINT) => ServiceError::Invalid(Invalid::new(
                    "renewBeforeDays must be less than the flow's validity (validFor, a month \
                     counted as 28 days) and needs one",
                )),
                Some(flows::FLOW_ACTIVITY_INDEX) => ServiceError::Conflict(
                    "activityId is already the activity id of another flow of the organization"
                        .into(),
                ),
                Some(flows::MODULE_ACTIVITY_INDEX) => ServiceError::Invalid(Invalid::new(
                    "a module's activityId repeats the activity id of another module of the \
                     flow",
                )),
                _ => audience_rule_gone(sqlx::Error::Database(error)),
            });
        }
        other => other?.ok_or(ServiceError::NotFound("flow"))?,
    };
    if !edit.module_activities.is_empty() {
        let modules = flows::modules(&mut *transaction, id).await?;
        if let Some(index) = edit
            .module_activities
            .iter()
            .position(|(module, _)| modules.iter().all(|known| known.id != *module))
        {
            return Err(ServiceError::NotFoundSaying(format!(
                "modules[{index}].moduleId is not a module of this flow"
            )));
        }
    }
    if (edit.activity_id.is_some() || !edit.module_activities.is_empty())
        && flows::activity_shared_with_module(&mut transaction, id).await?
    {
        return Err(ServiceError::Invalid(Invalid::new(
            "activityId repeats the activity id of one of the flow's modules",
        )));
    }
    // Who it is required of, when the edit says and the flow is required (else "not
    // required" says it all).
    let audience = match edit.required_for_rule_id {
        None => None,
        Some(_) if !flow.required => None,
        Some(None) => Some("required of everyone".to_owned()),
        Some(Some(rule)) => Some(format!(
            "required of the audience of rule \"{}\" ({rule})",
            audience_rule.map(|record| record.name).unwrap_or_default()
        )),
    };
    let changed: Vec<&str> = [
        edit.name.as_ref().map(|_| "name"),
        edit.description.as_ref().map(|_| "description"),
        edit.archived
            .map(|archived| if archived { "archived" } else { "unarchived" }),
        edit.reminders.as_ref().map(|_| "reminders"),
        edit.valid_for.as_ref().map(|_| "validFor"),
        edit.renew_before_days.as_ref().map(|_| "renewBeforeDays"),
        edit.required
            .map(|required| if required { "required" } else { "not required" }),
        audience.as_deref(),
        edit.activity_id.as_ref().map(|_| "activityId"),
        (!edit.module_activities.is_empty()).then_some("modules' activityId"),
    ]
    .into_iter()
    .flatten()
    .collect();
    audit::record(
        &mut *transaction,
        acting.org_id(),
        acting.actor,
        AuditAction::FlowUpdated,
        &flow.id.to_string(),
        &format!("{} ({})", flow.name, changed.join(", ")),
    )
    .await?;
    transaction.commit().await?;
    // This replica sees the change at once; the others when the notice reaches them.
    ctx.caches.flow_changed(id);
    let modules = flows::modules(&ctx.db, id).await?;
    Ok((flow, modules))
}

/// Whether another flow of the organization already has this name (case-insensitive): a new
/// flow may reuse a name, and is warned that uploads naming it will be ambiguous.
pub async fn name_taken(
    ctx: &Context,
    acting: Acting<'_>,
    name: &str,
    except: Option<FlowId>,
) -> Result<bool, ServiceError> {
    Ok(flows::named(&ctx.db, acting.org_id(), name, except).await? > 0)
}
