//! `POST /v1/compliance/report` (issue 39): each person's standing in a set of flows at an
//! instant, in keyset pages of people or rolled up per department, group or manager, with the
//! totals of the whole filtered population. The rules live in `flow_app::compliance`; this file
//! holds the wire types and the handler. With `format` the answer also says where the export of
//! the whole report will be. See docs/compliance.md.

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use flow_app::compliance::{
    self as service, ComplianceAnswer, ComplianceFields, GroupStanding, PersonStanding, percent,
};
use flow_common::db::compliance::{Cell, Counts};
use flow_common::db::exports::ExportRecord;
use flow_domain::ids::{AssignmentId, EnrollmentRuleId, ExportId, FlowId, UserId};
use flow_domain::report::{ExportFormat, ExportStatus};
use flow_domain::timestamp;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::download::DataAsOf;
use crate::error::{ApiError, ErrorBody, RateHeaders};
use crate::extract::{ApiJson, Auth, RequestId};
use crate::state::AppState;

/// Routes of this module.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(compliance_report))
}

/// Body of the compliance report.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ComplianceRequest {
    /// The flows (1 to 50 ids); absent: every required flow of the organization that is not
    /// archived.
    #[schema(max_items = 50)]
    pub flow_ids: Option<Vec<String>>,
    /// Who is counted (every filter given must hold); absent: everyone.
    pub filter: Option<ComplianceFilter>,
    /// Rows per group instead of people: `department`, `group` or `manager`.
    #[schema(example = "department")]
    pub group_by: Option<String>,
    /// The instant to judge, not in the future: RFC 3339, or `YYYY-MM-DD` for the end of that
    /// day in the organization's time zone (now, for today). Absent: now.
    #[schema(example = "2026-06-30")]
    pub as_of: Option<String>,
    /// The `nextCursor` of the previous page (it carries the instant of the first page).
    pub cursor: Option<String>,
    /// Rows per page, 1 to 1,000 (default 100). Each started 100 counts as one report request.
    #[schema(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    /// Also export the whole report (every person × flow, all pages) as a file of this format,
    /// judged at the same instant as this answer (`asOf`, else the instant of this request).
    #[schema(value_type = Option<ExportFormat>, example = "csv")]
    pub format: Option<String>,
}

/// Who a compliance report counts.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ComplianceFilter {
    /// Only people of this department (case-insensitive), at most 320 characters.
    pub department: Option<String>,
    /// Only members of this group (`grp_…`).
    pub group_id: Option<String>,
    /// Only people whose manager is this (the identity provider's manager id), at most 320
    /// characters.
    pub manager_id: Option<String>,
    /// Only active (true) or deactivated (false) people.
    pub active: Option<bool>,
    /// Only these people (1 to 1,000 e-mail addresses).
    #[schema(max_items = 1000)]
    pub user_emails: Option<Vec<String>>,
}

/// A flow of the report.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComplianceFlowView {
    /// Identifier.
    pub flow_id: FlowId,
    /// Name.
    pub name: String,
    /// Whether it is marked required.
    pub required: bool,
    /// Required only of the audience of this enrollment rule (the people it matches now); null:
    /// of everyone.
    pub required_for_rule_id: Option<EnrollmentRuleId>,
}

/// A person's standing in one flow.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlowStandingView {
    /// The flow.
    pub flow_id: FlowId,
    /// compliant, due_soon, overdue, expired, pending, in_progress, not_assigned, cancelled or
    /// not_required (docs/compliance.md has the rules).
    #[schema(example = "compliant")]
    pub status: String,
    /// Whether the flow is required of this person: false outside the audience of a flow
    /// required of a rule's audience (the pair is then counted in `notRequired`, never in a
    /// summary, even when an assignment of it is judged).
    pub required: bool,
    /// The assignment that decided it: the valid completion when compliant, else the latest
    /// assignment assigned by the instant.
    pub assignment_id: Option<AssignmentId>,
    /// When it was assigned.
    #[serde(serialize_with = "timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub assigned_at: Option<DateTime<Utc>>,
    /// Its due date as it stood at the instant.
    #[serde(serialize_with = "timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub due_at: Option<DateTime<Utc>>,
    /// When it was completed (if by the instant).
    #[serde(serialize_with = "timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub completed_at: Option<DateTime<Utc>>,
    /// When that completion expires or expired (if completed by the instant).
    #[serde(serialize_with = "timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was cancelled (if by the instant).
    #[serde(serialize_with = "timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub cancelled_at: Option<DateTime<Utc>>,
}

