//! `/scim/v2/Groups`: groups of the organization's users, as identity providers push them.

use std::collections::BTreeSet;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use flow_app::groups::{self as service, GroupInput, StoredGroup};
use flow_app::ratelimit::{Operation, page_cost};
use flow_common::db::groups::GroupRow;
use flow_common::db::scim_filter::{SqlFilter, UnsupportedFilter};
use flow_domain::ids::{GroupId, UserId};
use flow_scim::filter::Filter;
use flow_scim::{Group, Member, PatchRequest, ResourceMeta, ResourceType, ScimError};

use super::resource::{
    Stored, answer, list_request, page_answer, path_id, read_projection, written,
};
use super::{Failure, Resource, ScimAuth, ScimBody, ScimJson, check_if_match, in_place, off_async};
use crate::error::RateHeaders;
use crate::state::AppState;

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
fn input(group: &Group) -> Result<GroupInput, ScimError> {
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
        return Err(ScimError::invalid_value("displayName is required"));
    }
    Ok(GroupInput {
        display_name,
        external_id: group.external_id.clone(),
        members,
    })
}

impl Stored for StoredGroup {
    const KIND: ResourceType = ResourceType::Group;

    fn sql_filter(filter: Filter) -> Result<SqlFilter, UnsupportedFilter> {
        SqlFilter::groups(filter)
    }

    fn meta(&self) -> ResourceMeta {
        meta(&self.row)
    }

    fn to_scim_json(&self, meta: &ResourceMeta, base_url: &str) -> serde_json::Value {
        scim_group(self).to_json(meta, base_url)
    }
}

/// The id and version of a group (what a deletion's precondition is checked against).
fn meta(row: &GroupRow) -> ResourceMeta {
    ResourceMeta::new(row.id.to_string(), row.created_at, row.updated_at)
}

/// The most group members one response carries (a list's, or one group's); a response that
/// would carry more is 400 `tooMany`, naming the cap.
pub const MAX_MEMBERS_PER_RESPONSE: u64 = 10_000;

/// Loads the members of `found` when they are wanted, after checking they fit in a response
/// and charging their size: one more read per started
/// [`ITEMS_PER_REQUEST`](flow_app::ratelimit::ITEMS_PER_REQUEST) members past the first hundred
/// (the request's own read paid for those).
async fn members_for_response(
    state: &AppState,
    auth: &ScimAuth,
    rate: RateHeaders,
    found: &mut [StoredGroup],
) -> Result<RateHeaders, Failure> {
    let ids: Vec<GroupId> = found.iter().map(|group| group.row.id).collect();
    let count =
        service::member_count(state, auth.0.acting(), &ids, MAX_MEMBERS_PER_RESPONSE + 1).await?;
    if count > MAX_MEMBERS_PER_RESPONSE {
        let what = if found.len() == 1 {
            "the group has"
        } else {
            "these groups have"
        };
        return Err(ScimError::too_many(format!(
            "{what} more than {MAX_MEMBERS_PER_RESPONSE} members, the most one response \
             carries: leave them out (excludedAttributes=members), ask for fewer groups (count), \
             or ask whether a user is a member with filter=members[value eq \"…\"]"
        ))
        .into());
    }
    let extra = page_cost(i64::try_from(count).unwrap_or(i64::MAX)) - 1;
    let rate = if extra > 0 {
        RateHeaders(state.limiter.check(&auth.0, Operation::Read, extra).await?)
    } else {
        rate
    };
    service::load_members(state, auth.0.acting(), found).await?;
    Ok(rate)
}

/// `GET /Groups`: members only when `attributes` names them (RFC 7644 lets a service provider
/// leave out what is costly; Okta and Entra ID read members through the group itself, or not
/// at all), and then at most [`MAX_MEMBERS_PER_RESPONSE`] in all, charged by size.
pub async fn list(
    State(state): State<AppState>,
    auth: ScimAuth,
    uri: Uri,
) -> Result<(RateHeaders, ScimJson), Failure> {
    let mut request = list_request::<StoredGroup>(&uri)?;
    let rate = auth.limit(&state, Operation::Read).await?;
    let with_members = request.projection.names("members");
    let (total, mut groups) = service::search(
        &state,
        auth.0.acting(),
        request.filter.as_ref(),
        request.page.offset(),
        request.page.count,
        false,
    )
    .await?;
    let rate = if with_members {
        members_for_response(&state, &auth, rate, &mut groups).await?
    } else {
        request.projection = request.projection.excluding("members");
        rate
    };
    Ok(page_answer(&state, rate, request, total, &groups))
}

