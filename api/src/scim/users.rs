//! `/scim/v2/Users`: SCIM users are the organization's users (`/v1/users`, the dashboard), by
//! e-mail; `userName` is the address ([`flow_scim::User::email`]).

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use flow_app::ratelimit::Operation;
use flow_app::users as service;
use flow_common::db::scim_filter::{SqlFilter, UnsupportedFilter};
use flow_common::db::users::{Profile, ProfileEmail, ProfileRow};
use flow_domain::ids::UserId;
use flow_domain::{Email, TextRule};
use flow_scim::filter::Filter;
use flow_scim::{
    Manager, Name, PatchRequest, ResourceMeta, ResourceType, ScimError, StartDate, User,
};

use super::resource::{
    Stored, answer, list_request, page_answer, path_id, read_projection, written,
};
use super::{Failure, Resource, ScimAuth, ScimBody, ScimJson, check_if_match, in_place, off_async};
use crate::error::RateHeaders;
use crate::state::AppState;

/// The SCIM view of a stored user. A user who came from elsewhere (the API, a CSV) has their
/// address as the primary work e-mail, so that Entra ID's `emails[type eq "work"]` finds it.
fn scim_user(row: &ProfileRow) -> User {
    let mut user = User::new(
        row.scim_user_name
            .clone()
            .unwrap_or_else(|| row.email.clone()),
    );
    user.name = Name {
        formatted: row.formatted_name.clone(),
        family_name: row.family_name.clone(),
        given_name: row.given_name.clone(),
    };
    user.display_name = row.name.clone();
    user.title = row.title.clone();
    user.active = row.active;
    user.external_id = row.external_id.clone();
    user.department = row.department.clone();
    user.employee_number = row.employee_number.clone();
    user.manager = (row.manager_id.is_some() || row.manager_name.is_some()).then(|| Manager {
        value: row.manager_id.clone(),
        display_name: row.manager_name.clone(),
    });
    user.start_date = row.start_date.map(StartDate::Date);
    user.emails = if row.emails.0.is_empty() {
        vec![flow_scim::Email {
            value: row.email.clone(),
            kind: Some("work".to_owned()),
            primary: true,
        }]
    } else {
        row.emails
            .0
            .iter()
            .map(|email| flow_scim::Email {
                value: email.value.clone(),
                kind: email.kind.clone(),
                primary: email.primary,
            })
            .collect()
    };
    user
}

/// The profile a SCIM user gives: the e-mail must be an address, and so must every value of
/// `emails` (at most [`flow_scim::MAX_EMAILS`], which `flow_scim` checks); the name every
/// surface shows is `displayName`, else `name.formatted`, else the given and family names.
fn profile(user: &User) -> Result<Profile, ScimError> {
    let email = Email::parse("userName", user.email())
        .map_err(|invalid| ScimError::invalid_value(invalid.0))?;
    for (index, address) in user.emails.iter().enumerate() {
        Email::parse(&format!("emails[{index}].value"), &address.value)
            .map_err(|invalid| ScimError::invalid_value(invalid.0))?;
    }
    let joined = [&user.name.given_name, &user.name.family_name]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(" ");
    let name = user
        .display_name
        .clone()
        .or_else(|| user.name.formatted.clone())
        .or_else(|| (!joined.is_empty()).then_some(joined))
        .map(|name| TextRule::NAME.parse("displayName", &name))
        .transpose()
        .map_err(|invalid| ScimError::invalid_value(invalid.0))?;
    // A userName that is not the address is kept as sent (it is what the provider looks the
    // user up by); an address is the e-mail itself.
    let scim_user_name =
        (!user.user_name.eq_ignore_ascii_case(email.as_str())).then(|| user.user_name.clone());
    Ok(Profile {
        email,
        scim_user_name,
        name,
        active: user.active,
        external_id: user.external_id.clone(),
        given_name: user.name.given_name.clone(),
        family_name: user.name.family_name.clone(),
        formatted_name: user.name.formatted.clone(),
        title: user.title.clone(),
        department: user.department.clone(),
        employee_number: user.employee_number.clone(),
        manager_id: user
            .manager
            .as_ref()
            .and_then(|manager| manager.value.clone()),
        manager_name: user
            .manager
            .as_ref()
            .and_then(|manager| manager.display_name.clone()),
        start_date: user.start_date.as_ref().map(StartDate::date),
        emails: user
            .emails
            .iter()
            .map(|email| ProfileEmail {
                value: email.value.clone(),
                kind: email.kind.clone(),
                primary: email.primary,
            })
            .collect(),
    })
}