/// How much of what is required one person, group or population holds.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComplianceSummary {
    /// Compliant (person, flow) pairs.
    pub compliant: i64,
    /// Required (person, flow) pairs: people × flows required of them.
    pub required: i64,
    /// `compliant` of `required` in percent, to one decimal; null when nothing is required.
    pub percent: Option<f64>,
}

/// A person's row.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CompliancePersonView)]
pub struct PersonView {
    /// The person.
    pub user_id: UserId,
    /// Their e-mail.
    pub email: String,
    /// Their name.
    pub name: Option<String>,
    /// Their department.
    pub department: Option<String>,
    /// Their manager's id (from the identity provider).
    pub manager_id: Option<String>,
    /// Whether they are active now.
    pub active: bool,
    /// Their standing in each flow, in the order of `flows`.
    pub flows: Vec<FlowStandingView>,
    /// Compliant flows of the ones required of them.
    pub summary: ComplianceSummary,
}

/// Counts per status, of the required (person, flow) pairs, and the pairs not required.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusCounts {
    pub compliant: i64,
    pub due_soon: i64,
    pub overdue: i64,
    pub expired: i64,
    pub pending: i64,
    pub in_progress: i64,
    pub not_assigned: i64,
    pub cancelled: i64,
    /// Pairs not required (outside the audience of a flow required of a rule's audience),
    /// whatever their status.
    pub not_required: i64,
}

/// The counts of a group or of the whole population.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CountsView {
    /// People counted: those of whom at least one flow is required.
    pub people: i64,
    /// People compliant in every flow required of them.
    pub people_compliant: i64,
    /// (person, flow) pairs per status.
    pub statuses: StatusCounts,
    /// Compliant pairs of the required ones.
    pub summary: ComplianceSummary,
}

/// A group of the roll-up.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupView {
    /// The department, the group's id (`grp_…`) or the manager's id; null for the people without
    /// one (a person in several groups counts in each).
    pub key: Option<String>,
    /// The department, the group's name or the manager's name.
    pub name: Option<String>,
    /// Its counts.
    #[serde(flatten)]
    pub counts: CountsView,
}

/// A compliance report.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComplianceResponse {
    /// The instant judged (every page of the report judges the same one).
    #[serde(serialize_with = "timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub as_of: DateTime<Utc>,
    /// An open assignment due within this many days is `due_soon`.
    pub due_soon_days: i32,
    /// The flows, in the order of each person's `flows`.
    pub flows: Vec<ComplianceFlowView>,
    /// A page of people, in user id order (absent with `groupBy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub people: Option<Vec<PersonView>>,
    /// A page of groups, in key order (only with `groupBy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<GroupView>>,
    /// The counts of the whole filtered population (every page has the same).
    pub totals: CountsView,
    /// The cursor of the next page; null on the last.
    pub next_cursor: Option<String>,
    /// Identifier of the export (only when a format was asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub export_id: Option<ExportId>,
    /// `{base_url}/v1/exports/<exportId>`: 202 while it is generated, then the file (only when a
    /// format was asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub download_url: Option<String>,
    /// When the download address expires, request time + 24 hours (only when a format was
    /// asked).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "timestamp::option::serialize"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<DateTime<Utc>>,
    /// `pending` at first; see `GET /v1/exports/{id}` (only when a format was asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub export_status: Option<ExportStatus>,
}

impl ComplianceResponse {
    /// Adds where the export will be, beside the report's own fields as the flow report does.
    fn with_export(mut self, export: &ExportRecord, base_url: &str) -> Self {
        self.export_id = Some(export.id);
        self.download_url = Some(format!(
            "{}/v1/exports/{}",
            base_url.trim_end_matches('/'),
            export.id
        ));
        self.expires_at = Some(export.expires_at);
        self.export_status = Some(export.status);
        self
    }
}

fn summary(compliant: i64, required: i64) -> ComplianceSummary {
    ComplianceSummary {
        compliant,
        required,
        percent: percent(compliant, required),
    }
}

fn counts_view(counts: Counts) -> CountsView {
    CountsView {
        people: counts.people,
        people_compliant: counts.people_compliant,
        summary: summary(counts.compliant, counts.cells),
        statuses: StatusCounts {
            compliant: counts.compliant,
            due_soon: counts.due_soon,
            overdue: counts.overdue,
            expired: counts.expired,
            pending: counts.pending,
            in_progress: counts.in_progress,
            not_assigned: counts.not_assigned,
            cancelled: counts.cancelled,
            not_required: counts.not_required,
        },
    }
}

