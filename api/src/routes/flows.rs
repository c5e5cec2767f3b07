//! Flows: create (with ordered modules), list, get.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use flow_app::flows::{self as service, FlowEditFields, FlowFields, ModuleFields};
use flow_app::ratelimit::{Operation, page_cost};
use flow_common::db::flows::{Flow, FlowSummary, Module};
use flow_domain::duration::humanize_minutes;
use flow_domain::expiry::Validity;
use flow_domain::ids::{EnrollmentRuleId, FlowId, ModuleId};
use flow_domain::reminders::ReminderPolicy;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ErrorBody, RateHeaders};
use crate::extract::{ApiJson, ApiPath, ApiQuery, Auth, present};
use crate::routes::pagination::{Page, PageQuery};
use crate::state::AppState;

/// Routes of this module.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_flow, list_flows))
        .routes(routes!(get_flow, update_flow))
}

/// A flow to create.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateFlowRequest {
    /// Name: one line, at most 200 characters.
    #[schema(required = true, value_type = String, max_length = 200, example = "Security Basics")]
    pub name: Option<String>,
    /// Description: at most 2,000 characters.
    #[schema(max_length = 2000)]
    pub description: Option<String>,
    /// Ordered modules (1 to 500).
    #[schema(required = true, value_type = Vec<ModuleInput>, min_items = 1, max_items = 500)]
    pub modules: Option<Vec<ModuleInput>>,
    /// The reminder policy (as `PATCH /v1/flows/{id}` sets it): `flow.reminder` events before
    /// and after each assignment's due date and an escalation to the manager.
    pub reminders: Option<ReminderPolicy>,
    /// How long a completion stays valid, `{"months": n}` (1 to 120) or `{"days": n}` (1 to
    /// 3650): each completion then expires (`expiresAt`) and is renewed.
    pub valid_for: Option<Validity>,
    /// Days before expiry (1 to 365, less than the validity; needs `validFor`) to assign the
    /// renewal and send `flow.expiring`; absent: at expiry.
    #[schema(minimum = 1, maximum = 365)]
    pub renew_before_days: Option<i32>,
    /// The flow's own xAPI activity IRI (at most 2,048 characters, unique in the organization):
    /// a statement `satisfied` about it completes the learner's assignment (docs/xapi.md).
    #[schema(example = "https://courses.example.com/security-basics")]
    pub activity_id: Option<String>,
    /// Required (default false): `POST /v1/compliance/report` covers the required flows when it
    /// names none. Of every person of the organization, or with `requiredForRuleId` of a rule's
    /// audience.
    pub required: Option<bool>,
    /// Required only of the audience of this enrollment rule (`enr_…`): the people it matches
    /// now; the others are `not_required` in the compliance report. Needs `"required": true`;
    /// a rule that is not the organization's is 404.
    #[schema(example = "enr_0193a1b2c3d47e8f9a0b1c2d3e4f5a6c")]
    pub required_for_rule_id: Option<String>,
}

/// A module to create.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ModuleInput {
    /// Name: one line, at most 200 characters.
    #[schema(required = true, value_type = String, max_length = 200, example = "Phishing")]
    pub name: Option<String>,
    /// Estimated time to complete, in minutes, 0 to 100,000 (default 0).
    #[schema(example = 30, minimum = 0, maximum = 100000)]
    pub estimated_minutes: Option<i32>,
    /// The xAPI activity IRI learning content names the module by (`object.id` of its
    /// statements; at most 2,048 characters, unique within the flow; docs/xapi.md).
    #[schema(example = "https://courses.example.com/security-basics/phishing")]
    pub activity_id: Option<String>,
}

/// A flow with its modules.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlowView {
    /// Identifier.
    pub flow_id: FlowId,
    /// Name.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// Archived: it takes no new assignments (409) and keeps its assignments and reports.
    pub archived: bool,
    /// Required (of everyone, or of `requiredForRuleId`'s audience): the compliance report
    /// covers it when it names no flow.
    pub required: bool,
    /// Required only of the audience of this enrollment rule (the people it matches now); null:
    /// of everyone (or not required).
    pub required_for_rule_id: Option<EnrollmentRuleId>,
    /// Its reminder policy (absent in lists and when it has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub reminders: Option<ReminderPolicy>,
    /// How long a completion stays valid (absent in lists and when completions do not expire).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub valid_for: Option<Validity>,
    /// Days before expiry the renewal is assigned (absent: at expiry).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub renew_before_days: Option<i32>,
    /// The flow's own xAPI activity IRI (absent in lists and when it has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub activity_id: Option<String>,
    /// Number of modules.
    pub module_count: i64,
    /// Human-readable total estimate.
    pub estimated_duration: String,
    /// Modules in order (absent in lists).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modules: Option<Vec<ModuleView>>,
    /// Creation time.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "flow_domain::timestamp::option::serialize"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub created_at: Option<DateTime<Utc>>,
    /// What the caller should know about the request that did not stop it (only on create:
    /// another flow already has this name).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A module.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModuleView {
    /// Identifier.
    pub module_id: ModuleId,
    /// Name.
    pub name: String,
    /// Zero-based position.
    pub position: i32,
    /// Estimate in minutes.
    pub estimated_minutes: i32,
    /// Its xAPI activity IRI, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub activity_id: Option<String>,
}

