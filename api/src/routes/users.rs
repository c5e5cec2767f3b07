//! Users of an organization (assignees): upsert by e-mail, singly or in bulk, and list.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use flow_app::ratelimit::{Operation, page_cost};
use flow_app::users as service;
use flow_common::db::users::{NewUser, User};
use flow_domain::Email;
use flow_domain::ids::{GroupId, UserId};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ErrorBody, RateHeaders};
use crate::extract::{ApiJson, ApiPath, ApiQuery, Auth};
use crate::routes::pagination::{Page, PageQuery};
use crate::state::AppState;

/// Most users in one bulk upsert.
pub const MAX_BULK_USERS: usize = 1_000;

/// Routes of this module.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(upsert_user, list_users))
        .routes(routes!(upsert_users))
        .routes(routes!(get_user))
}

/// A user to create or update.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UserInput {
    /// E-mail address (unique in the organization, case-insensitive).
    #[schema(required = true, value_type = String, example = "alice@example.com")]
    pub email: Option<String>,
    /// Display name: one line, at most 200 characters.
    #[schema(max_length = 200)]
    pub name: Option<String>,
}

impl UserInput {
    /// Checks a user; `prefix` names where it sits in the request (`users[3].` in a bulk).
    fn check(self, prefix: &str) -> Result<NewUser, ApiError> {
        Ok(service::check(
            self.email.as_deref(),
            self.name.as_deref(),
            prefix,
        )?)
    }
}

/// A user.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserView {
    /// Identifier.
    pub user_id: UserId,
    /// E-mail.
    pub email: String,
    /// Display name.
    pub name: Option<String>,
    /// False once the user was deactivated (SCIM `active: false` or DELETE): assigns to them
    /// are refused with 409 `conflict`; their history stays.
    pub active: bool,
    /// Creation time.
    #[serde(serialize_with = "flow_domain::timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
}

impl From<User> for UserView {
    fn from(user: User) -> Self {
        Self {
            user_id: user.id,
            email: user.email,
            name: user.name,
            active: user.active,
            created_at: user.created_at,
        }
    }
}

/// Create a user, or update the name of the user with that e-mail.
#[utoipa::path(
    post,
    path = "/v1/users",
    tag = "users",
    request_body = UserInput,
    responses(
        (status = 201, description = "Created", body = UserView),
        (status = 200, description = "Already existed; updated", body = UserView),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 429, description = "Write limit exceeded", body = ErrorBody),
    )
)]
pub async fn upsert_user(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(input): ApiJson<UserInput>,
) -> Result<(StatusCode, RateHeaders, Json<UserView>), ApiError> {
    let user = input.check("")?;
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, 1).await?);
    let mut rows = service::upsert(&state, auth.acting(), &[user]).await?;
    let user = rows
        .pop()
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("upsert returned no row")))?;
    let status = if user.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, rate, Json(user.into())))
}

/// Body of the bulk upsert.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BulkUsersRequest {
    /// Up to 1,000 users.
    #[schema(min_items = 1, max_items = 1000)]
    pub users: Vec<UserInput>,
}

/// Result of the bulk upsert.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulkUsersResponse {
    /// The users, in request order.
    pub users: Vec<UserView>,
    /// How many were new.
    pub created: usize,
    /// How many existed.
    pub updated: usize,
}

/// Create or update up to 1,000 users in one transaction (all or nothing).
///
/// Counts against the organization's write limit: one request per started 100 users.
#[utoipa::path(
    post,
    path = "/v1/users/bulk",
    tag = "users",
    request_body = BulkUsersRequest,
    responses(
        (status = 200, description = "Upserted", body = BulkUsersResponse),
        (status = 400, description = "Invalid request (nothing was written)", body = ErrorBody),
        (status = 429, description = "Write limit exceeded (nothing was written)", body = ErrorBody),
    )
)]
pub async fn upsert_users(
    State(state): State<AppState>,
    auth: Auth,
    ApiJson(request): ApiJson<BulkUsersRequest>,
) -> Result<(RateHeaders, Json<BulkUsersResponse>), ApiError> {
    if request.users.is_empty() || request.users.len() > MAX_BULK_USERS {
        return Err(ApiError::InvalidRequest(format!(
            "users must contain between 1 and {MAX_BULK_USERS} items"
        )));
    }
    let users = request
        .users
        .into_iter()
        .enumerate()
        .map(|(index, user)| user.check(&format!("users[{index}].")))
        .collect::<Result<Vec<_>, _>>()?;
    let cost = page_cost(i64::try_from(users.len()).unwrap_or(i64::MAX));
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Write, cost).await?);
    let rows = service::upsert(&state, auth.acting(), &users).await?;
    let created = rows.iter().filter(|user| user.created).count();
    let response = BulkUsersResponse {
        updated: rows.len() - created,
        created,
        users: rows.into_iter().map(UserView::from).collect(),
    };
    Ok((rate, Json(response)))
}

/// Filters of the user list.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UserFilter {
    /// Only the user with this whole e-mail address (case-insensitive).
    pub email: Option<String>,
    /// Only users whose e-mail or name contains this text (case-insensitive; 1 to 320
    /// characters), as the dashboard's search matches.
    #[param(min_length = 1, max_length = 320)]
    pub q: Option<String>,
}

