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
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(transparent))]
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
    /// An enrollment rule: a condition on users that assigns a flow to those it matches.
    EnrollmentRuleId, "enr"
);
define_id!(
    /// An event trigger: which inbound events assign or cancel a flow (docs/events.md).
    EventTriggerId, "etr"
);
define_id!(
    /// A signed event source: a sender without an API key posting to
    /// `/v1/events/inbound/{id}` (docs/events.md).
    EventSourceId, "evs"
);
define_id!(
    /// A backfill of an enrollment rule: a background job assigning everyone it matches.
    BackfillId, "bkf"
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
define_id!(
    /// A dashboard account (a person who signs in to the dashboard).
    AccountId, "acc"
);
define_id!(
    /// A group of users, as an identity provider pushes it (SCIM).
    GroupId, "grp"
);

/// A UUIDv8 whose bits are the SHA-256 of `domain` and `parts`: the same inputs always give the
/// same id, and it cannot collide with a generated UUIDv7.
fn derived_uuid(domain: &[u8], parts: &[&[u8]]) -> Uuid {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(domain);
    hasher.update([0u8]);
    for part in parts {
        hasher.update(part);
    }
    let digest = hasher.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    Uuid::new_v8(bytes)
}

impl AssignmentId {
    /// The id an idempotent request gets: derived from the organization and the caller's
    /// `X-Request-ID`, so a retry (to any API replica) yields the same id without coordination.
    pub fn for_request(org: OrgId, request_id: &str) -> Self {
        Self(derived_uuid(
            b"flow.assign.request",
            &[org.0.as_bytes(), request_id.as_bytes()],
        ))
    }

    /// The id of occurrence `occurrence` of a schedule: the same each time the scheduler tries
    /// it, so a retry after a crash cannot create a second assignment.
    pub fn for_schedule(schedule: ScheduleId, occurrence: i32) -> Self {
        Self(derived_uuid(
            b"flow.schedule.occurrence",
            &[schedule.0.as_bytes(), &occurrence.to_le_bytes()],
        ))
    }

    /// The id of the renewal assignment of the completion `renewed` (design §16): the same on
    /// every scheduler and retry, so a completion is renewed at most once.
    pub fn for_renewal(renewed: AssignmentId) -> Self {
        Self(derived_uuid(b"flow.renewal", &[renewed.0.as_bytes()]))
    }

    /// The id of the assignment an enrollment rule makes for a user at a generation of their
    /// match (1 at the first match; more only for a rule that re-assigns on a re-match): the same
    /// on every replica and retry, so a (rule, user, generation) assigns at most once.
    pub fn for_enrollment(rule: EnrollmentRuleId, user: UserId, generation: i32) -> Self {
        Self(derived_uuid(
            b"flow.enrollment.match",
            &[
                rule.0.as_bytes(),
                user.0.as_bytes(),
                &generation.to_le_bytes(),
            ],
        ))
    }
}

/// A UUIDv8 derived from `domain` and `parts`, each part length-prefixed: parts are free text
/// (an event's source and id), so "ab"+"c" and "a"+"bc" must not derive the same id.
fn derived_uuid_of_texts(domain: &[u8], parts: &[&[u8]]) -> Uuid {
    let mut framed: Vec<u8> = Vec::new();
    for part in parts {
        framed.extend_from_slice(&(part.len() as u64).to_le_bytes());
        framed.extend_from_slice(part);
    }
    derived_uuid(domain, &[&framed])
}

/// What identifies an inbound event's action (docs/events.md): the organization, the event's
/// (`source`, `id`) and the trigger that matched it. Every id an event's action uses is derived
/// from it, so a re-sent event, a retry or a concurrent duplicate names the same assignment
/// and the same cancellation, which apply once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventActionKey(pub Uuid);

impl EventActionKey {
    /// The key of the action of `trigger` on the event (`source`, `id`) of `org`.
    pub fn new(org: OrgId, source: &str, id: &str, trigger: EventTriggerId) -> Self {
        Self(derived_uuid_of_texts(
            b"flow.event.action",
            &[
                org.0.as_bytes(),
                source.as_bytes(),
                id.as_bytes(),
                trigger.0.as_bytes(),
            ],
        ))
    }
}

impl AssignmentId {
    /// The id of the assignment an event trigger's `assign` action makes for an event: the same
    /// on every replica and retry, so an event assigns at most once per trigger.
    pub fn for_event(key: EventActionKey) -> Self {
        Self(derived_uuid(b"flow.event.assign", &[key.0.as_bytes()]))
    }
}

/// Why the service itself cancels an assignment (issue 37): the id of that cancellation's change
/// is derived from the cause and the assignment ([`AssignmentId::automatic_cancel_id`]), so a
/// retried request or a second evaluation queues the same change, which applies once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutomaticCancel {
    /// The assignee was deactivated, and the organization cancels on deactivation.
    Deactivated,
    /// The assignee no longer matches the enrollment rule that made the assignment.
    Unmatched(EnrollmentRuleId),
    /// An inbound event matched a trigger whose action is `cancel`.
    Event(EventActionKey),
}

