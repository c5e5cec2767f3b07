//! Flows and their ordered modules.

use chrono::{DateTime, Utc};
use flow_domain::expiry::Validity;
use flow_domain::ids::{EnrollmentRuleId, FlowId, ModuleId, OrgId};
use flow_domain::reminders::ReminderPolicy;
use sqlx::{FromRow, PgExecutor, PgPool};

/// A flow row.
#[derive(Debug, Clone, FromRow)]
pub struct Flow {
    pub id: FlowId,
    /// Owning organization.
    pub org_id: OrgId,
    pub name: String,
    pub description: Option<String>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// When it was archived: it then takes no new assignments.
    pub archived_at: Option<DateTime<Utc>>,
    /// Its reminder policy, if it has one.
    pub reminders: Option<sqlx::types::Json<ReminderPolicy>>,
    /// Validity of a completion in calendar months (one unit at most).
    pub valid_for_months: Option<i32>,
    /// Validity of a completion in days.
    pub valid_for_days: Option<i32>,
    /// Days before expiry the renewal is assigned (`None`: at expiry).
    pub renew_before_days: Option<i32>,
    /// The flow's own xAPI activity IRI (`satisfied` about it completes the assignment).
    pub activity_id: Option<String>,
    /// Required: the compliance report covers it by default.
    pub required: bool,
    /// When required, required only of this enrollment rule's audience (the people it matches
    /// now); `None`: of everyone.
    pub required_for_rule_id: Option<EnrollmentRuleId>,
}

impl Flow {
    /// The validity of a completion, if the flow has one.
    pub fn validity(&self) -> Option<Validity> {
        (self.valid_for_months.is_some() || self.valid_for_days.is_some()).then_some(Validity {
            months: self.valid_for_months,
            days: self.valid_for_days,
        })
    }
}

/// A module row.
#[derive(Debug, Clone, FromRow)]
pub struct Module {
    pub id: ModuleId,
    /// Flow it belongs to.
    pub flow_id: FlowId,
    /// Zero-based order within the flow.
    pub position: i32,
    pub name: String,
    /// Estimated time to complete, in minutes.
    pub estimated_minutes: i32,
    /// The xAPI activity IRI learning content names it by.
    pub activity_id: Option<String>,
}

/// What the assign path needs of a flow; cached by the API.
#[derive(Debug, Clone, FromRow)]
pub struct FlowSummary {
    pub id: FlowId,
    /// Owning organization.
    pub org_id: OrgId,
    pub name: String,
    /// Archived: it takes no new assignments.
    pub archived: bool,
    /// Number of modules.
    pub module_count: i64,
    /// Sum of the modules' estimates, in minutes.
    pub estimated_minutes: i64,
    /// Required (the compliance report's default set).
    pub required: bool,
    /// When required, required only of this enrollment rule's audience; `None`: of everyone.
    pub required_for_rule_id: Option<EnrollmentRuleId>,
}

/// A module to create.
#[derive(Debug, Clone)]
pub struct NewModule {
    pub name: String,
    /// Estimate in minutes.
    pub estimated_minutes: i32,
    /// Its xAPI activity IRI, unique within the flow.
    pub activity_id: Option<String>,
}

/// What a flow may carry from its creation on besides its modules (each also set by [`edit`]).
#[derive(Debug, Clone, Default)]
pub struct FlowSettings {
    /// Its reminder policy.
    pub reminders: Option<ReminderPolicy>,
    /// How long a completion stays valid.
    pub valid_for: Option<Validity>,
    /// Days before expiry the renewal is assigned.
    pub renew_before_days: Option<i32>,
    /// The flow's own xAPI activity IRI, unique within the organization (set at creation).
    pub activity_id: Option<String>,
    /// Required (of everyone, or of `required_for_rule_id`'s audience).
    pub required: bool,
    /// Required only of this rule's audience (needs `required`).
    pub required_for_rule_id: Option<EnrollmentRuleId>,
}

/// Creates a flow with its modules in one transaction.
pub async fn create(
    pool: &PgPool,
    org_id: OrgId,
    name: &str,
    description: Option<&str>,
    modules: &[NewModule],
) -> Result<(Flow, Vec<Module>), sqlx::Error> {
    create_with(
        pool,
        org_id,
        name,
        description,
        modules,
        &FlowSettings::default(),
    )
    .await
}

