//! One module per resource; each exposes `router()`, and the OpenAPI document is built from them.

pub mod analysis;
pub mod assign;
pub mod assignments;
pub mod audit_events;
pub mod bulk;
pub mod compliance;
pub mod enrollment_rules;
pub mod event_sources;
pub mod event_triggers;
pub mod events;
pub mod exports;
pub mod flows;
pub mod health;
pub mod inbound;
pub mod pagination;
pub mod progress;
pub mod report;
pub mod schedules;
pub mod settings;
pub mod user_erasure;
pub mod users;
pub mod webhooks;

use flow_app::ratelimit::Operation;
use utoipa_axum::router::OpenApiRouter;

use crate::error::ApiError;
use crate::extract::Auth;
use crate::state::AppState;

/// The answer to an id that cannot name anything (`what`, e.g. `delivery`) for an operation its
/// service limits: the allowance is charged first, as it is for an id that parses, so a 404 costs
/// what a real request costs and a used-up limit answers 429 either way.
pub async fn unknown_id(
    state: &AppState,
    auth: &Auth,
    operation: Operation,
    what: &str,
) -> ApiError {
    match state.limiter.check(auth, operation, 1).await {
        Ok(_) => ApiError::not_found(what),
        Err(error) => error.into(),
    }
}

/// Every route of the API.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(health::router())
        .merge(assign::router())
        .merge(assignments::router())
        .merge(progress::router())
        .merge(users::router())
        .merge(flows::router())
        .merge(report::router())
        .merge(analysis::router())
        .merge(compliance::router())
        .merge(exports::router())
        .merge(schedules::router())
        .merge(settings::router())
        .merge(audit_events::router())
        .merge(enrollment_rules::router())
        .merge(event_triggers::router())
        .merge(events::router())
        .merge(event_sources::router())
        .merge(inbound::router())
        .merge(user_erasure::router())
        .merge(webhooks::router())
}