impl Stored for ProfileRow {
    const KIND: ResourceType = ResourceType::User;

    fn sql_filter(filter: Filter) -> Result<SqlFilter, UnsupportedFilter> {
        SqlFilter::users(filter)
    }

    fn meta(&self) -> ResourceMeta {
        ResourceMeta::new(self.id.to_string(), self.created_at, self.updated_at)
    }

    fn to_scim_json(&self, meta: &ResourceMeta, base_url: &str) -> serde_json::Value {
        scim_user(self).to_json(meta, base_url)
    }
}

/// `GET /Users`.
pub async fn list(
    State(state): State<AppState>,
    auth: ScimAuth,
    uri: Uri,
) -> Result<(RateHeaders, ScimJson), Failure> {
    let request = list_request::<ProfileRow>(&uri)?;
    let rate = auth.limit(&state, Operation::Read).await?;
    let (total, rows) = service::search(
        &state,
        auth.0.acting(),
        request.filter.as_ref(),
        request.page.offset(),
        request.page.count,
    )
    .await?;
    Ok(page_answer(&state, rate, request, total, &rows))
}

/// `GET /Users/{id}`.
pub async fn get(
    State(state): State<AppState>,
    auth: ScimAuth,
    Path(id): Path<String>,
    uri: Uri,
) -> Result<Resource, Failure> {
    let projection = read_projection(&uri, ProfileRow::KIND)?;
    let id = path_id(&id, "user")?;
    let rate = auth.limit(&state, Operation::Read).await?;
    let row = service::profile(&state, auth.0.acting(), id).await?;
    Ok(answer(&state, StatusCode::OK, &row, rate, &projection))
}

/// `POST /Users`: a new user, or the same user again after a SCIM DELETE.
pub async fn create(
    State(state): State<AppState>,
    auth: ScimAuth,
    ScimBody(body): ScimBody,
) -> Result<Resource, Failure> {
    let profile = off_async(move || profile(&User::from_json(&body)?)).await?;
    let rate = auth.limit(&state, Operation::Write).await?;
    let changed = service::provision(&state, auth.0.acting(), profile).await?;
    Ok(written(&state, StatusCode::CREATED, &changed.value, rate))
}

/// `PUT /Users/{id}`: the body replaces the user (an omitted `active` keeps its value).
pub async fn replace(
    State(state): State<AppState>,
    auth: ScimAuth,
    Path(id): Path<String>,
    headers: HeaderMap,
    ScimBody(body): ScimBody,
) -> Result<Resource, Failure> {
    let id = path_id(&id, "user")?;
    let rate = auth.limit(&state, Operation::Write).await?;
    let changed = service::edit(&state, auth.0.acting(), id, |row| {
        check_if_match(&headers, &row.meta())?;
        in_place(|| profile(&scim_user(row).replaced_by(&body)?)).map_err(Failure::from)
    })
    .await?;
    Ok(written(&state, StatusCode::OK, &changed.value, rate))
}

/// `PATCH /Users/{id}`: the operations apply all or nothing.
pub async fn patch(
    State(state): State<AppState>,
    auth: ScimAuth,
    Path(id): Path<String>,
    headers: HeaderMap,
    ScimBody(body): ScimBody,
) -> Result<Resource, Failure> {
    let request = off_async(move || PatchRequest::parse(&body)).await?;
    let id = path_id(&id, "user")?;
    let rate = auth.limit(&state, Operation::Write).await?;
    let changed = service::edit(&state, auth.0.acting(), id, |row| {
        check_if_match(&headers, &row.meta())?;
        in_place(|| profile(&scim_user(row).apply_patch(&request.operations)?))
            .map_err(Failure::from)
    })
    .await?;
    Ok(written(&state, StatusCode::OK, &changed.value, rate))
}

/// `DELETE /Users/{id}`: deactivates the user and hides them from SCIM; their record and
/// history stay.
pub async fn delete(
    State(state): State<AppState>,
    auth: ScimAuth,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<(StatusCode, RateHeaders, ()), Failure> {
    let id: UserId = path_id(&id, "user")?;
    let rate = auth.limit(&state, Operation::Write).await?;
    service::delete(&state, auth.0.acting(), id, |row| {
        check_if_match(&headers, &row.meta())
    })
    .await?;
    Ok((StatusCode::NO_CONTENT, rate, ()))
}