/// Creates a flow with its modules and `settings` in one transaction.
pub async fn create_with(
    pool: &PgPool,
    org_id: OrgId,
    name: &str,
    description: Option<&str>,
    modules: &[NewModule],
    settings: &FlowSettings,
) -> Result<(Flow, Vec<Module>), sqlx::Error> {
    let mut transaction = pool.begin().await?;
    let flow: Flow = sqlx::query_as(
        "INSERT INTO flows (id, org_id, name, description, reminders, valid_for_months,
                            valid_for_days, renew_before_days, activity_id, required,
                            required_for_rule_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         RETURNING id, org_id, name, description, created_at, archived_at, reminders,
                valid_for_months, valid_for_days, renew_before_days, activity_id, required,
                required_for_rule_id",
    )
    .bind(FlowId::new())
    .bind(org_id)
    .bind(name)
    .bind(description)
    .bind(settings.reminders.clone().map(sqlx::types::Json))
    .bind(settings.valid_for.and_then(|validity| validity.months))
    .bind(settings.valid_for.and_then(|validity| validity.days))
    .bind(settings.renew_before_days)
    .bind(settings.activity_id.as_deref())
    .bind(settings.required)
    .bind(settings.required_for_rule_id)
    .fetch_one(&mut *transaction)
    .await?;
    let ids: Vec<ModuleId> = modules.iter().map(|_| ModuleId::new()).collect();
    let names: Vec<&str> = modules.iter().map(|module| module.name.as_str()).collect();
    let minutes: Vec<i32> = modules
        .iter()
        .map(|module| module.estimated_minutes)
        .collect();
    let activities: Vec<Option<&str>> = modules
        .iter()
        .map(|module| module.activity_id.as_deref())
        .collect();
    let inserted: Vec<Module> = sqlx::query_as(
        "INSERT INTO modules (id, flow_id, position, name, estimated_minutes, activity_id)
         SELECT id, $1, (ord - 1)::int, name, minutes, activity
         FROM UNNEST($2::uuid[], $3::text[], $4::int[], $5::text[])
              WITH ORDINALITY AS t(id, name, minutes, activity, ord)
         RETURNING id, flow_id, position, name, estimated_minutes, activity_id",
    )
    .bind(flow.id)
    .bind(&ids)
    .bind(&names)
    .bind(&minutes)
    .bind(&activities)
    .fetch_all(&mut *transaction)
    .await?;
    transaction.commit().await?;
    let mut inserted = inserted;
    inserted.sort_by_key(|module| module.position);
    Ok((flow, inserted))
}

/// Whether the flow's own activity IRI is also one of its modules' (refused: a statement about
/// it would mean both).
pub async fn activity_shared_with_module(
    connection: &mut sqlx::PgConnection,
    id: FlowId,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM flows f JOIN modules m ON m.flow_id = f.id
                        WHERE f.id = $1 AND m.activity_id = f.activity_id)",
    )
    .bind(id)
    .fetch_one(&mut *connection)
    .await
}

/// Whether a flow of the organization has the xAPI activity IRI `activity`.
pub async fn activity_taken<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    activity: &str,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM flows WHERE org_id = $1 AND activity_id = $2)")
        .bind(org_id)
        .bind(activity)
        .fetch_one(executor)
        .await
}

/// One flow of an organization.
pub async fn get<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    id: FlowId,
) -> Result<Option<Flow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, org_id, name, description, created_at, archived_at, reminders,
                valid_for_months, valid_for_days, renew_before_days, activity_id, required,
                required_for_rule_id FROM flows
         WHERE id = $1 AND org_id = $2",
    )
    .bind(id)
    .bind(org_id)
    .fetch_optional(executor)
    .await
}

/// The modules of a flow in order.
pub async fn modules<'e>(
    executor: impl PgExecutor<'e>,
    flow_id: FlowId,
) -> Result<Vec<Module>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, flow_id, position, name, estimated_minutes, activity_id FROM modules
         WHERE flow_id = $1 ORDER BY position",
    )
    .bind(flow_id)
    .fetch_all(executor)
    .await
}

/// Name, module count and total estimate of a flow, whatever its organization (the caller checks).
pub async fn summary<'e>(
    executor: impl PgExecutor<'e>,
    id: FlowId,
) -> Result<Option<FlowSummary>, sqlx::Error> {
    sqlx::query_as(
        "SELECT f.id, f.org_id, f.name, f.archived_at IS NOT NULL AS archived,
                count(m.id) AS module_count,
                COALESCE(sum(m.estimated_minutes), 0)::bigint AS estimated_minutes, f.required,
                f.required_for_rule_id
         FROM flows f LEFT JOIN modules m ON m.flow_id = f.id
         WHERE f.id = $1 GROUP BY f.id",
    )
    .bind(id)
    .fetch_optional(executor)
    .await
}

