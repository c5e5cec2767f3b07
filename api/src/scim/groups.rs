//! `/scim/v2/Groups`: groups of the organization's users, as identity providers push them.

use std::collections::BTreeSet;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use flow_common::db::groups::GroupRow;
use flow_common::db::scim_filter::SqlFilter;
use flow_domain::ids::{GroupId, UserId};
use flow_scim::filter::parse_for;
use flow_scim::{
    Group, ListResponse, Member, Page, PatchRequest, Projection, ResourceMeta, ResourceType,
    ScimError,
};

use super::{
    Failure, ListQuery, ReadQuery, Resource, ScimAuth, ScimBody, ScimJson, base_url,
    check_if_match, location, query,
};
use crate::ratelimit::{Operation, RateInfo};
use crate::services::groups::{self as service, GroupInput, StoredGroup};
use crate::state::AppState;

const KIND: ResourceType = ResourceType::Group;

fn resource_meta(row: &GroupRow) -> ResourceMeta {
    ResourceMeta::new(row.id.to_string(), row.created_at, row.updated_at)
}

fn scim_group(group: &StoredGroup) -> Group {
    let mut scim = Group::new(group.row.display_name.clone());
    scim.external_id = group.row.external_id.clone();
    scim.members = group
        .members
        .iter()
        .map(|member| Member {
            value: member.user_id.to_string(),
            display: Some(member.display.clone()),
        })
        .collect();
    scim
}

/// What a SCIM group asks for: members are user ids of this service; one that is not an id
/// of ours names no user of the organization (400 `invalidValue`).
fn input(group: &Group) -> Result<GroupInput, Failure> {
    let members = group
        .members
        .iter()
        .map(|member| {
            UserId::parse(&member.value).ok_or_else(|| {
                ScimError::invalid_value(format!(
                    "members: no user {} in this organization",
                    member.value
                ))
            })
        })
        .collect::<Result<BTreeSet<_>, _>>()?;
    let display_name = group.display_name.trim().to_owned();
    if display_name.is_empty() {
        return Err(ScimError::invalid_value("displayName is required").into());
    }
    Ok(GroupInput {
        display_name,
        external_id: group.external_id.clone(),
        members,
    })
}

fn render(state: &AppState, group: &StoredGroup, projection: &Projection) -> serde_json::Value {
    projection.apply(scim_group(group).to_json(&resource_meta(&group.row), base_url(state)))
}

fn answer(
    state: &AppState,
    status: StatusCode,
    group: &StoredGroup,
    rate: RateInfo,
    projection: &Projection,
) -> Resource {
    let meta = resource_meta(&group.row);
    Resource {
        status,
        body: render(state, group, projection),
        version: meta.version,
        location: (status == StatusCode::CREATED).then(|| location(state, KIND, &meta.id)),
        rate,
    }
}

fn group_id(text: &str) -> Result<GroupId, Failure> {
    GroupId::parse(text).ok_or_else(|| ScimError::not_found("group not found").into())
}

/// `GET /Groups` (`excludedAttributes=members` skips loading members).
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
        .map(SqlFilter::groups)
        .transpose()
        .map_err(|error| ScimError::invalid_filter(error.0))?;
    let page = Page::parse(params.start_index.as_deref(), params.count.as_deref())?;
    let projection = Projection::parse(
        KIND,
        params.attributes.as_deref(),
        params.excluded_attributes.as_deref(),
    )?;
    let rate = auth.limit(&state, Operation::Read).await?;
    let (total, groups) = service::search(
        &state,
        auth.0.acting(),
        filter.as_ref(),
        page.offset(),
        page.count,
        projection.includes("members"),
    )
    .await?;
    let resources = groups
        .iter()
        .map(|group| render(&state, group, &projection))
        .collect();
    Ok((
        rate,
        ScimJson(ListResponse::new(page, total, resources).to_json()),
    ))
}

/// `GET /Groups/{id}`.
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
    let id = group_id(&id)?;
    let rate = auth.limit(&state, Operation::Read).await?;
    let group = service::get(&state, auth.0.acting(), id, projection.includes("members")).await?;
    Ok(answer(&state, StatusCode::OK, &group, rate, &projection))
}

/// `POST /Groups`.
pub async fn create(
    State(state): State<AppState>,
    auth: ScimAuth,
    ScimBody(body): ScimBody,
) -> Result<Resource, Failure> {
    let group = input(&Group::from_json(&body)?)?;
    let rate = auth.limit(&state, Operation::Write).await?;
    let changed = service::create(&state, auth.0.acting(), group).await?;
    Ok(answer(
        &state,
        StatusCode::CREATED,
        &changed.value,
        rate,
        &Projection::all(KIND),
    ))
}

/// `PUT /Groups/{id}`: the body replaces the group, members included.
pub async fn replace(
    State(state): State<AppState>,
    auth: ScimAuth,
    Path(id): Path<String>,
    headers: HeaderMap,
    ScimBody(body): ScimBody,
) -> Result<Resource, Failure> {
    let replacement = input(&Group::from_json(&body)?)?;
    let id = group_id(&id)?;
    let rate = auth.limit(&state, Operation::Write).await?;
    let changed = service::edit(&state, auth.0.acting(), id, |current| {
        check_if_match(&headers, &resource_meta(&current.row))?;
        Ok::<_, Failure>(replacement)
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

/// `PATCH /Groups/{id}`: renames and member additions and removals, all or nothing; answers
/// 200 with the group (RFC 7644 §3.5.2 allows 200 or 204; Okta and Entra ID take either).
pub async fn patch(
    State(state): State<AppState>,
    auth: ScimAuth,
    Path(id): Path<String>,
    headers: HeaderMap,
    ScimBody(body): ScimBody,
) -> Result<Resource, Failure> {
    let request = PatchRequest::parse(&body)?;
    let id = group_id(&id)?;
    let rate = auth.limit(&state, Operation::Write).await?;
    let changed = service::edit(&state, auth.0.acting(), id, |current| {
        check_if_match(&headers, &resource_meta(&current.row))?;
        input(&scim_group(current).apply_patch(&request.operations)?)
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

/// `DELETE /Groups/{id}`: the group goes; its members stay users.
pub async fn delete(
    State(state): State<AppState>,
    auth: ScimAuth,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<(StatusCode, RateInfo, ()), Failure> {
    let id = group_id(&id)?;
    let rate = auth.limit(&state, Operation::Write).await?;
    service::delete(&state, auth.0.acting(), id, |row| {
        check_if_match(&headers, &resource_meta(row))
    })
    .await?;
    Ok((StatusCode::NO_CONTENT, rate, ()))
}
