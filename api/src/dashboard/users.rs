//! Users: the organization's assignees, searched by e-mail or name, and a CSV import (`email`,
//! optional `name`) that upserts the valid rows and reports each invalid one by line.

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Multipart, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use flow_app::ServiceError;
use flow_app::ratelimit::{Operation, RateLimitError, page_cost};
use flow_app::user_import::{ImportProblem, MAX_IMPORT_BYTES, parse_import};
use flow_app::users as service;
use flow_domain::ids::UserId;
use serde::{Deserialize, Serialize};

use super::auth::SignedIn;
use super::csv_upload::{parse_off_runtime, read_upload};
use super::view::{Layout, Section};
use super::{HtmlQuery, PageError, PageResult};
use crate::state::AppState;

/// Users per page.
const PAGE_SIZE: i64 = 50;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/users", get(list).post(import))
        .layer(DefaultBodyLimit::max(MAX_IMPORT_BYTES))
}

/// A user in the list.
pub struct UserRow {
    /// E-mail.
    pub email: String,
    /// Name, or empty.
    pub name: String,
    /// Creation time.
    pub created: String,
    /// False once deactivated (offboarded): shown, and refused new assigns.
    pub active: bool,
}

/// What an import did.
pub struct ImportSummary {
    /// The file.
    pub file_name: String,
    /// New users.
    pub created: usize,
    /// Users whose name was updated.
    pub updated: usize,
    /// Refused rows.
    pub problems: Vec<ImportProblem>,
}

/// Query of the list.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct UsersQuery {
    /// Part of an e-mail or name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<String>,
    /// Cursor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/users.html")]
struct UsersPage {
    layout: Layout,
    users: Vec<UserRow>,
    search: String,
    next_url: Option<String>,
    first_url: Option<String>,
    import: Option<ImportSummary>,
    import_error: Option<String>,
}

async fn page(
    state: &AppState,
    account: &SignedIn,
    query: UsersQuery,
    import: Option<ImportSummary>,
    import_error: Option<String>,
) -> Result<UsersPage, PageError> {
    let layout = Layout::new(account, Section::Users).await;
    let search = query
        .search
        .as_deref()
        .map(str::trim)
        .filter(|text| !text.is_empty())
        .map(|text| text.chars().take(320).collect::<String>());
    let after = query.after.as_deref().and_then(UserId::parse);
    let mut rows = service::list_matching(
        state,
        account.acting(),
        search.as_deref(),
        after,
        PAGE_SIZE + 1,
    )
    .await?;
    let url = |after: Option<String>| {
        let query = serde_html_form::to_string(UsersQuery {
            search: search.clone(),
            after,
        })
        .unwrap_or_default();
        format!("/dashboard/users?{query}")
    };
    let page_size = usize::try_from(PAGE_SIZE).unwrap_or(usize::MAX);
    let next_url = if rows.len() > page_size {
        rows.truncate(page_size);
        rows.last().map(|user| url(Some(user.id.to_string())))
    } else {
        None
    };
    Ok(UsersPage {
        users: rows
            .iter()
            .map(|user| UserRow {
                email: user.email.clone(),
                name: user.name.clone().unwrap_or_default(),
                created: layout.time(&user.created_at),
                active: user.active,
            })
            .collect(),
        layout,
        first_url: after.map(|_| url(None)),
        search: search.unwrap_or_default(),
        next_url,
        import,
        import_error,
    })
}

async fn list(
    State(state): State<AppState>,
    account: SignedIn,
    HtmlQuery(query): HtmlQuery<UsersQuery>,
) -> PageResult<UsersPage> {
    page(&state, &account, query, None, None).await
}

async fn import(
    State(state): State<AppState>,
    account: SignedIn,
    multipart: Multipart,
) -> PageResult {
    account.require_admin()?;
    let (file_name, parsed) = match read_upload(multipart, "users.csv").await?.file {
        None => (
            String::new(),
            Err("Choose a CSV file to import.".to_owned()),
        ),
        Some((file_name, file)) => (file_name, parse_off_runtime(file, parse_import).await?),
    };
    let (new_users, problems) = match parsed {
        Ok(parsed) => parsed,
        Err(message) => {
            let page = page(&state, &account, UsersQuery::default(), None, Some(message)).await?;
            return Ok((StatusCode::BAD_REQUEST, page).into_response());
        }
    };
    // Charged like `POST /v1/users/bulk`: one write request per started 100 users, so a file
    // cannot write (and have the rules assign) more than the organization's write limit allows.
    let cost = page_cost(i64::try_from(new_users.len()).unwrap_or(i64::MAX));
    match state
        .limiter
        .check(&account.caller, Operation::Write, cost)
        .await
    {
        Ok(_) => {}
        Err(error @ RateLimitError::Exceeded { .. }) => {
            let message = format!(
                "Nothing was imported: {error}. An import of {} users costs {cost} write requests \
             (one per started {}); try again later, or split the file.",
                new_users.len(),
                flow_app::ratelimit::ITEMS_PER_REQUEST
            );
            let page = page(&state, &account, UsersQuery::default(), None, Some(message)).await?;
            return Ok((StatusCode::TOO_MANY_REQUESTS, page).into_response());
        }
        Err(other) => return Err(ServiceError::from(other).into()),
    }
    let imported = service::import(&state, account.acting(), new_users).await?;
    let summary = ImportSummary {
        file_name,
        created: imported.created,
        updated: imported.updated,
        problems,
    };
    Ok(
        page(&state, &account, UsersQuery::default(), Some(summary), None)
            .await?
            .into_response(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_keeps_valid_rows_and_names_the_lines_of_the_others() {
        let (users, problems) = parse_import(
            b"Email,Name\nalice@example.com,Alice\nnot-an-email,Bob\n,\ncarol@example.com,\n",
        )
        .unwrap();
        assert_eq!(users.len(), 2);
        assert_eq!(users[0].name.as_deref(), Some("Alice"));
        assert_eq!(users[1].name, None);
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].line, 3);
        assert_eq!(problems[0].email, "not-an-email");
        assert!(parse_import(b"name\nx\n").is_err());
    }
}
