//! The organization's lifecycle settings (issue 37): cancel on deactivation and the default
//! reminder policy of its flows.

use axum::Json;
use axum::extract::State;
use flow_app::org_settings::{self as service, SettingsFields};
use flow_app::ratelimit::Operation;
use flow_common::db::orgs::OrgSettings;
use flow_domain::reminders::ReminderPolicy;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ErrorBody, RateHeaders};
use crate::extract::{ApiJson, Auth, present};
use crate::state::AppState;

/// Routes of this module.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_settings, update_settings))
}

/// The organization's settings.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettingsView {
    /// Whether deactivating a user (SCIM `active: false`, or a SCIM delete) cancels their open
    /// assignments (pending, in progress, overdue), each with one `flow.cancelled` whose reason
    /// is `user deactivated`. Reactivating them does not restore those assignments.
    pub cancel_on_deactivate: bool,
    /// The default reminder policy, for the flows without one of their own (a flow's policy,
    /// even one with empty lists, wins). Absent when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub reminders: Option<ReminderPolicy>,
}

fn view(settings: OrgSettings) -> SettingsView {
    SettingsView {
        cancel_on_deactivate: settings.cancel_on_deactivate,
        reminders: settings.reminders.map(|policy| policy.0),
    }
}

/// Get the organization's settings.
#[utoipa::path(
    get,
    path = "/v1/settings",
    tag = "settings",
    responses(
        (status = 200, description = "The organization's settings", body = SettingsView),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn get_settings(
    State(state): State<AppState>,
    auth: Auth,
) -> Result<(RateHeaders, Json<SettingsView>), ApiError> {
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Read, 1).await?);
    let settings = service::get(&state, auth.acting()).await?;
    Ok((rate, Json(view(settings))))
}

/// Body of the settings change: each field given is set; a field left out stays.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UpdateSettingsRequest {
    /// Whether deactivating a user cancels their open assignments (default false).
    pub cancel_on_deactivate: Option<bool>,
    /// The default reminder policy of flows without their own (the rules of a flow's: each
    /// list at most 10 offsets of 1 to 365 days); `null` removes it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<ReminderPolicy>)]
    pub reminders: Option<Option<ReminderPolicy>>,
}

/// Change the organization's settings.
///
/// Counts against the organization's write limit; audited as `settings.updated`.
#[utoipa::path(
    patch,
    path = "/v1/settings",
    tag = "settings",
    request_body = UpdateSettingsRequest,
    responses(
        (status = 200, description = "The settings as changed", body = SettingsView),
        (status = 400, description = "Invalid request, or nothing to change", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
    )
)]
pub async fn update_settings(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(request): ApiJson<UpdateSettingsRequest>,
) -> Result<(RateHeaders, Json<SettingsView>), ApiError> {
    let edit = service::check(SettingsFields {
        cancel_on_deactivate: request.cancel_on_deactivate,
        reminders: request.reminders,
    })?;
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    let settings = service::update(&state, auth.acting(), &edit).await?;
    Ok((rate, Json(view(settings))))
}