/// A page of an organization's flows in id order, after `after` when given.
pub async fn list<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    after: Option<FlowId>,
    limit: i64,
) -> Result<Vec<FlowSummary>, sqlx::Error> {
    sqlx::query_as(
        "SELECT f.id, f.org_id, f.name, f.archived_at IS NOT NULL AS archived,
                count(m.id) AS module_count,
                COALESCE(sum(m.estimated_minutes), 0)::bigint AS estimated_minutes, f.required,
                f.required_for_rule_id
         FROM flows f LEFT JOIN modules m ON m.flow_id = f.id
         WHERE f.org_id = $1 AND ($2::uuid IS NULL OR f.id > $2)
         GROUP BY f.id ORDER BY f.id LIMIT $3",
    )
    .bind(org_id)
    .bind(after)
    .bind(limit)
    .fetch_all(executor)
    .await
}

/// What a flow edit sets (each `None` leaves its field).
#[derive(Debug, Clone, Default)]
pub struct FlowEdit {
    /// The new name.
    pub name: Option<String>,
    /// The new description (`Some(None)`: none).
    pub description: Option<Option<String>>,
    /// Archive (true) or bring back (false).
    pub archived: Option<bool>,
    /// The new reminder policy (`Some(None)`: none).
    pub reminders: Option<Option<ReminderPolicy>>,
    /// The new validity (`Some(None)`: none, which clears the renewal window too).
    pub valid_for: Option<Option<Validity>>,
    /// The new renewal window in days (`Some(None)`: none).
    pub renew_before_days: Option<Option<i32>>,
    /// Mark required (true) or not (false, which clears the audience too).
    pub required: Option<bool>,
    /// Required of a rule's audience (`Some(Some(rule))`) or of everyone (`Some(None)`).
    pub required_for_rule_id: Option<Option<EnrollmentRuleId>>,
    /// The flow's own xAPI activity IRI (`Some(None)`: none).
    pub activity_id: Option<Option<String>>,
    /// Modules of the flow whose xAPI activity IRI is set (`None`: removed).
    pub module_activities: Vec<(ModuleId, Option<String>)>,
}

/// The index a flow's activity IRI that another flow of the organization has breaks.
pub const FLOW_ACTIVITY_INDEX: &str = "flows_org_activity_idx";

/// The index a module's activity IRI that another module of the flow has breaks.
pub const MODULE_ACTIVITY_INDEX: &str = "modules_flow_activity_idx";

/// The foreign key a flow's audience breaks when its rule is deleted meanwhile (an edit or a
/// creation naming it), or when a rule some flow is required for is deleted.
pub const AUDIENCE_RULE_KEY: &str = "flows_required_for_rule_id_fkey";

/// The constraint a renewal window at least as long as its validity breaks (an edit of one of
/// the two checked against the other as stored).
pub const RENEWAL_WINDOW_CONSTRAINT: &str = "flows_renewal_window";

