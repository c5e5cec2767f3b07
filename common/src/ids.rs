//! Identifiers: a type prefix over a UUIDv7 (`asg_0193...`). The prefix makes ids self-describing
//! and lets a malformed or wrong-type id be treated exactly like one that does not exist.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

/// Declares a typed id: a `Uuid` newtype that prints and parses with its prefix and is stored in
/// Postgres as a plain `uuid`.
macro_rules! define_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, sqlx::Type)]
        #[sqlx(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// The textual prefix, without the underscore.
            pub const PREFIX: &'static str = $prefix;

            /// A new time-ordered id.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }

            /// Parses `prefix_hex`; `None` for anything else, including another type's id.
            pub fn parse(text: &str) -> Option<Self> {
                let rest = text.strip_prefix($prefix)?.strip_prefix('_')?;
                if rest.len() != 32 {
                    return None;
                }
                Uuid::try_parse(rest).ok().map(Self)
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}_{}", $prefix, self.0.simple())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(self, f)
            }
        }

        impl FromStr for $name {
            type Err = InvalidId;
            fn from_str(text: &str) -> Result<Self, InvalidId> {
                Self::parse(text).ok_or(InvalidId)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                Self::parse(&text).ok_or_else(|| {
                    serde::de::Error::custom(format!("not a valid {} id", $prefix))
                })
            }
        }

        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .examples([serde_json::json!(concat!($prefix, "_0193a1b2c3d47e8f9a0b1c2d3e4f5a6b"))])
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {}
    };
}

/// A string that is not an id of the expected type.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("invalid identifier")]
pub struct InvalidId;

define_id!(
    /// An organization (tenant).
    OrgId, "org"
);
define_id!(
    /// A user of an organization (an assignee).
    UserId, "usr"
);
define_id!(
    /// A flow: an ordered set of modules.
    FlowId, "flow"
);
define_id!(
    /// A module of a flow.
    ModuleId, "mod"
);
define_id!(
    /// An assignment of a flow to a user.
    AssignmentId, "asg"
);
define_id!(
    /// A recurring schedule.
    ScheduleId, "sch"
);
define_id!(
    /// An export file.
    ExportId, "exp"
);
define_id!(
    /// A webhook endpoint.
    WebhookEndpointId, "whe"
);
define_id!(
    /// A lifecycle event.
    EventId, "evt"
);
define_id!(
    /// An API key (not the secret: its record).
    KeyId, "key"
);
define_id!(
    /// The delivery of one event to one webhook endpoint.
    DeliveryId, "dlv"
);

impl AssignmentId {
    /// The id an idempotent request gets: derived from the organization and the caller's
    /// `X-Request-ID`, so a retry (to any API replica) yields the same id without coordination.
    /// A UUIDv8 whose bits come from SHA-256, so it cannot collide with generated UUIDv7 ids.
    pub fn for_request(org: OrgId, request_id: &str) -> Self {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        hasher.update(b"flow.assign.request\0");
        hasher.update(org.0.as_bytes());
        hasher.update(request_id.as_bytes());
        let digest = hasher.finalize();
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest[..16]);
        Self(Uuid::new_v8(bytes))
    }

    /// The id of occurrence `occurrence` of a schedule: the same each time the scheduler tries
    /// it, so a retry after a crash cannot create a second assignment.
    pub fn for_schedule(schedule: ScheduleId, occurrence: i32) -> Self {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        hasher.update(b"flow.schedule.occurrence\0");
        hasher.update(schedule.0.as_bytes());
        hasher.update(occurrence.to_le_bytes());
        let digest = hasher.finalize();
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest[..16]);
        Self(Uuid::new_v8(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_with_their_prefix_only() {
        let id = AssignmentId::new();
        let text = id.to_string();
        assert!(text.starts_with("asg_"));
        assert_eq!(text.len(), 4 + 32);
        assert_eq!(AssignmentId::parse(&text), Some(id));
        assert_eq!(FlowId::parse(&text), None);
        assert_eq!(AssignmentId::parse("asg_"), None);
        assert_eq!(AssignmentId::parse("asg_zz"), None);
        assert_eq!(AssignmentId::parse(&text.replace("asg_", "asg-")), None);
    }

    #[test]
    fn request_ids_derive_stable_distinct_assignment_ids() {
        let org = OrgId::new();
        let first = AssignmentId::for_request(org, "req-1");
        assert_eq!(first, AssignmentId::for_request(org, "req-1"));
        assert_ne!(first, AssignmentId::for_request(org, "req-2"));
        assert_ne!(first, AssignmentId::for_request(OrgId::new(), "req-1"));
        assert_eq!(first.0.get_version_num(), 8);
    }
}