impl AssignmentId {
    /// The id of the change that cancels this assignment for `cause`: the same every time.
    pub fn automatic_cancel_id(self, cause: AutomaticCancel) -> Uuid {
        match cause {
            AutomaticCancel::Deactivated => {
                derived_uuid(b"flow.cancel.deactivated", &[self.0.as_bytes()])
            }
            AutomaticCancel::Unmatched(rule) => derived_uuid(
                b"flow.cancel.unmatched",
                &[rule.0.as_bytes(), self.0.as_bytes()],
            ),
            AutomaticCancel::Event(key) => {
                derived_uuid(b"flow.cancel.event", &[key.0.as_bytes(), self.0.as_bytes()])
            }
        }
    }
}

impl EventId {
    /// The id of the event of type `event_type` about an assignment assigned at `assigned_at`.
    /// Each transition happens at most once per assignment, so deriving the id from both makes a
    /// second write of the same event (a redelivered command, a duplicate in a batch, a retried
    /// scan) collide with the first on the outbox's unique key instead of emitting a second event.
    /// An assignment made by a schedule occurrence has an id derived from that occurrence, so its
    /// events are too.
    ///
    /// Like a UUIDv7, the id starts with a time in milliseconds — the assignment's, which never
    /// changes — and the rest is derived: the events of recent assignments are written at the end
    /// of the outbox's and the deliveries' unique indexes, not on random pages of them. Wholly
    /// hashed ids made every insert read cold index pages once the indexes outgrew memory: 20 µs
    /// an outbox row against 5 µs time-ordered, measured on a million kept events.
    pub fn for_transition(
        assignment: AssignmentId,
        event_type: &str,
        assigned_at: chrono::DateTime<chrono::Utc>,
    ) -> Self {
        let derived = derived_uuid(
            b"flow.event",
            &[assignment.0.as_bytes(), event_type.as_bytes()],
        );
        let millis = u64::try_from(assigned_at.timestamp_millis())
            .unwrap_or(0)
            .min((1 << 48) - 1);
        let mut bytes = *derived.as_bytes();
        bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
        Self(Uuid::new_v8(bytes))
    }
}

/// Mints the assignment ids the API hands out for requests without an `X-Request-ID`, and
/// recognises them later. Such an id is answered before the worker persists it; reading it in
/// between must say "accepted, not persisted yet" rather than "not found", without the API having
/// written anything. So the id carries a MAC: a UUIDv7 (time, then 50 random bits) whose last 24
/// bits are an HMAC-SHA256 of the organization and the rest of the id under a key every replica
/// shares (kept in Postgres). A random string passes the check once in 16 million tries, and then
/// only reads as "accepted".
#[derive(Clone)]
pub struct AssignmentIdSigner {
    key: [u8; 32],
}

impl fmt::Debug for AssignmentIdSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AssignmentIdSigner(..)")
    }
}

impl AssignmentIdSigner {
    /// Length of the MAC at the end of a minted id, in bytes.
    const MAC_BYTES: usize = 3;

