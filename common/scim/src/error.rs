//! SCIM errors (RFC 7644 §3.12): an HTTP status, a `scimType` where the RFC defines one for
//! the case, and a human-readable `detail`, serialized in the error schema
//! `urn:ietf:params:scim:api:messages:2.0:Error` with `status` as a string.

use std::fmt;

use serde::Serialize;
use serde::ser::{SerializeStruct, Serializer};

use crate::ERROR_SCHEMA;

/// The `scimType` values of RFC 7644 §3.12, each with the HTTP status it goes with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScimType {
    /// The filter syntax is invalid, or the attribute and comparison are not supported (400).
    InvalidFilter,
    /// The filter yields more results than the service provider will process (400).
    TooMany,
    /// One or more of the attribute values are already in use or reserved (409).
    Uniqueness,
    /// The change is not compatible with the target attribute's mutability (400).
    Mutability,
    /// The request body is not valid or does not follow the request schema (400).
    InvalidSyntax,
    /// The PATCH `path` is invalid or malformed (400).
    InvalidPath,
    /// The PATCH `path` did not yield an attribute or value that could be operated on (400).
    NoTarget,
    /// A required value is missing, or a value is not compatible with the attribute (400).
    InvalidValue,
    /// The protocol version is not supported (400).
    InvalidVers,
    /// The request cannot be completed because of sensitive information in the URI (403).
    Sensitive,
}

impl ScimType {
    /// Every `scimType`, in the RFC's order.
    pub const ALL: [ScimType; 10] = [
        ScimType::InvalidFilter,
        ScimType::TooMany,
        ScimType::Uniqueness,
        ScimType::Mutability,
        ScimType::InvalidSyntax,
        ScimType::InvalidPath,
        ScimType::NoTarget,
        ScimType::InvalidValue,
        ScimType::InvalidVers,
        ScimType::Sensitive,
    ];

    /// The keyword as it appears on the wire (`invalidFilter`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ScimType::InvalidFilter => "invalidFilter",
            ScimType::TooMany => "tooMany",
            ScimType::Uniqueness => "uniqueness",
            ScimType::Mutability => "mutability",
            ScimType::InvalidSyntax => "invalidSyntax",
            ScimType::InvalidPath => "invalidPath",
            ScimType::NoTarget => "noTarget",
            ScimType::InvalidValue => "invalidValue",
            ScimType::InvalidVers => "invalidVers",
            ScimType::Sensitive => "sensitive",
        }
    }

    /// The HTTP status RFC 7644 §3.12 gives this `scimType`.
    pub fn status(self) -> u16 {
        match self {
            ScimType::Uniqueness => 409,
            ScimType::Sensitive => 403,
            _ => 400,
        }
    }
}

impl fmt::Display for ScimType {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// A SCIM error response: the HTTP status, the `scimType` when the RFC defines one for the
/// case, and a detail worded for the identity provider's administrator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}{}: {detail}", scim_type.map(|kind| format!(" {kind}")).unwrap_or_default())]
pub struct ScimError {
    status: u16,
    scim_type: Option<ScimType>,
    detail: String,
}

impl ScimError {
    /// An error of the given `scimType`, with the status the RFC gives it.
    pub fn new(scim_type: ScimType, detail: impl Into<String>) -> Self {
        Self {
            status: scim_type.status(),
            scim_type: Some(scim_type),
            detail: detail.into(),
        }
    }

    /// An error that has no `scimType` (404, 401, 412, 413, 500, …).
    pub fn with_status(status: u16, detail: impl Into<String>) -> Self {
        Self {
            status,
            scim_type: None,
            detail: detail.into(),
        }
    }

    /// 400 `invalidFilter`.
    pub fn invalid_filter(detail: impl Into<String>) -> Self {
        Self::new(ScimType::InvalidFilter, detail)
    }

    /// 400 `tooMany`.
    pub fn too_many(detail: impl Into<String>) -> Self {
        Self::new(ScimType::TooMany, detail)
    }

    /// 409 `uniqueness`: e.g. a `userName` already taken in the organization.
    pub fn uniqueness(detail: impl Into<String>) -> Self {
        Self::new(ScimType::Uniqueness, detail)
    }

    /// 400 `mutability`: e.g. a PATCH of `id` or `meta`.
    pub fn mutability(detail: impl Into<String>) -> Self {
        Self::new(ScimType::Mutability, detail)
    }

    /// 400 `invalidSyntax`: the body is not the message the endpoint expects.
    pub fn invalid_syntax(detail: impl Into<String>) -> Self {
        Self::new(ScimType::InvalidSyntax, detail)
    }

    /// 400 `invalidPath`.
    pub fn invalid_path(detail: impl Into<String>) -> Self {
        Self::new(ScimType::InvalidPath, detail)
    }

    /// 400 `noTarget`.
    pub fn no_target(detail: impl Into<String>) -> Self {
        Self::new(ScimType::NoTarget, detail)
    }

    /// 400 `invalidValue`: a required value is missing or a value has the wrong type.
    pub fn invalid_value(detail: impl Into<String>) -> Self {
        Self::new(ScimType::InvalidValue, detail)
    }

    /// 400 `invalidVers`.
    pub fn invalid_vers(detail: impl Into<String>) -> Self {
        Self::new(ScimType::InvalidVers, detail)
    }