fn flow_view(flow: Flow, modules: Vec<Module>) -> FlowView {
    let minutes: i64 = modules
        .iter()
        .map(|module| i64::from(module.estimated_minutes))
        .sum();
    let valid_for = flow.validity();
    FlowView {
        flow_id: flow.id,
        name: flow.name,
        description: flow.description,
        archived: flow.archived_at.is_some(),
        required: flow.required,
        required_for_rule_id: flow.required_for_rule_id,
        reminders: flow.reminders.map(|policy| policy.0),
        valid_for,
        renew_before_days: flow.renew_before_days,
        activity_id: flow.activity_id,
        module_count: modules.len() as i64,
        estimated_duration: humanize_minutes(u64::try_from(minutes).unwrap_or(0)),
        modules: Some(
            modules
                .into_iter()
                .map(|module| ModuleView {
                    module_id: module.id,
                    name: module.name,
                    position: module.position,
                    estimated_minutes: module.estimated_minutes,
                    activity_id: module.activity_id,
                })
                .collect(),
        ),
        created_at: Some(flow.created_at),
        warnings: Vec::new(),
    }
}

fn summary_view(flow: FlowSummary) -> FlowView {
    FlowView {
        flow_id: flow.id,
        name: flow.name,
        description: None,
        archived: flow.archived,
        required: flow.required,
        required_for_rule_id: flow.required_for_rule_id,
        reminders: None,
        valid_for: None,
        renew_before_days: None,
        activity_id: None,
        module_count: flow.module_count,
        estimated_duration: humanize_minutes(u64::try_from(flow.estimated_minutes).unwrap_or(0)),
        modules: None,
        created_at: None,
        warnings: Vec::new(),
    }
}

/// Create a flow.
///
/// Counts against the organization's write limit: one request per started 100 modules.
#[utoipa::path(
    post,
    path = "/v1/flows",
    tag = "flows",
    request_body = CreateFlowRequest,
    responses(
        (status = 201, description = "Created", body = FlowView),
        (status = 400, description = "Invalid request (a requiredForRuleId without required, or not a rule id)", body = ErrorBody),
        (status = 404, description = "requiredForRuleId is not a rule of this organization", body = ErrorBody),
        (status = 409, description = "The activityId is another flow's or module's of the organization", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
    )
)]
pub async fn create_flow(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(request): ApiJson<CreateFlowRequest>,
) -> Result<(StatusCode, RateHeaders, Json<FlowView>), ApiError> {
    let flow = service::check(FlowFields {
        name: request.name,
        description: request.description,
        modules: request
            .modules
            .unwrap_or_default()
            .into_iter()
            .map(|module| ModuleFields {
                name: module.name,
                estimated_minutes: module.estimated_minutes,
                activity_id: module.activity_id,
            })
            .collect(),
        reminders: request.reminders,
        valid_for: request.valid_for,
        renew_before_days: request.renew_before_days,
        activity_id: request.activity_id,
        required: request.required,
        required_for_rule_id: request.required_for_rule_id,
    })?;
    let cost = page_cost(i64::try_from(flow.modules.len()).unwrap_or(i64::MAX));
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, cost).await?);
    let taken = service::name_taken(&state, auth.acting(), &flow.name, None).await?;
    let (flow, modules) = service::create(&state, auth.acting(), &flow).await?;
    let mut view = flow_view(flow, modules);
    if taken {
        view.warnings.push(format!(
            "another flow of the organization is already named \"{}\": a file upload that names \
             a flow by its name cannot tell them apart (use flow ids there, or rename one)",
            view.name
        ));
    }
    Ok((StatusCode::CREATED, rate, Json(view)))
}
/// List the organization's flows.
#[utoipa::path(
    get,
    path = "/v1/flows",
    tag = "flows",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of flows", body = Page<FlowView>),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn list_flows(
    State(state): State<AppState>,
    auth: Auth,
    ApiQuery(page): ApiQuery<PageQuery>,
) -> Result<(RateHeaders, Json<Page<FlowView>>), ApiError> {
    let limit = page.limit()?;
    let after = page.cursor(FlowId::parse)?;
    let rate = state
        .limiter
        .check(&auth, Operation::Read, page_cost(limit))
        .await?;
    let rows = service::list(&state, auth.acting(), after, limit + 1).await?;
    let page = Page::from_rows(rows, limit, |flow| flow.id.to_string(), summary_view);
    Ok((RateHeaders(rate), Json(page)))
}