    /// A signer with `key` (32 bytes shared by every API replica).
    pub fn new(key: [u8; 32]) -> Self {
        Self { key }
    }

    /// A new id for an assignment of `org`, minted at `now`.
    pub fn mint(&self, org: OrgId, now: chrono::DateTime<chrono::Utc>) -> AssignmentId {
        let mut bytes: [u8; 16] = rand::random();
        let millis = u64::try_from(now.timestamp_millis()).unwrap_or(0);
        bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
        bytes[6] = 0x70 | (bytes[6] & 0x0f);
        bytes[8] = 0x80 | (bytes[8] & 0x3f);
        let mac = self.mac(org, &bytes[..16 - Self::MAC_BYTES]);
        bytes[16 - Self::MAC_BYTES..].copy_from_slice(&mac);
        AssignmentId(Uuid::from_bytes(bytes))
    }

    /// True when `id` was minted by [`AssignmentIdSigner::mint`] for `org` under this key.
    pub fn minted(&self, org: OrgId, id: AssignmentId) -> bool {
        let bytes = id.0.as_bytes();
        if id.0.get_version_num() != 7 {
            return false;
        }
        let mac = self.mac(org, &bytes[..16 - Self::MAC_BYTES]);
        // Not secret: a forged id only reads as "accepted" within the forger's own organization.
        mac == bytes[16 - Self::MAC_BYTES..]
    }

    fn mac(&self, org: OrgId, body: &[u8]) -> [u8; Self::MAC_BYTES] {
        use hmac::{Hmac, KeyInit, Mac};
        let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC takes keys of any length");
        mac.update(b"flow.assignment-id\0");
        mac.update(org.0.as_bytes());
        mac.update(body);
        let digest = mac.finalize().into_bytes();
        let mut out = [0u8; Self::MAC_BYTES];
        out.copy_from_slice(&digest[..Self::MAC_BYTES]);
        out
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

    #[test]
    fn event_ids_are_one_per_assignment_and_type_and_ordered_by_assignment_time() {
        let at = chrono::Utc::now();
        let assignment = AssignmentId::new();
        let assigned = EventId::for_transition(assignment, "flow.assigned", at);
        assert_eq!(
            assigned,
            EventId::for_transition(assignment, "flow.assigned", at)
        );
        assert_ne!(
            assigned,
            EventId::for_transition(assignment, "flow.started", at)
        );
        assert_ne!(
            assigned,
            EventId::for_transition(AssignmentId::new(), "flow.assigned", at)
        );
        assert_eq!(assigned.0.get_version_num(), 8);
        // Ordered by the assignment's time first, whatever the assignment id (derived ids
        // included): a later assignment's event sorts after.
        let later = at + chrono::Duration::milliseconds(1);
        for _ in 0..100 {
            let request = AssignmentId::for_request(OrgId::new(), "r");
            assert!(EventId::for_transition(request, "flow.assigned", later).0 > assigned.0);
        }
        let millis = u64::try_from(at.timestamp_millis()).unwrap();
        assert_eq!(&assigned.0.as_bytes()[..6], &millis.to_be_bytes()[2..]);
    }

    #[test]
    fn minted_ids_are_recognised_only_for_their_organization_and_key() {
        let org = OrgId::new();
        let signer = AssignmentIdSigner::new([7; 32]);
        let now = chrono::Utc::now();
        let id = signer.mint(org, now);
        assert_eq!(id.0.get_version_num(), 7);
        assert_eq!(id.0.get_variant(), uuid::Variant::RFC4122);
        assert!(signer.minted(org, id));
        assert!(!signer.minted(OrgId::new(), id));
        assert!(!AssignmentIdSigner::new([8; 32]).minted(org, id));
        assert!(!signer.minted(org, AssignmentId::new()));
        assert!(!signer.minted(org, AssignmentId::for_request(org, "r")));
        // Time-ordered like any UUIDv7, and distinct.
        let later = signer.mint(org, now + chrono::Duration::milliseconds(1));
        assert!(later.0 > id.0);
        assert_ne!(signer.mint(org, now), signer.mint(org, now));
    }
}