/// `GET /Groups/{id}`: with its members (unless left out), at most
/// [`MAX_MEMBERS_PER_RESPONSE`], charged by size.
pub async fn get(
    State(state): State<AppState>,
    auth: ScimAuth,
    Path(id): Path<String>,
    uri: Uri,
) -> Result<Resource, Failure> {
    let projection = read_projection(&uri, StoredGroup::KIND)?;
    let id = path_id(&id, "group")?;
    let rate = auth.limit(&state, Operation::Read).await?;
    let group = service::get(&state, auth.0.acting(), id, false).await?;
    let mut found = [group];
    let rate = if projection.includes("members") {
        members_for_response(&state, &auth, rate, &mut found).await?
    } else {
        rate
    };
    let [group] = found;
    Ok(answer(&state, StatusCode::OK, &group, rate, &projection))
}

/// `POST /Groups`.
pub async fn create(
    State(state): State<AppState>,
    auth: ScimAuth,
    ScimBody(body): ScimBody,
) -> Result<Resource, Failure> {
    let group = off_async(move || input(&Group::from_json(&body)?)).await?;
    let rate = auth.limit(&state, Operation::Write).await?;
    let changed = service::create(&state, auth.0.acting(), group).await?;
    Ok(written(&state, StatusCode::CREATED, &changed.value, rate))
}

/// `PUT /Groups/{id}`: the body replaces the group, members included.
pub async fn replace(
    State(state): State<AppState>,
    auth: ScimAuth,
    Path(id): Path<String>,
    headers: HeaderMap,
    ScimBody(body): ScimBody,
) -> Result<Resource, Failure> {
    let replacement = off_async(move || input(&Group::from_json(&body)?)).await?;
    let id = path_id(&id, "group")?;
    let rate = auth.limit(&state, Operation::Write).await?;
    let changed = service::edit(&state, auth.0.acting(), id, |current| {
        check_if_match(&headers, &current.meta())?;
        Ok::<_, Failure>(replacement)
    })
    .await?;
    Ok(written(&state, StatusCode::OK, &changed.value, rate))
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
    let request = off_async(move || PatchRequest::parse(&body)).await?;
    let id = path_id(&id, "group")?;
    let rate = auth.limit(&state, Operation::Write).await?;
    let changed = service::edit(&state, auth.0.acting(), id, |current| {
        check_if_match(&headers, &current.meta())?;
        in_place(|| input(&scim_group(current).apply_patch(&request.operations)?))
            .map_err(Failure::from)
    })
    .await?;
    // A group may grow past what one response carries: then the answer is 204 No Content,
    // which RFC 7644 §3.5.2 allows for a PATCH.
    if changed.value.members.len() as u64 > MAX_MEMBERS_PER_RESPONSE {
        return Ok(Resource {
            status: StatusCode::NO_CONTENT,
            body: serde_json::Value::Null,
            version: changed.value.meta().version,
            location: None,
            rate,
        });
    }
    Ok(written(&state, StatusCode::OK, &changed.value, rate))
}

/// `DELETE /Groups/{id}`: the group goes; its members stay users.
pub async fn delete(
    State(state): State<AppState>,
    auth: ScimAuth,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<(StatusCode, RateHeaders, ()), Failure> {
    let id: GroupId = path_id(&id, "group")?;
    let rate = auth.limit(&state, Operation::Write).await?;
    service::delete(&state, auth.0.acting(), id, |row| {
        check_if_match(&headers, &meta(row))
    })
    .await?;
    Ok((StatusCode::NO_CONTENT, rate, ()))
}
