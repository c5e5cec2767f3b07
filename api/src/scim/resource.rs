//! What the handlers of `/Users` and `/Groups` share: reading a list's or a read's query, the
//! id in a path, and answering with one resource or a page of them.

use std::str::FromStr;

use axum::http::{StatusCode, Uri};
use flow_common::db::scim_filter::{SqlFilter, UnsupportedFilter};
use flow_scim::filter::{Filter, parse_for};
use flow_scim::{ListResponse, Page, Projection, ResourceMeta, ResourceType, ScimError};
use serde_json::Value;

use super::{Failure, ListQuery, ReadQuery, Resource, ScimJson, base_url, location, query};
use crate::error::RateHeaders;
use crate::state::AppState;

/// A stored resource as SCIM shows it.
pub(super) trait Stored {
    /// Its resource type.
    const KIND: ResourceType;

    /// The SQL form of a filter over resources of this type.
    fn sql_filter(filter: Filter) -> Result<SqlFilter, UnsupportedFilter>;

    /// Its id and version.
    fn meta(&self) -> ResourceMeta;

    /// Its whole SCIM JSON, with `meta` and links under `base_url`.
    fn to_scim_json(&self, meta: &ResourceMeta, base_url: &str) -> Value;
}

/// `stored` as the client asked to see it.
fn render<T: Stored>(state: &AppState, stored: &T, projection: &Projection) -> Value {
    projection.apply(stored.to_scim_json(&stored.meta(), base_url(state)))
}

/// The answer with one resource: its version, and its location when it was created.
pub(super) fn answer<T: Stored>(
    state: &AppState,
    status: StatusCode,
    stored: &T,
    rate: RateHeaders,
    projection: &Projection,
) -> Resource {
    let meta = stored.meta();
    Resource {
        status,
        body: render(state, stored, projection),
        location: (status == StatusCode::CREATED).then(|| location(state, T::KIND, &meta.id)),
        version: meta.version,
        rate,
    }
}

/// The answer to a write: the whole resource as it now is.
pub(super) fn written<T: Stored>(
    state: &AppState,
    status: StatusCode,
    stored: &T,
    rate: RateHeaders,
) -> Resource {
    answer(state, status, stored, rate, &Projection::all(T::KIND))
}

/// What a list asks for.
pub(super) struct ListRequest {
    /// Which resources.
    pub filter: Option<SqlFilter>,
    /// Which of them.
    pub page: Page,
    /// Which attributes of each.
    pub projection: Projection,
}

/// Reads a list's query: its filter (400 `invalidFilter` when it cannot be one over `T`), its
/// page and its attributes.
pub(super) fn list_request<T: Stored>(uri: &Uri) -> Result<ListRequest, Failure> {
    let params: ListQuery = query(uri)?;
    let filter = params
        .filter
        .as_deref()
        .map(|text| parse_for(text, T::KIND))
        .transpose()?
        .map(T::sql_filter)
        .transpose()
        .map_err(|error| ScimError::invalid_filter(error.0))?;
    let page = Page::parse(params.start_index.as_deref(), params.count.as_deref())?;
    let projection = Projection::parse(
        T::KIND,
        params.attributes.as_deref(),
        params.excluded_attributes.as_deref(),
    )?;
    Ok(ListRequest {
        filter,
        page,
        projection,
    })
}

/// Reads the attributes a read of one resource of `kind` asks for.
pub(super) fn read_projection(uri: &Uri, kind: ResourceType) -> Result<Projection, Failure> {
    let params: ReadQuery = query(uri)?;
    Ok(Projection::parse(
        kind,
        params.attributes.as_deref(),
        params.excluded_attributes.as_deref(),
    )?)
}

/// The answer to a list: `found`, page `page` of `total` resources.
pub(super) fn page_answer<T: Stored>(
    state: &AppState,
    rate: RateHeaders,
    request: ListRequest,
    total: u64,
    found: &[T],
) -> (RateHeaders, ScimJson) {
    let resources = found
        .iter()
        .map(|stored| render(state, stored, &request.projection))
        .collect();
    (
        rate,
        ScimJson(ListResponse::new(request.page, total, resources).to_json()),
    )
}

/// The id in a path; one that is not an id of ours names no resource (404, `what not found`).
pub(super) fn path_id<I: FromStr>(text: &str, what: &str) -> Result<I, Failure> {
    text.parse()
        .map_err(|_| ScimError::not_found(format!("{what} not found")).into())
}
