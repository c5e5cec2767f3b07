//! `POST /v1/flows/assign` and `POST /v1/flows/assign/bulk`.
//!
//! A 200 means the command is durably in RabbitMQ (persistent, quorum queue, publisher confirm);
//! the assign-worker persists it moments later. Ids are chosen here, so the answer does not wait
//! for Postgres writes: a caller's `X-Request-ID` derives the id (retries get the same one), and
//! an assignee who already has the flow active gets the existing assignment back.

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use flow_app::assign::{
    AssignFields, AssignInput, Assigned, MAX_BULK_ITEMS, assign_many, assign_one,
};
use flow_app::ratelimit::Operation;
use flow_common::amqp::Lane;
use flow_domain::ids::AssignmentId;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ErrorBody, RateHeaders};
use crate::extract::{ApiJson, Auth, RequestId};
use crate::routes::bulk::{self, Allowance};
use crate::state::AppState;

/// Routes of this module.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(assign))
        .routes(routes!(assign_bulk))
}

/// Body of the assign operation.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AssignRequest {
    /// Identifier of the flow to assign.
    #[schema(required = true, value_type = String, example = "flow_0193a1b2c3d47e8f9a0b1c2d3e4f5a6b")]
    pub flow_id: Option<String>,
    /// E-mail of the assignee; must exist in the caller's organization (case-insensitive).
    #[schema(required = true, value_type = String, example = "alice@example.com")]
    pub user_email: Option<String>,
    /// Due date: RFC 3339 timestamp, or `YYYY-MM-DD` (end of that day in the organization's time
    /// zone). Must be in the future.
    #[schema(example = "2026-12-31")]
    pub due_date: Option<String>,
    /// One of low, medium, high (default medium).
    #[schema(example = "high")]
    pub priority: Option<String>,
    /// Free text for the assignee, at most 2,000 characters.
    pub notes: Option<String>,
}

/// Result of the assign operation.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AssignResponse {
    /// Always true on a 200.
    pub success: bool,
    /// Identifier of the assignment; store it.
    pub assignment_id: AssignmentId,
    /// Human-readable confirmation.
    pub message: String,
    /// Summary.
    pub details: AssignDetails,
}

/// Summary details of an assignment.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AssignDetails {
    /// When the assignment was made (RFC 3339, UTC).
    #[serde(serialize_with = "flow_domain::timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub assigned_at: DateTime<Utc>,
    /// E-mail of the assignee.
    pub assignee_email: String,
    /// Name of the flow.
    pub flow_name: String,
    /// Number of modules in the flow.
    pub module_count: i64,
    /// Human-readable estimate, e.g. "2 hours 30 minutes".
    pub estimated_duration: String,
}

impl From<AssignRequest> for AssignFields {
    fn from(request: AssignRequest) -> Self {
        Self {
            flow_id: request.flow_id,
            user_email: request.user_email,
            due_date: request.due_date,
            priority: request.priority,
            notes: request.notes,
        }
    }
}

impl From<Assigned> for AssignResponse {
    fn from(assigned: Assigned) -> Self {
        Self {
            success: true,
            assignment_id: assigned.assignment_id,
            message: assigned.message(),
            details: AssignDetails {
                assigned_at: assigned.assigned_at,
                estimated_duration: assigned.estimated_duration(),
                assignee_email: assigned.assignee_email,
                flow_name: assigned.flow_name,
                module_count: assigned.module_count,
            },
        }
    }
}

/// Assign a flow to a user.
///
/// Idempotent per `X-Request-ID`; assigning a flow the user already has active returns the
/// existing assignment and creates nothing.
#[utoipa::path(
    post,
    path = "/v1/flows/assign",
    tag = "assignments",
    request_body = AssignRequest,
    params(("X-Request-ID" = Option<String>, Header, description = "Caller-chosen id; makes the request idempotent")),
    responses(
        (status = 200, description = "Assigned (or already assigned)", body = AssignResponse),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 404, description = "Flow or user not found", body = ErrorBody),
        (status = 409, description = "X-Request-ID reused for a different assignment", body = ErrorBody),
        (status = 429, description = "Rate limit exceeded", body = ErrorBody),
        (status = 503, description = "Could not be queued durably; nothing was accepted", body = ErrorBody),
    )
)]
pub async fn assign(
    State(state): State<AppState>,
    auth: Auth,
    request_id: RequestId,
    ApiJson(request): ApiJson<AssignRequest>,
) -> Result<(RateHeaders, Json<AssignResponse>), ApiError> {
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Assign, 1).await?);
    let now = Utc::now();
    let input = AssignInput::parse(request.into(), auth.zone, now)?;
    let assigned = assign_one(&state, &auth, input, request_id.caller_supplied(), now).await?;
    Ok((rate, Json(assigned.into())))
}

/// Body of the bulk assign operation.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BulkAssignRequest {
    /// Up to 1,000 assign requests.
    pub assignments: Vec<AssignRequest>,
}

/// Outcome of one bulk item.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulkItemResult {
    /// Position in the request.
    pub index: usize,
    /// The status a single assign would have answered.
    pub status: u16,
    /// The result, on success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<AssignResponse>,
    /// The error, on failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

/// Result of the bulk assign operation.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulkAssignResponse {
    /// One entry per item, in request order.
    pub results: Vec<BulkItemResult>,
    /// Items answered 200.
    pub succeeded: usize,
    /// Items that failed.
    pub failed: usize,
}

/// Assign many flows at once (partial success).
///
/// Each item counts as one assign request for rate limiting; items beyond the remaining allowance
/// fail with 429 individually. With `X-Request-ID: R`, item `i` is idempotent under `R#i`.
#[utoipa::path(
    post,
    path = "/v1/flows/assign/bulk",
    tag = "assignments",
    request_body = BulkAssignRequest,
    responses(
        (status = 200, description = "Per-item results", body = BulkAssignResponse),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 429, description = "No allowance left for any item", body = ErrorBody),
    )
)]
pub async fn assign_bulk(
    State(state): State<AppState>,
    auth: Auth,
    request_id: RequestId,
    ApiJson(request): ApiJson<BulkAssignRequest>,
) -> Result<(RateHeaders, Json<BulkAssignResponse>), ApiError> {
    let count = request.assignments.len();
    if count == 0 || count > MAX_BULK_ITEMS {
        return Err(ApiError::InvalidRequest(format!(
            "assignments must contain between 1 and {MAX_BULK_ITEMS} items"
        )));
    }
    let allowance = Allowance::take(&state, &auth, Operation::Assign, count).await?;
    let now = Utc::now();
    let items = request
        .assignments
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            let input = allowance.item(index, || AssignInput::parse(item.into(), auth.zone, now));
            let item_request_id = request_id
                .caller_supplied()
                .map(|id| format!("{id}#{index}"));
            (input, item_request_id)
        })
        .collect();
    let results: Vec<BulkItemResult> = assign_many(&state, &auth, Lane::Bulk, items, now)
        .await
        .into_iter()
        .enumerate()
        .map(|(index, outcome)| {
            let (status, result, error) =
                bulk::answer(index, outcome, "bulk assign", AssignResponse::from);
            BulkItemResult {
                index,
                status,
                result,
                error,
            }
        })
        .collect();
    let succeeded = results.iter().filter(|item| item.status == 200).count();
    Ok((
        RateHeaders(allowance.rate),
        Json(BulkAssignResponse {
            failed: results.len() - succeeded,
            succeeded,
            results,
        }),
    ))
}