fn cell_view(cell: Cell) -> FlowStandingView {
    FlowStandingView {
        flow_id: cell.flow_id,
        status: cell.status,
        required: cell.required,
        assignment_id: cell.assignment_id,
        assigned_at: cell.assigned_at,
        due_at: cell.due_at,
        completed_at: cell.completed_at,
        expires_at: cell.expires_at,
        cancelled_at: cell.cancelled_at,
    }
}

fn person_view(person: PersonStanding) -> PersonView {
    PersonView {
        user_id: person.user_id,
        email: person.email,
        name: person.name,
        department: person.department,
        manager_id: person.manager_id,
        active: person.active,
        flows: person.flows.into_iter().map(cell_view).collect(),
        summary: summary(person.compliant, person.required),
    }
}

fn group_view(group: GroupStanding) -> GroupView {
    GroupView {
        key: group.key,
        name: group.name,
        counts: counts_view(group.counts),
    }
}

fn response(answer: ComplianceAnswer) -> ComplianceResponse {
    let rolled_up = answer.groups.is_some();
    ComplianceResponse {
        as_of: answer.at,
        due_soon_days: service::DUE_SOON_DAYS,
        flows: answer
            .flows
            .into_iter()
            .map(|flow| ComplianceFlowView {
                flow_id: flow.id,
                name: flow.name,
                required: flow.required,
                required_for_rule_id: flow.required_for_rule_id,
            })
            .collect(),
        people: (!rolled_up).then(|| answer.people.into_iter().map(person_view).collect()),
        groups: answer
            .groups
            .map(|groups| groups.into_iter().map(group_view).collect()),
        totals: counts_view(answer.totals),
        next_cursor: answer.next_cursor,
        export_id: None,
        download_url: None,
        expires_at: None,
        export_status: None,
    }
}

/// Report compliance across flows.
///
/// Each person's standing in each flow (the organization's required flows unless `flowIds`
/// names some) at an instant — now, or `asOf` answered from the assignment history — in pages of
/// people ordered by user id, or with `groupBy` per department, group or manager; `totals` counts
/// the whole filtered population. A flow required of an enrollment rule's audience is
/// `not_required` of the people the rule does not match now, and their pairs are counted apart
/// (`notRequired`). Statuses and their rules: docs/compliance.md. Read on a replica
/// where one is configured (`X-Data-As-Of`). Counts against the report limit: one request per
/// started 100 rows of `limit`. With `format` (csv, excel or pdf) the answer also says where the
/// whole report will be downloadable once the report-worker has written it (one row per person
/// × flow, judged at this answer's `asOf`); the export counts one more report request per
/// started 10,000 rows and is refused (429) while the organization has as many exports waiting
/// or as many bytes of files as allowed.
#[utoipa::path(
    post,
    path = "/v1/compliance/report",
    tag = "compliance",
    request_body = ComplianceRequest,
    responses(
        (status = 200, description = "A page of the report with the population's totals (and where the export will be when a format was asked)", body = ComplianceResponse,
            headers(("X-Data-As-Of" = String, description = "The instant the data is current to (RFC 3339)"))),
        (status = 400, description = "Invalid request: too many flows or e-mails, a bad asOf, cursor, filter or format, or no required flow", body = ErrorBody),
        (status = 404, description = "A flow that is not the organization's", body = ErrorBody),
        (status = 429, description = "Report limit exceeded, or (with a format) the organization has as many exports waiting or running, or as many bytes of export files, as allowed", body = ErrorBody),
        (status = 503, description = "The database is unavailable; no export was recorded", body = ErrorBody),
    )
)]
pub async fn compliance_report(
    State(state): State<AppState>,
    auth: Auth,
    request_id: RequestId,
    ApiJson(request): ApiJson<ComplianceRequest>,
) -> Result<(RateHeaders, DataAsOf, Json<ComplianceResponse>), ApiError> {
    let filter = request.filter.unwrap_or_default();
    let request = service::check(
        ComplianceFields {
            flow_ids: request.flow_ids,
            department: filter.department,
            group_id: filter.group_id,
            manager_id: filter.manager_id,
            active: filter.active,
            user_emails: filter.user_emails,
            group_by: request.group_by,
            as_of: request.as_of,
            cursor: request.cursor,
            limit: request.limit,
            format: request.format,
        },
        auth.zone,
        Utc::now(),
    )?;
    let answer = service::report_with_request_id(
        &state,
        auth.acting(),
        request,
        request_id.caller_supplied(),
    )
    .await?;
    let data_as_of = answer.data_as_of;
    let rate = answer.rate;
    let export = answer.export.clone();
    let mut body = response(answer);
    if let Some(export) = &export {
        body = body.with_export(export, &state.config.public_base_url);
    }
    Ok((RateHeaders(rate), DataAsOf(data_as_of), Json(body)))
}
