//! What the service provider sets on every resource (RFC 7643 §3.1): `id` and `meta` with
//! `resourceType`, `created`, `lastModified`, `location` and `version` as a weak ETag; and the
//! `If-Match` / `If-None-Match` comparisons that version allows (RFC 7644 §3.14).

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use crate::schema::ResourceType;

/// Where the SCIM service lives under the service's base URL.
pub const SCIM_PREFIX: &str = "/scim/v2";

/// The service provider's side of a resource: its id, timestamps and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceMeta {
    /// The resource's id (`usr_…` for users).
    pub id: String,
    /// When it was created.
    pub created: DateTime<Utc>,
    /// When it last changed.
    pub last_modified: DateTime<Utc>,
    /// An opaque version that changes with every change, e.g. a counter or a hash; rendered
    /// as the weak ETag `W/"<version>"`. `None` leaves `meta.version` out.
    pub version: Option<String>,
}

impl ResourceMeta {
    /// The meta of a resource whose version is its `lastModified` in microseconds: it changes
    /// with every change the service records, so ETags need no column of their own.
    pub fn new(
        id: impl Into<String>,
        created: DateTime<Utc>,
        last_modified: DateTime<Utc>,
    ) -> Self {
        Self {
            id: id.into(),
            created,
            last_modified,
            version: Some(last_modified.timestamp_micros().to_string()),
        }
    }

    /// The `meta` object of a resource of `resource` type served under `base_url`.
    pub fn to_json(&self, resource: ResourceType, base_url: &str) -> Value {
        let mut meta = json!({
            "resourceType": resource.name(),
            "created": timestamp(self.created),
            "lastModified": timestamp(self.last_modified),
            "location": location(base_url, resource, &self.id),
        });
        if let Some(version) = &self.version {
            meta["version"] = Value::String(etag(version));
        }
        meta
    }
}

/// Formats a timestamp as the service does everywhere: RFC 3339, UTC, `Z`, milliseconds.
pub fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The SCIM root for the service's public `base_url`: `{base_url}/scim/v2`.
pub fn scim_root(base_url: &str) -> String {
    format!("{}{SCIM_PREFIX}", base_url.trim_end_matches('/'))
}

/// A resource's URI: `{base_url}/scim/v2/Users/{id}`.
pub fn location(base_url: &str, resource: ResourceType, id: &str) -> String {
    format!("{}{}/{id}", scim_root(base_url), resource.endpoint())
}

/// The weak ETag of a version: `W/"<version>"` (quotes and backslashes dropped from the
/// version, which must be opaque).
pub fn etag(version: &str) -> String {
    let opaque: String = version
        .chars()
        .filter(|character| *character != '"' && *character != '\\')
        .collect();
    format!("W/\"{opaque}\"")
}

/// Whether an `If-Match` header allows a change to the resource at `version`: `*` or a list
/// naming its ETag. Tags compare by their opaque part, weak or not, as SCIM versions are weak.
pub fn if_match(header: &str, version: &str) -> bool {
    header_names(header, version)
}

/// Whether an `If-None-Match` header asks for the resource at `version` (false: answer 304
/// for a GET, 412 for a change).
pub fn if_none_match(header: &str, version: &str) -> bool {
    !header_names(header, version)
}

fn header_names(header: &str, version: &str) -> bool {
    let wanted = etag(version);
    let opaque = |tag: &str| {
        let tag = tag.trim();
        let tag = tag.strip_prefix("W/").unwrap_or(tag);
        tag.trim_matches('"').to_owned()
    };
    header
        .split(',')
        .any(|tag| tag.trim() == "*" || opaque(tag) == opaque(&wanted))
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn meta_has_location_timestamps_and_weak_etag() {
        let meta = ResourceMeta {
            id: "usr_1".into(),
            created: Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap(),
            last_modified: Utc.with_ymd_and_hms(2026, 2, 3, 4, 5, 6).unwrap(),
            version: Some("7".into()),
        };
        assert_eq!(
            meta.to_json(ResourceType::User, "https://flow.example.com/"),
            json!({
                "resourceType": "User",
                "created": "2026-01-02T03:04:05.000Z",
                "lastModified": "2026-02-03T04:05:06.000Z",
                "location": "https://flow.example.com/scim/v2/Users/usr_1",
                "version": "W/\"7\""
            })
        );
        let meta = ResourceMeta {
            version: None,
            ..meta
        };
        assert!(
            meta.to_json(ResourceType::Group, "http://x")
                .get("version")
                .is_none()
        );
        assert_eq!(
            location("http://x", ResourceType::Group, "grp_1"),
            "http://x/scim/v2/Groups/grp_1"
        );
    }

    #[test]
    fn the_default_version_is_last_modified_in_microseconds() {
        let at =
            Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap() + chrono::Duration::microseconds(6);
        let meta = ResourceMeta::new("usr_1", at, at);
        assert_eq!(meta.version.as_deref(), Some("1767323045000006"));
        assert_eq!(
            meta.to_json(ResourceType::User, "http://x")["version"],
            json!("W/\"1767323045000006\"")
        );
    }

    #[test]
    fn etags_compare_by_opaque_part() {
        assert_eq!(etag("a\"b"), "W/\"ab\"");
        assert!(if_match("W/\"7\"", "7"));
        assert!(if_match("\"7\"", "7"));
        assert!(if_match("W/\"6\", W/\"7\"", "7"));
        assert!(if_match("*", "7"));
        assert!(!if_match("W/\"6\"", "7"));
        assert!(if_none_match("W/\"6\"", "7"));
        assert!(!if_none_match("W/\"7\"", "7"));
    }
}