/// Longest `q` of the user list, in characters (the longest e-mail address).
const MAX_SEARCH_CHARS: usize = 320;

/// List the organization's users.
#[utoipa::path(
    get,
    path = "/v1/users",
    tag = "users",
    params(PageQuery, UserFilter),
    responses(
        (status = 200, description = "A page of users", body = Page<UserView>),
        (status = 400, description = "Invalid query", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn list_users(
    State(state): State<AppState>,
    auth: Auth,
    ApiQuery(page): ApiQuery<PageQuery>,
    ApiQuery(filter): ApiQuery<UserFilter>,
) -> Result<(RateHeaders, Json<Page<UserView>>), ApiError> {
    if filter.email.is_some() && filter.q.is_some() {
        return Err(ApiError::InvalidRequest(
            "email finds one user by the whole address and q searches by part of it: give one"
                .into(),
        ));
    }
    if let Some(email) = filter.email {
        let email = Email::parse("email", &email)?;
        let rate = RateHeaders(state.limiter.check(&auth, Operation::Read, 1).await?);
        let found = service::by_email(&state, auth.acting(), &email).await?;
        let page = Page {
            data: found.into_iter().map(UserView::from).collect(),
            next_cursor: None,
        };
        return Ok((rate, Json(page)));
    }
    let search = match filter.q.as_deref().map(str::trim) {
        None => None,
        Some(text) if text.is_empty() || text.chars().count() > MAX_SEARCH_CHARS => {
            return Err(ApiError::InvalidRequest(format!(
                "q must be 1 to {MAX_SEARCH_CHARS} characters (not counting spaces around it)"
            )));
        }
        Some(text) => Some(text),
    };
    let limit = page.limit()?;
    let after = page.cursor(UserId::parse)?;
    let rate = state
        .limiter
        .check(&auth, Operation::Read, page_cost(limit))
        .await?;
    let rows = match search {
        Some(text) => {
            service::list_matching(&state, auth.acting(), Some(text), after, limit + 1).await?
        }
        None => service::list(&state, auth.acting(), after, limit + 1).await?,
    };
    let page = Page::from_rows(rows, limit, |user| user.id.to_string(), UserView::from);
    Ok((RateHeaders(rate), Json(page)))
}

/// A person: who they are in the organization (as their identity provider describes them) and
/// the groups they belong to.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PersonView {
    /// Identifier.
    pub user_id: UserId,
    /// E-mail.
    pub email: String,
    /// Display name.
    pub name: Option<String>,
    /// False once the user was deactivated (SCIM `active: false` or DELETE).
    pub active: bool,
    /// Job title (SCIM `title`).
    pub title: Option<String>,
    /// Department (SCIM enterprise `department`).
    pub department: Option<String>,
    /// Employee number (SCIM enterprise `employeeNumber`).
    pub employee_number: Option<String>,
    /// Their manager's id at the identity provider (SCIM enterprise `manager.value`).
    pub manager_id: Option<String>,
    /// Their manager's name (SCIM enterprise `manager.displayName`).
    pub manager_name: Option<String>,
    /// First day of work, `YYYY-MM-DD`.
    #[schema(value_type = Option<String>, format = Date)]
    pub start_date: Option<chrono::NaiveDate>,
    /// Groups, by name.
    pub groups: Vec<GroupRefView>,
    /// Creation time.
    #[serde(serialize_with = "flow_domain::timestamp::serialize")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
}

/// A group a person belongs to.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupRefView {
    /// The group.
    pub group_id: GroupId,
    /// Its name.
    pub display_name: String,
}

/// Get a person.
///
/// Their attributes (department, title, manager, groups, active) as the identity provider sent
/// them; their assignments are at `GET /v1/users/{id}/assignments`.
#[utoipa::path(
    get,
    path = "/v1/users/{id}",
    tag = "users",
    params(("id" = String, Path, description = "User id (usr_…)")),
    responses(
        (status = 200, description = "The person", body = PersonView),
        (status = 404, description = "No such user in this organization", body = ErrorBody),
        (status = 429, description = "Read limit exceeded", body = ErrorBody),
    )
)]
pub async fn get_user(
    State(state): State<AppState>,
    auth: Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<(RateHeaders, Json<PersonView>), ApiError> {
    let rate = RateHeaders(state.limiter.check(&auth, Operation::Read, 1).await?);
    let id = UserId::parse(id.trim()).ok_or_else(|| ApiError::not_found("user"))?;
    let (profile, groups) = service::person(&state, auth.acting(), id).await?;
    Ok((
        rate,
        Json(PersonView {
            user_id: profile.id,
            email: profile.email,
            name: profile.name,
            active: profile.active,
            title: profile.title,
            department: profile.department,
            employee_number: profile.employee_number,
            manager_id: profile.manager_id,
            manager_name: profile.manager_name,
            start_date: profile.start_date,
            groups: groups
                .into_iter()
                .map(|group| GroupRefView {
                    group_id: group.id,
                    display_name: group.display_name,
                })
                .collect(),
            created_at: profile.created_at,
        }),
    ))
}
