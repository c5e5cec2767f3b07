//! `POST /v1/progress/bulk`: module progress of many assignments at once (imports of completions
//! done elsewhere, offline training), each item checked as `POST /v1/assignments/{id}/progress`
//! checks one, all queued in one message of the progress queue whose events travel in the bulk
//! lane.

use axum::Json;
use axum::extract::State;
use chrono::Utc;
use flow_app::changes::Target;
use flow_app::progress::{self, Disposition, MAX_BULK_PROGRESS, ProgressFields, ProgressInput};
use flow_app::ratelimit::Operation;
use flow_app::{FieldProblem, ServiceError};
use flow_domain::Email;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ErrorBody, RateHeaders};
use crate::extract::{ApiJson, Auth, RequestId};
use crate::routes::assignments::ProgressAccepted;
use crate::routes::bulk::{self, Allowance};
use crate::state::AppState;

/// Routes of this module.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(progress_bulk))
}

/// One item of a bulk progress request: an assignment id, or a flow and an assignee (their
/// active assignment of the flow), and the progress of one module.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProgressItem {
    /// The assignment (asg_…); or give `flowId` and `userEmail`.
    pub assignment_id: Option<String>,
    /// The flow of the assignee's assignment.
    pub flow_id: Option<String>,
    /// The assignee.
    pub user_email: Option<String>,
    /// The module (of the assignment's flow).
    #[schema(required = true, value_type = String)]
    pub module_id: Option<String>,
    /// in_progress or completed.
    #[schema(required = true, value_type = String, example = "completed")]
    pub status: Option<String>,
    /// When it happened (RFC 3339, or `YYYY-MM-DD`); default now. Not in the future, not before
    /// the assignment.
    pub at: Option<String>,
    /// Scaled score, -1..1 (as xAPI's `result.score.scaled`: 0.85 for 85 %).
    pub score: Option<f64>,
    /// Whether the learner passed the module.
    pub success: Option<bool>,
    /// Time spent in the module, in seconds (0..=31,622,400).
    pub duration_seconds: Option<i64>,
}

impl ProgressItem {
    /// The assignment the item names and its checked progress, or why the item is neither.
    fn parse(self, zone: chrono_tz::Tz) -> Result<(Target, ProgressInput), ServiceError> {
        let target = match (self.assignment_id, self.flow_id, self.user_email) {
            (Some(id), None, None) => Target::Id(id),
            (None, Some(flow_id), Some(email)) => Target::FlowAndUser {
                flow_id,
                email: Email::parse("userEmail", &email).map_err(|problem| {
                    ServiceError::Fields(vec![FieldProblem::invalid("userEmail", problem)])
                })?,
            },
            _ => {
                return Err(flow_domain::Invalid(
                    "give either assignmentId, or flowId and userEmail".into(),
                )
                .into());
            }
        };
        let input = ProgressInput::parse(
            ProgressFields {
                module_id: self.module_id,
                status: self.status,
                at: self.at,
                score: self.score,
                success: self.success,
                duration_seconds: self.duration_seconds,
            },
            zone,
            Utc::now(),
        )?;
        Ok((target, input))
    }
}

/// Body of the bulk progress operation.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BulkProgressRequest {
    /// Up to 1,000 items.
    pub items: Vec<ProgressItem>,
}

/// Outcome of one bulk progress item.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulkProgressItemResult {
    /// Position in the request.
    pub index: usize,
    /// `accepted` (queued, applied moments later), `unchanged` (the module already has this
    /// status and the item carries no result), `duplicate` (an earlier item says the same),
    /// `invalid`, `not_found`, `conflict` (completed, cancelled, or not persisted yet),
    /// `rate_limited` or `unavailable`.
    #[schema(example = "accepted")]
    pub outcome: &'static str,
    /// The status a single progress call would have answered (202 for accepted, 200 for
    /// unchanged and duplicate).
    pub status: u16,
    /// What was recorded, unless the item failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<ProgressAccepted>,
    /// The error (with the reason), on failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

/// Result of the bulk progress operation.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulkProgressResponse {
    /// One entry per item, in request order.
    pub results: Vec<BulkProgressItemResult>,
    /// Items accepted, unchanged or duplicate.
    pub succeeded: usize,
    /// Items that failed.
    pub failed: usize,
}

/// The outcome name of a failed item, by its status.
fn failure_outcome(status: u16) -> &'static str {
    match status {
        400 | 422 => "invalid",
        404 => "not_found",
        409 => "conflict",
        429 => "rate_limited",
        503 => "unavailable",
        _ => "error",
    }
}

/// Record module progress of many assignments at once (partial success).
///
/// For imports of completions done elsewhere and offline training: each item names an
/// assignment by id, or by flow and assignee, and is checked as a single progress call would
/// check it. Accepted items are queued in one message and applied moments later; their events
/// travel in the bulk lane, so interactive work never waits behind them. Each item counts as one
/// write request; items beyond the remaining allowance fail with 429 individually.
#[utoipa::path(
    post,
    path = "/v1/progress/bulk",
    tag = "assignments",
    request_body = BulkProgressRequest,
    responses(
        (status = 200, description = "Per-item results", body = BulkProgressResponse),
        (status = 400, description = "Invalid request (no items, or more than 1,000)", body = ErrorBody),
        (status = 429, description = "No allowance left for any item", body = ErrorBody),
    )
)]
pub async fn progress_bulk(
    State(state): State<AppState>,
    auth: Auth,
    request_id: RequestId,
    ApiJson(request): ApiJson<BulkProgressRequest>,
) -> Result<(RateHeaders, Json<BulkProgressResponse>), ApiError> {
    let count = request.items.len();
    if count == 0 || count > MAX_BULK_PROGRESS {
        return Err(ApiError::InvalidRequest(format!(
            "items must contain between 1 and {MAX_BULK_PROGRESS} items"
        )));
    }
    let allowance = Allowance::take(&state, &auth, Operation::Write, count).await?;
    let zone = auth.zone;
    let items = request
        .items
        .into_iter()
        .enumerate()
        .map(|(index, item)| allowance.item(index, || item.parse(zone)))
        .collect();
    let results: Vec<BulkProgressItemResult> =
        progress::record_many(&state, auth.acting(), items, Some(&request_id.value))
            .await
            .into_iter()
            .enumerate()
            .map(|(index, outcome)| item_result(index, outcome))
            .collect();
    let succeeded = results.iter().filter(|item| item.error.is_none()).count();
    Ok((
        RateHeaders(allowance.rate),
        Json(BulkProgressResponse {
            failed: results.len() - succeeded,
            succeeded,
            results,
        }),
    ))
}

/// The answer of item `index`.
fn item_result(
    index: usize,
    outcome: Result<(progress::Recorded, Disposition), ServiceError>,
) -> BulkProgressItemResult {
    let disposition = outcome.as_ref().ok().map(|(_, disposition)| *disposition);
    let (status, result, error) = bulk::answer(index, outcome, "bulk progress", |(recorded, _)| {
        ProgressAccepted {
            accepted: true,
            assignment_id: recorded.assignment_id,
            module_id: recorded.module_id,
            status: recorded.status,
            at: recorded.at,
        }
    });
    match disposition {
        Some(disposition) => BulkProgressItemResult {
            index,
            outcome: disposition.as_str(),
            status: if disposition == Disposition::Accepted {
                202
            } else {
                200
            },
            result,
            error,
        },
        None => BulkProgressItemResult {
            index,
            outcome: failure_outcome(status),
            status,
            result,
            error,
        },
    }
}