    /// 403 `sensitive`.
    pub fn sensitive(detail: impl Into<String>) -> Self {
        Self::new(ScimType::Sensitive, detail)
    }

    /// 400 without a `scimType`, for a bad query parameter the RFC has no keyword for.
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::with_status(400, detail)
    }

    /// 401: no or an unknown bearer token.
    pub fn unauthorized(detail: impl Into<String>) -> Self {
        Self::with_status(401, detail)
    }

    /// 403: the token may not use this endpoint.
    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::with_status(403, detail)
    }

    /// 404: the resource does not exist (or belongs to another organization).
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::with_status(404, detail)
    }

    /// 405: e.g. `/Bulk`, which the service provider does not support.
    pub fn method_not_allowed(detail: impl Into<String>) -> Self {
        Self::with_status(405, detail)
    }

    /// 409 without a `scimType`: the change conflicts with the resource's state.
    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::with_status(409, detail)
    }

    /// 412: `If-Match` names a version that is not the current one.
    pub fn precondition_failed(detail: impl Into<String>) -> Self {
        Self::with_status(412, detail)
    }

    /// 413: the body, or the number of PATCH operations, is over the limit.
    pub fn payload_too_large(detail: impl Into<String>) -> Self {
        Self::with_status(413, detail)
    }

    /// 415: the body is not `application/scim+json` or `application/json`.
    pub fn unsupported_media_type(detail: impl Into<String>) -> Self {
        Self::with_status(415, detail)
    }

    /// 429: over the organization's rate limit.
    pub fn too_many_requests(detail: impl Into<String>) -> Self {
        Self::with_status(429, detail)
    }

    /// 500, with a detail that leaks nothing.
    pub fn internal() -> Self {
        Self::with_status(500, "internal error")
    }

    /// 503: a dependency is unavailable; the identity provider retries.
    pub fn service_unavailable(detail: impl Into<String>) -> Self {
        Self::with_status(503, detail)
    }

    /// The HTTP status of the response.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The `scimType`, when the RFC defines one for the case.
    pub fn scim_type(&self) -> Option<ScimType> {
        self.scim_type
    }

    /// The detail text.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The same error with its detail prefixed by where it happened (`Operations[2]: …`).
    pub(crate) fn prefixed(mut self, prefix: &str) -> Self {
        self.detail = format!("{prefix}: {}", self.detail);
        self
    }

    /// The error body as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let mut body = serde_json::json!({
            "schemas": [ERROR_SCHEMA],
            "status": self.status.to_string(),
            "detail": self.detail,
        });
        if let Some(scim_type) = self.scim_type {
            body["scimType"] = serde_json::Value::from(scim_type.as_str());
        }
        body
    }
}

impl Serialize for ScimError {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let fields = if self.scim_type.is_some() { 4 } else { 3 };
        let mut body = serializer.serialize_struct("ScimError", fields)?;
        body.serialize_field("schemas", &[ERROR_SCHEMA])?;
        body.serialize_field("status", &self.status.to_string())?;
        if let Some(scim_type) = self.scim_type {
            body.serialize_field("scimType", scim_type.as_str())?;
        }
        body.serialize_field("detail", &self.detail)?;
        body.end()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn error_body_has_the_error_schema_and_the_status_as_a_string() {
        let error = ScimError::invalid_filter("unknown attribute 'nickName'");
        assert_eq!(error.status(), 400);
        assert_eq!(
            error.to_json(),
            json!({
                "schemas": ["urn:ietf:params:scim:api:messages:2.0:Error"],
                "status": "400",
                "scimType": "invalidFilter",
                "detail": "unknown attribute 'nickName'"
            })
        );
    }

    #[test]
    fn serde_and_to_json_agree() {
        for error in [
            ScimError::no_target("remove needs a path"),
            ScimError::precondition_failed("version W/\"3\" is not current"),
        ] {
            assert_eq!(serde_json::to_value(&error).unwrap(), error.to_json());
        }
    }

    #[test]
    fn errors_without_a_scim_type_leave_it_out() {
        let error = ScimError::not_found("User usr_x not found");
        assert_eq!(
            error.to_json(),
            json!({
                "schemas": ["urn:ietf:params:scim:api:messages:2.0:Error"],
                "status": "404",
                "detail": "User usr_x not found"
            })
        );
        assert_eq!(error.to_string(), "404: User usr_x not found");
    }

    #[test]
    fn each_scim_type_has_the_rfc_keyword_and_status() {
        let keywords: Vec<(&str, u16)> = ScimType::ALL
            .iter()
            .map(|kind| (kind.as_str(), kind.status()))
            .collect();
        assert_eq!(
            keywords,
            vec![
                ("invalidFilter", 400),
                ("tooMany", 400),
                ("uniqueness", 409),
                ("mutability", 400),
                ("invalidSyntax", 400),
                ("invalidPath", 400),
                ("noTarget", 400),
                ("invalidValue", 400),
                ("invalidVers", 400),
                ("sensitive", 403),
            ]
        );
        assert_eq!(ScimError::uniqueness("taken").status(), 409);
        assert_eq!(
            ScimError::mutability("id is read-only").to_string(),
            "400 mutability: id is read-only"
        );
    }
}
