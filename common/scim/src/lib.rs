//! The SCIM 2.0 wire protocol (RFC 7643, RFC 7644) as identity providers — Okta and
//! Microsoft Entra ID foremost — really speak it, with no I/O: no HTTP, database or runtime.
//! The `/scim/v2` surface translates requests with it and renders the service's results with
//! it; the service decides (uniqueness, existence of member ids, deactivation, rules).
//!
//! # What a surface does with it
//!
//! | Request | Crate calls |
//! | --- | --- |
//! | `GET /Users?filter=…&startIndex=…&count=…&attributes=…` | [`filter::parse_for`] (an AST with canonical names, for SQL), [`Page::parse`], [`Projection::parse`]; then [`User::to_json`] → [`Projection::apply`] per user → [`ListResponse`] |
//! | `GET /Users/{id}` | [`User::to_json`] with a [`ResourceMeta`], [`Projection::apply`] |
//! | `POST /Users` | [`User::from_json`] |
//! | `PUT /Users/{id}` | [`User::replaced_by`] (the stored user replaced by the body) |
//! | `PATCH /Users/{id}` | [`PatchRequest::parse`], then [`User::apply_patch`] (all or nothing) |
//! | Groups | [`Group::from_json`] (POST and PUT), [`Group::apply_patch`], [`Group::membership_changes`] to write only the difference, [`Projection::includes`] to skip loading members |
//! | `If-Match` | [`meta::if_match`] against [`ResourceMeta::version`] (a weak ETag) |
//! | Errors | [`ScimError`]: [`ScimError::status`] and [`ScimError::to_json`] (also `Serialize`) |
//! | `/ServiceProviderConfig`, `/ResourceTypes`, `/Schemas` | [`discovery`] functions given the service's base URL |
//!
//! Locations are `{base_url}/scim/v2/{Users|Groups}/{id}` ([`meta::location`]).
//!
//! # Decisions
//!
//! - **Attributes kept.** Users: `userName`, `name` (`givenName`, `familyName`,
//!   `formatted`), `displayName`, `title`, `active`, `emails` (`value`, `type`, `primary`),
//!   `externalId`; the enterprise extension's `department`, `employeeNumber`, `manager`
//!   (`value`, `displayName`); a start date. Groups: `displayName`, `externalId`, `members`
//!   (`value`, `display`; users only). One table, [`schema`], declares them with their RFC 7643
//!   characteristics; the `/Schemas` documents, filters, PATCH paths and projection all read
//!   it.
//! - **E-mail.** Flow identifies people by e-mail. [`User::email`] is `userName` when it is an
//!   address (Okta's default, Entra ID's user principal name), else the primary, then the
//!   work, then the first of `emails`. When rendering a user that came from elsewhere (the
//!   API, a CSV), put the address in `emails` as the primary `work` one, so that Entra ID's
//!   `emails[type eq "work"].value` paths find it.
//! - **Start date.** Flow's own extension attribute
//!   `urn:ietf:params:scim:schemas:extension:flow:2.0:User:startDate` (announced in
//!   `/Schemas` and `/ResourceTypes`), `YYYY-MM-DD` or an RFC 3339 timestamp ([`StartDate`]).
//!   Administrators map an HR field to a custom attribute; the names they commonly use —
//!   `startDate`, `hireDate`, `employeeHireDate` (Entra ID's user property) — are also read at
//!   the top level or inside the enterprise extension ([`schema::START_DATE_ALIASES`]).
//!   Rendering always uses the Flow extension.
//! - **Unknown attributes are ignored** in POST/PUT bodies and PATCH operations (RFC 7643 lets
//!   a service provider ignore what it does not support, and providers send `phoneNumbers`,
//!   `addresses`, custom extensions whatever the mapping). In a `filter` they are 400
//!   `invalidFilter`, which names the filterable attributes.
//! - **Read-only attributes** (`id`, `meta`) in bodies are ignored (RFC 7643 §7); a PATCH path
//!   naming them is 400 `mutability`; inside a path-less PATCH value object they are ignored
//!   (Okta's group rename carries the group's `id`).
//! - **PUT never reactivates**: an omitted `active` keeps its value; everything else the body
//!   leaves out is cleared. A new user is active unless the body says otherwise.
//! - **Leniencies providers need**: `op` and attribute names in any case (Entra ID sends
//!   `Replace`); `active` (any boolean) as the strings `"True"`/`"False"` (Entra ID); a
//!   path-less `add`/`replace` value object whose keys are paths (`name.givenName`,
//!   `emails[type eq "work"].value`, URN-qualified attributes) or URN-keyed extension
//!   objects; `manager` as the bare id string; removing members with `path: "members"` and
//!   the members as `value` (Entra ID's older shape) besides `members[value eq "…"]` (Okta and
//!   Entra ID now); `schemas` optional in a PATCH body; the filter
//!   `emails[type eq "work"].value eq "…"` (Entra ID matching on the work e-mail) read as
//!   `emails[type eq "work" and value eq "…"]`.
//! - **Multi-valued PATCH** (one implementation for `emails` and `members`):
//!   `replace` through a value filter that matches nothing is 400 `noTarget` (RFC 7644
//!   §3.5.2.3); `add` through one creates the value from the filter's `eq` terms; `remove`
//!   that matches nothing changes nothing, so provider retries are harmless; adding a value
//!   already present updates it; at most one value is `primary`. Every operation is linear:
//!   the values are indexed by `value` for the whole request, so `add`, removal by value and
//!   `[value eq "…"]` filters are lookups however large the group.
//! - **Null, blank and unassigned are the same** (RFC 7643 §2.5); strings are trimmed.
//! - **ETags.** [`ResourceMeta::new`] versions a resource by its `lastModified` in
//!   microseconds, rendered as `W/"…"`; `/ServiceProviderConfig` announces ETag support, so
//!   the service must give every resource a version (that constructor does).
//!
//! # Limits
//!
//! | Limit | Value | Over it |
//! | --- | --- | --- |
//! | `filter` length | [`filter::MAX_FILTER_LENGTH`] = 4,096 characters | 400 `invalidFilter` naming the limit |
//! | `filter` nesting (parentheses, brackets, `not`) | [`filter::MAX_FILTER_DEPTH`] = 32 | 400 `invalidFilter` naming the limit |
//! | PATCH operations per request | [`patch::MAX_PATCH_OPERATIONS`] = 1,000 | 413, as RFC 7644 §3.7.4 answers bulk `maxOperations` |
//! | values the operations of one PATCH carry together (each counts its value arrays' items, at least one) | [`patch::MAX_PATCH_VALUES`] = 10,000 | 400 `tooMany` naming the cap |
//! | values a PATCH's value filters examine, other than `value eq "…"` (a lookup) | [`MAX_SCANNED_VALUES`] = 1,000,000 | 400 `tooMany` naming the cap |
//! | `emails` of a user | [`MAX_EMAILS`] = 10 | 400 `invalidValue` naming the cap |
//! | `members` in a group `POST` or `PUT` (a group may grow past it by PATCH) | [`MAX_MEMBERS_PER_WRITE`] = 1,000 | 400 `invalidValue` naming the cap |
//! | string attribute | [`MAX_STRING_LENGTH`] = 1,024 characters | 400 `invalidValue` |
//! | page size (`count`) | default [`list::DEFAULT_PAGE_SIZE`] = 100, at most [`list::MAX_PAGE_SIZE`] = 200 (`filter.maxResults`) | lowered to 200; below 0 → 0; `startIndex` below 1 → 1 |
//!
//! Syntax errors in filters and paths name the problem and its 1-based character position:
//! `invalid filter: expected ')', but the input ended (at character 17)`. Errors from PATCH
//! name the operation: `Operations[1] (replace id): 'id' is read-only`.
//!
//! # Errors and their `scimType`
//!
//! `invalidSyntax`: the body is not the expected message (not an object, no `Operations`,
//! an unknown `op`). `invalidValue`: a value of the wrong type, a required one missing or
//! removed (`userName`, `displayName`, an e-mail's or member's `value`), a member that is not
//! a user. `invalidPath`: a malformed PATCH path, a sub-attribute of a simple attribute, a
//! value filter on a single-valued one. `invalidFilter`: a malformed or unsupported filter,
//! including one inside a PATCH path's brackets. `noTarget`: a path-less `remove`, a filtered
//! `replace` that matches nothing. `mutability`: a PATCH of `id` or `meta`. `uniqueness`
//! (409), `tooMany`, `invalidVers`, `sensitive` have constructors for the service's use.
//! Query parameters (`startIndex`, `count`, `attributes`) that are not what they must be are
//! 400 without a `scimType`, which the RFC does not define for them.
//!
//! # Translating a filter to SQL
//!
//! [`filter::parse_for`] returns only filterable attributes, in canonical spelling, with
//! comparison values of the attribute's type (strings for strings, booleans with `eq`/`ne`
//! only, RFC 3339 strings for `meta.lastModified`). Match on the printed path
//! (`AttrPath`'s `Display`: `userName`, `emails.value`, `name.familyName`,
//! `meta.lastModified`); `emails` alone has become `emails.value`. String comparisons are
//! case-insensitive unless the attribute is `caseExact` (`id`, `externalId`,
//! `members.value`): see [`schema::resolve`]`(…).leaf().case_exact`. A
//! [`filter::Filter::ValuePath`] means one value of the multi-valued attribute satisfies the
//! whole inner filter (an `EXISTS` over one e-mail or membership row).
//!
//! # Not covered
//!
//! Bulk, sorting (`sortBy` is ignored; `sort` is announced unsupported), `/Me`, password
//! changes, nested groups, the read-only `groups` attribute of users, and `POST /.search`
//! (its body's `filter`, `startIndex`, `count`, `attributes` go through the same functions).
//! Everything that needs state or I/O — authentication, organization scoping, uniqueness
//! (`409 uniqueness`), whether member ids exist, body size (413) and content types (415) —
//! is the surface's and the service's.