/// Get a flow with its modules.
#[utoipa::path(
    get,
    path = "/v1/flows/{id}",
    tag = "flows",
    params(("id" = String, Path, description = "Flow id (flow_…)")),
    responses(
        (status = 200, description = "The flow", body = FlowView),
        (status = 404, description = "No such flow in this organization", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn get_flow(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<(RateHeaders, Json<FlowView>), ApiError> {
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Read, 1).await?);
    let id = FlowId::parse(&id).ok_or_else(|| ApiError::not_found("flow"))?;
    let (flow, modules) = service::get(&state, auth.acting(), id).await?;
    Ok((rate, Json(flow_view(flow, modules))))
}

/// Body of the flow edit: each field given is set; a field left out stays.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UpdateFlowRequest {
    /// New name: one line, at most 200 characters.
    #[schema(max_length = 200, example = "Security Basics 2027")]
    pub name: Option<String>,
    /// New description, at most 2,000 characters; `null` removes it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, max_length = 2000)]
    pub description: Option<Option<String>>,
    /// Archive (true: no new assignments, 409) or bring back (false).
    pub archived: Option<bool>,
    /// The reminder policy: `flow.reminder` events before and after each assignment's due date
    /// and an escalation to the manager (each list at most 10 offsets of 1 to 365 days); `null`
    /// removes it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<ReminderPolicy>)]
    pub reminders: Option<Option<ReminderPolicy>>,
    /// How long a completion stays valid, `{"months": n}` (1 to 120) or `{"days": n}` (1 to
    /// 3650): each completion then expires (`expiresAt`) and is renewed; `null` removes it (and
    /// the renewal window). Completions made before keep their `expiresAt`.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Validity>)]
    pub valid_for: Option<Option<Validity>>,
    /// Days before expiry (1 to 365, less than the validity) to assign the renewal and send
    /// `flow.expiring`; `null` or absent: at expiry.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i32>)]
    pub renew_before_days: Option<Option<i32>>,
    /// Mark the flow required (true) or not (false, which also clears `requiredForRuleId`): the
    /// compliance report covers the required flows when it names none.
    pub required: Option<bool>,
    /// Required only of the audience of this enrollment rule (`enr_…`, with `"required": true`
    /// in the same request; a rule that is not the organization's is 404); `null`: of everyone
    /// again.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, example = "enr_0193a1b2c3d47e8f9a0b1c2d3e4f5a6c")]
    pub required_for_rule_id: Option<Option<String>>,
    /// The flow's own xAPI activity IRI (absolute, at most 2,048 characters; another flow of the
    /// organization's is a 409); `null` removes it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, example = "https://lms.example.com/courses/security-basics")]
    pub activity_id: Option<Option<String>>,
    /// Modules whose xAPI activity IRI changes (1 to 500, each once); the others keep theirs.
    /// Nothing else of a module is edited in place.
    pub modules: Option<Vec<ModuleActivityEdit>>,
}

/// A module's new xAPI activity IRI.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ModuleActivityEdit {
    /// The module (mod_…) of this flow (404 otherwise).
    #[schema(example = "mod_0193a1b2c3d47e8f9a0b1c2d3e4f5a6c")]
    pub module_id: String,
    /// Its activity IRI (absolute, at most 2,048 characters, unique within the flow); `null`
    /// removes it.
    #[schema(
        required = true,
        example = "https://lms.example.com/courses/security-basics/phishing"
    )]
    pub activity_id: Option<String>,
}

/// Change a flow.
///
/// Its name, description, archived state, reminder policy, validity, whether it is required
/// (of everyone, or of an enrollment rule's audience: `requiredForRuleId`), and the xAPI activity IRIs of the flow and its modules; modules are not otherwise edited in
/// place (create a new flow). An archived flow takes no new assignments (409 `conflict`) and keeps its assignments,
/// their progress and its reports. Takes effect on every replica at once. Counts against the
/// organization's write limit; audited as `flow.updated`.
#[utoipa::path(
    patch,
    path = "/v1/flows/{id}",
    tag = "flows",
    request_body = UpdateFlowRequest,
    params(("id" = String, Path, description = "Flow id (flow_…)")),
    responses(
        (status = 200, description = "The flow as changed", body = FlowView),
        (status = 400, description = "Invalid request, or nothing to change (a requiredForRuleId without \"required\": true, or not a rule id)", body = ErrorBody),
        (status = 404, description = "No such flow in this organization, a module not of this flow, or a requiredForRuleId that is not a rule of this organization", body = ErrorBody),
        (status = 409, description = "activityId is another flow's of the organization", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
    )
)]
pub async fn update_flow(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
    ApiJson(request): ApiJson<UpdateFlowRequest>,
) -> Result<(RateHeaders, Json<FlowView>), ApiError> {
    let edit = service::check_edit(FlowEditFields {
        name: request.name,
        description: request.description,
        archived: request.archived,
        reminders: request.reminders,
        valid_for: request.valid_for,
        renew_before_days: request.renew_before_days,
        required: request.required,
        required_for_rule_id: request.required_for_rule_id,
        activity_id: request.activity_id,
        module_activities: request.modules.map(|modules| {
            modules
                .into_iter()
                .map(|module| (module.module_id, module.activity_id))
                .collect()
        }),
    })?;
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    let id = FlowId::parse(&id).ok_or_else(|| ApiError::not_found("flow"))?;
    let (flow, modules) = service::edit(&state, auth.acting(), id, &edit).await?;
    Ok((rate, Json(flow_view(flow, modules))))
}
