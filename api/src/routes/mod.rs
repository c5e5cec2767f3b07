//! One module per resource; each exposes `router()`, and the OpenAPI document is built from them.

pub mod assign;
pub mod assignments;
pub mod exports;
pub mod flows;
pub mod health;
pub mod pagination;
pub mod report;
pub mod schedules;
pub mod users;
pub mod webhooks;

use utoipa_axum::router::OpenApiRouter;

use crate::state::AppState;

/// Every route of the API.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(health::router())
        .merge(assign::router())
        .merge(assignments::router())
        .merge(users::router())
        .merge(flows::router())
        .merge(report::router())
        .merge(exports::router())
        .merge(schedules::router())
        .merge(webhooks::router())
}