/// Edits the flow `id` of `org_id` in `connection`'s transaction and tells every replica's caches
/// (its name and state are cached for the assign path); `None` when the organization has no such
/// flow.
pub async fn edit(
    connection: &mut sqlx::PgConnection,
    org_id: OrgId,
    id: FlowId,
    edit: &FlowEdit,
) -> Result<Option<Flow>, sqlx::Error> {
    let flow: Option<Flow> = sqlx::query_as(
        "UPDATE flows SET
             name = COALESCE($3, name),
             description = CASE WHEN $4 THEN $5 ELSE description END,
             archived_at = CASE WHEN $6 IS NULL THEN archived_at
                                WHEN $6 THEN COALESCE(archived_at, now())
                                ELSE NULL END,
             reminders = CASE WHEN $7 THEN $8 ELSE reminders END,
             valid_for_months = CASE WHEN $9 THEN $10 ELSE valid_for_months END,
             valid_for_days = CASE WHEN $9 THEN $11 ELSE valid_for_days END,
             renew_before_days = CASE WHEN $12 THEN $13
                                      WHEN $9 AND $10::int IS NULL AND $11::int IS NULL THEN NULL
                                      ELSE renew_before_days END,
             required = COALESCE($14, required),
             activity_id = CASE WHEN $15 THEN $16 ELSE activity_id END,
             required_for_rule_id = CASE WHEN NOT COALESCE($14, true) THEN NULL
                                         WHEN $17 THEN $18
                                         ELSE required_for_rule_id END
         WHERE id = $1 AND org_id = $2
         RETURNING id, org_id, name, description, created_at, archived_at, reminders,
                valid_for_months, valid_for_days, renew_before_days, activity_id, required,
                required_for_rule_id",
    )
    .bind(id)
    .bind(org_id)
    .bind(edit.name.as_deref())
    .bind(edit.description.is_some())
    .bind(edit.description.clone().flatten())
    .bind(edit.archived)
    .bind(edit.reminders.is_some())
    .bind(edit.reminders.clone().flatten().map(sqlx::types::Json))
    .bind(edit.valid_for.is_some())
    .bind(
        edit.valid_for
            .flatten()
            .and_then(|validity| validity.months),
    )
    .bind(edit.valid_for.flatten().and_then(|validity| validity.days))
    .bind(edit.renew_before_days.is_some())
    .bind(edit.renew_before_days.flatten())
    .bind(edit.required)
    .bind(edit.activity_id.is_some())
    .bind(edit.activity_id.clone().flatten())
    .bind(edit.required_for_rule_id.is_some())
    .bind(edit.required_for_rule_id.flatten())
    .fetch_optional(&mut *connection)
    .await?;
    if flow.is_some() && !edit.module_activities.is_empty() {
        let (ids, activities): (Vec<ModuleId>, Vec<Option<String>>) =
            edit.module_activities.iter().cloned().unzip();
        // Cleared first, then set: two modules may trade their IRIs in one edit without either
        // meeting the other's on the way (the unique index is checked row by row).
        sqlx::query("UPDATE modules SET activity_id = NULL WHERE flow_id = $1 AND id = ANY($2)")
            .bind(id)
            .bind(&ids)
            .execute(&mut *connection)
            .await?;
        sqlx::query(
            "UPDATE modules m SET activity_id = t.activity
             FROM unnest($2::uuid[], $3::text[]) AS t(id, activity)
             WHERE m.flow_id = $1 AND m.id = t.id AND t.activity IS NOT NULL",
        )
        .bind(id)
        .bind(&ids)
        .bind(&activities)
        .execute(&mut *connection)
        .await?;
    }
    if flow.is_some() && (edit.valid_for.is_some() || edit.renew_before_days.is_some()) {
        // The renewal window of completions not renewed yet follows the flow's (their expiry
        // stays as fixed at completion).
        sqlx::query(
            "UPDATE assignments a
             SET renew_at = ((a.expires_at AT TIME ZONE o.timezone)
                                - make_interval(days => COALESCE(f.renew_before_days, 0)))
                                AT TIME ZONE o.timezone
             FROM flows f JOIN organizations o ON o.id = f.org_id
             WHERE f.id = $1 AND a.flow_id = f.id AND a.expires_at IS NOT NULL
               AND a.renewal_id IS NULL AND a.expiry_settled_at IS NULL",
        )
        .bind(id)
        .execute(&mut *connection)
        .await?;
    }
    if flow.is_some() {
        super::notify(&mut *connection, super::INVALIDATE_CHANNEL, "flows").await?;
    }
    Ok(flow)
}

/// How many other flows of the organization have this name (case-insensitive).
pub async fn named<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    name: &str,
    except: Option<FlowId>,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*) FROM flows
         WHERE org_id = $1 AND lower(name) = lower($2) AND ($3::uuid IS NULL OR id <> $3)",
    )
    .bind(org_id)
    .bind(name)
    .bind(except)
    .fetch_one(executor)
    .await
}

/// The organization's flows required of the audience of the rule `rule_id` (id and name, by
/// name): a rule they name cannot be deleted.
pub async fn required_of_rule<'e>(
    executor: impl PgExecutor<'e>,
    org_id: OrgId,
    rule_id: EnrollmentRuleId,
) -> Result<Vec<(FlowId, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, name FROM flows WHERE org_id = $1 AND required_for_rule_id = $2
         ORDER BY lower(name), id",
    )
    .bind(org_id)
    .bind(rule_id)
    .fetch_all(executor)
    .await
}
