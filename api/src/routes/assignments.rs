//! `GET /v1/assignments/{id}`: one assignment with its module progress. Ids handed out for
//! duplicates resolve to the assignment they joined.

use axum::Json;
use axum::extract::{Path, State};
use chrono::{DateTime, Utc};
use flow_common::db::assignments::{self, AssignmentRecord, ModuleProgressRecord};
use flow_common::domain::{AssignmentStatus, ModuleStatus};
use flow_common::ids::{AssignmentId, FlowId, ModuleId, ScheduleId, UserId};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::extract::Auth;

/// Routes of this module.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_assignment))
}

/// An assignment.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AssignmentView {
    /// Identifier.
    pub assignment_id: AssignmentId,
    /// Flow.
    pub flow_id: FlowId,
    /// Flow name.
    pub flow_name: String,
    /// Assignee.
    pub user_id: UserId,
    /// Assignee e-mail.
    pub assignee_email: String,
    /// pending, in_progress, completed or overdue (overdue as soon as the due date passes).
    pub status: AssignmentStatus,
    /// low, medium or high.
    pub priority: String,
    /// Notes for the assignee.
    pub notes: Option<String>,
    /// Due date.
    #[serde(serialize_with = "flow_common::domain::timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub due_date: Option<DateTime<Utc>>,
    /// Assignment time.
    #[serde(serialize_with = "flow_common::domain::timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub assigned_at: DateTime<Utc>,
    /// First module activity.
    #[serde(serialize_with = "flow_common::domain::timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub started_at: Option<DateTime<Utc>>,
    /// Completion time.
    #[serde(serialize_with = "flow_common::domain::timestamp::option::serialize")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub completed_at: Option<DateTime<Utc>>,
    /// Modules completed.
    pub completed_modules: i64,
    /// Modules in the flow.
    pub total_modules: i64,
    /// The schedule that created it, if any.
    pub schedule_id: Option<ScheduleId>,
    /// Modules started or completed, in flow order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub module_progress: Option<Vec<ModuleProgressView>>,
}

impl AssignmentView {
    /// The view of a record at `now` (status derived at read time).
    pub fn new(
        record: AssignmentRecord,
        module_progress: Option<Vec<ModuleProgressView>>,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            status: record.status(now),
            assignment_id: record.id,
            flow_id: record.flow_id,
            flow_name: record.flow_name,
            user_id: record.user_id,
            assignee_email: record.assignee_email,
            priority: record.priority,
            notes: record.notes,
            due_date: record.due_at,
            assigned_at: record.assigned_at,
            started_at: record.started_at,
            completed_at: record.completed_at,
            completed_modules: record.completed_modules,
            total_modules: record.total_modules,
            schedule_id: record.schedule_id,
            module_progress,
        }
    }
}

/// Progress of one module.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModuleProgressView {
    /// Module.
    pub module_id: ModuleId,
    /// Module name.
    pub module_name: String,
    /// completed or in_progress.
    pub status: ModuleStatus,
    /// Present for completed modules.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "flow_common::domain::timestamp::option::serialize"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub completed_at: Option<DateTime<Utc>>,
    /// When the module was started (present for modules in progress).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "flow_common::domain::timestamp::option::serialize"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub started_at: Option<DateTime<Utc>>,
}

impl From<ModuleProgressRecord> for ModuleProgressView {
    fn from(record: ModuleProgressRecord) -> Self {
        let status = record.status.parse().unwrap_or(ModuleStatus::InProgress);
        Self {
            module_id: record.module_id,
            module_name: record.module_name,
            completed_at: if status == ModuleStatus::Completed {
                record.completed_at
            } else {
                None
            },
            started_at: record.started_at,
            status,
        }
    }
}

/// Get an assignment.
#[utoipa::path(
    get,
    path = "/v1/assignments/{id}",
    tag = "assignments",
    params(("id" = String, Path, description = "Assignment id (asg_…)")),
    responses(
        (status = 200, description = "The assignment with module progress", body = AssignmentView),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No such assignment in this organization", body = ErrorBody),
    )
)]
pub async fn get_assignment(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<AssignmentView>, ApiError> {
    let id = AssignmentId::parse(&id).ok_or_else(|| ApiError::not_found("assignment"))?;
    let record = assignments::get(&state.db, auth.org_id(), id)
        .await?
        .ok_or_else(|| ApiError::not_found("assignment"))?;
    let progress = assignments::module_progress(&state.db, &[record.id]).await?;
    let progress = progress.into_iter().map(ModuleProgressView::from).collect();
    Ok(Json(AssignmentView::new(
        record,
        Some(progress),
        Utc::now(),
    )))
}