pub mod discovery;
pub mod error;
pub mod filter;
mod group;
pub mod list;
pub mod meta;
mod multi;
pub mod patch;
pub mod path;
pub mod projection;
mod resource;
pub mod schema;
mod user;
mod value;

pub use error::{ScimError, ScimType};
pub use group::{Group, MAX_MEMBERS_PER_WRITE, Member, MembershipChanges};
pub use list::{ListResponse, Page};
pub use meta::ResourceMeta;
pub use multi::MAX_SCANNED_VALUES;
pub use patch::{PatchOpKind, PatchOperation, PatchRequest};
pub use path::PatchPath;
pub use projection::Projection;
pub use schema::ResourceType;
pub use user::{Email, MAX_EMAILS, Manager, Name, StartDate, User};
pub use value::MAX_STRING_LENGTH;

/// The core User schema URN.
pub const CORE_USER_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:User";
/// The core Group schema URN.
pub const CORE_GROUP_SCHEMA: &str = "urn:ietf:params:scim:schemas:core:2.0:Group";
/// The enterprise User extension URN.
pub const ENTERPRISE_USER_SCHEMA: &str =
    "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User";
/// Flow's User extension URN, which holds the start date.
pub const FLOW_USER_SCHEMA: &str = "urn:ietf:params:scim:schemas:extension:flow:2.0:User";
/// The error message URN.
pub const ERROR_SCHEMA: &str = "urn:ietf:params:scim:api:messages:2.0:Error";
/// The PATCH request message URN.
pub const PATCH_OP_SCHEMA: &str = "urn:ietf:params:scim:api:messages:2.0:PatchOp";
/// The list response message URN.
pub const LIST_RESPONSE_SCHEMA: &str = "urn:ietf:params:scim:api:messages:2.0:ListResponse";
