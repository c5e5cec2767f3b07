//! `/scim/v2/Users`: SCIM users are the organization's users (`/v1/users`, the dashboard), by
//! e-mail; `userName` is the address ([`flow_scim::User::email`]).

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use flow_common::db::users::{Profile, ProfileEmail, ProfileRow};
use flow_domain::ids::UserId;
use flow_domain::{Email, TextRule};
use flow_scim::filter::parse_for;
use flow_scim::{
    ListResponse, Manager, Name, Page, PatchRequest, Projection, ResourceMeta, ResourceType,
    ScimError, StartDate, User,
};

use super::{
    Failure, ListQuery, ReadQuery, Resource, ScimAuth, ScimBody, ScimJson, base_url,
    check_if_match, location, query,
};
use crate::ratelimit::{Operation, RateInfo};
use crate::services::users as service;
use crate::state::AppState;

const KIND: ResourceType = ResourceType::User;

/// The SCIM view of a stored user. A user who came from elsewhere (the API, a CSV) has their
/// address as the primary work e-mail, so that Entra ID's `emails[type eq "work"]` finds it.
fn scim_user(row: &ProfileRow) -> User {
    let mut user = User::new(row.email.clone());
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

fn resource_meta(row: &ProfileRow) -> ResourceMeta {
    ResourceMeta::new(row.id.to_string(), row.created_at, row.updated_at)
}

/// The profile a SCIM user gives: the e-mail must be an address; the name every surface shows
/// is `displayName`, else `name.formatted`, else the given and family names.
fn profile(user: &User) -> Result<Profile, Failure> {
    let email = Email::parse("userName", user.email())
        .map_err(|invalid| ScimError::invalid_value(invalid.0))?;
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
    Ok(Profile {
        email,
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

fn render(state: &AppState, row: &ProfileRow, projection: &Projection) -> serde_json::Value {
    projection.apply(scim_user(row).to_json(&resource_meta(row), base_url(state)))
}

fn answer(
    state: &AppState,
    status: StatusCode,
    row: &ProfileRow,
    rate: RateInfo,
    projection: &Projection,
) -> Resource {
    let meta = resource_meta(row);
    Resource {
        status,
        body: render(state, row, projection),
        version: meta.version,
        location: (status == StatusCode::CREATED).then(|| location(state, KIND, &meta.id)),
        rate,
    }
}

fn user_id(text: &str) -> Result<UserId, Failure> {
    UserId::parse(text).ok_or_else(|| ScimError::not_found("user not found").into())
}

/// `GET /Users`.
pub async fn list(
    State(state): State<AppState>,
    auth: ScimAuth,
    uri: Uri,
) -> Result<(RateInfo, ScimJson), Failure> {
    let params: ListQuery = query(&uri)?;
    let filter = params
        .filter
        .as_deref()
        .map(|text| parse_for(text, KIND))
        .transpose()?
        .map(flow_common::db::scim_filter::SqlFilter::users)
        .transpose()
        .map_err(|error| ScimError::invalid_filter(error.0))?;
    let page = Page::parse(params.start_index.as_deref(), params.count.as_deref())?;
    let projection = Projection::parse(
        KIND,
        params.attributes.as_deref(),
        params.excluded_attributes.as_deref(),
    )?;
    let rate = auth.limit(&state, Operation::Read).await?;
    let (total, rows) = service::search(
        &state,
        auth.0.acting(),
        filter.as_ref(),
        page.offset(),
        page.count,
    )
    .await?;
    let resources = rows
        .iter()
        .map(|row| render(&state, row, &projection))
        .collect();
    Ok((
        rate,
        ScimJson(ListResponse::new(page, total, resources).to_json()),
    ))
}

/// `GET /Users/{id}`.
pub async fn get(
    State(state): State<AppState>,
    auth: ScimAuth,
    Path(id): Path<String>,
    uri: Uri,
) -> Result<Resource, Failure> {
    let params: ReadQuery = query(&uri)?;
    let projection = Projection::parse(
        KIND,
        params.attributes.as_deref(),
        params.excluded_attributes.as_deref(),
    )?;
    let id = user_id(&id)?;
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
    let user = User::from_json(&body)?;
    let profile = profile(&user)?;
    let rate = auth.limit(&state, Operation::Write).await?;
    let changed = service::provision(&state, auth.0.acting(), profile).await?;
    Ok(answer(
        &state,
        StatusCode::CREATED,
        &changed.value,
        rate,
        &Projection::all(KIND),
    ))
}

/// `PUT /Users/{id}`: the body replaces the user (an omitted `active` keeps its value).
pub async fn replace(
    State(state): State<AppState>,
    auth: ScimAuth,
    Path(id): Path<String>,
    headers: HeaderMap,
    ScimBody(body): ScimBody,
) -> Result<Resource, Failure> {
    let id = user_id(&id)?;
    let rate = auth.limit(&state, Operation::Write).await?;
    let changed = service::edit(&state, auth.0.acting(), id, |row| {
        check_if_match(&headers, &resource_meta(row))?;
        profile(&scim_user(row).replaced_by(&body)?)
    })
    .await?;
    Ok(answer(
        &state,
        StatusCode::OK,
        &changed.value,
        rate,
        &Projection::all(KIND),
    ))
}

/// `PATCH /Users/{id}`: the operations apply all or nothing.
pub async fn patch(
    State(state): State<AppState>,
    auth: ScimAuth,
    Path(id): Path<String>,
    headers: HeaderMap,
    ScimBody(body): ScimBody,
) -> Result<Resource, Failure> {
    let request = PatchRequest::parse(&body)?;
    let id = user_id(&id)?;
    let rate = auth.limit(&state, Operation::Write).await?;
    let changed = service::edit(&state, auth.0.acting(), id, |row| {
        check_if_match(&headers, &resource_meta(row))?;
        profile(&scim_user(row).apply_patch(&request.operations)?)
    })
    .await?;
    Ok(answer(
        &state,
        StatusCode::OK,
        &changed.value,
        rate,
        &Projection::all(KIND),
    ))
}

/// `DELETE /Users/{id}`: deactivates the user and hides them from SCIM; their record and
/// history stay.
pub async fn delete(
    State(state): State<AppState>,
    auth: ScimAuth,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<(StatusCode, RateInfo, ()), Failure> {
    let id = user_id(&id)?;
    let rate = auth.limit(&state, Operation::Write).await?;
    service::delete(&state, auth.0.acting(), id, |row| {
        check_if_match(&headers, &resource_meta(row))
    })
    .await?;
    Ok((StatusCode::NO_CONTENT, rate, ()))
}
