//! `POST /v1/users/{id}/erase`: erasure of a person on request (docs/privacy.md).

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use flow_app::erasure as service;
use flow_app::ratelimit::Operation;
use flow_domain::ids::UserId;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ErrorBody, RateHeaders};
use crate::extract::{ApiPath, Auth};
use crate::routes::unknown_id;
use crate::state::AppState;

/// Routes of this module.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(erase_user))
}

/// What an erasure did.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErasureView {
    /// The user, whose id stays.
    pub user_id: UserId,
    /// The pseudonym that replaced the e-mail everywhere (`erased-…@erased.invalid`).
    pub email: String,
    /// When the user was erased (the first erasure's time).
    #[serde(serialize_with = "flow_domain::timestamp::option::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub erased_at: Option<DateTime<Utc>>,
    /// Rows of this organization rewritten outside the user's own (events, deliveries, audit
    /// entries, exports, dead-lettered messages…).
    pub rows_rewritten: u64,
}

/// Erase a person: their e-mail and names are replaced by a pseudonym everywhere the service
/// keeps them, and the user is deactivated and gone for SCIM. Cannot be undone.
///
/// Their assignments, progress and every count built on them stay, under the pseudonym. Calling
/// it again answers the same and changes nothing more.
#[utoipa::path(
    post,
    path = "/v1/users/{id}/erase",
    tag = "users",
    params(("id" = String, Path, description = "User id (usr_…)")),
    responses(
        (status = 200, description = "Erased", body = ErasureView),
        (status = 404, description = "No such user in this organization", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
    )
)]
pub async fn erase_user(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<(RateHeaders, Json<ErasureView>), ApiError> {
    let Some(id) = UserId::parse(&id) else {
        return Err(unknown_id(&state, &auth, Operation::Write, "user").await);
    };
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    let erased = service::erase(&state, auth.acting(), id).await?;
    Ok((
        rate,
        Json(ErasureView {
            user_id: id,
            email: erased.pseudonym,
            erased_at: erased.erased_at,
            rows_rewritten: erased.rows,
        }),
    ))
}
