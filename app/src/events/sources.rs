//! Signed event sources (issue 38, docs/events.md "Signed sources"): senders that cannot hold an
//! API key post to `/v1/events/inbound/{sourceId}`, authenticated by the source's secret, and
//! their deliveries become events that go the way of `POST /v1/events` ([`super::ingest`]:
//! deduplication, triggers, the write budget).
//!
//! Two kinds. `standard_webhooks`: one JSON body per delivery, signed with the Standard Webhooks
//! scheme (`webhook-id`, `webhook-timestamp`, `webhook-signature`) under the source's secret;
//! one event, whose id is the `webhook-id` and whose type is read at a pointer into the body (or
//! fixed). `okta`: Okta event hooks, which send the secret itself as their `Authorization`
//! header; one event per item of `data.events`, id its `uuid`, type its `eventType`.
//!
//! Every refusal to authenticate (unknown source, another organization's, missing or wrong
//! signature, stale timestamp) is the same [`InboundError::Refused`], so a caller learns nothing
//! about which sources exist. Secrets are sealed at rest with the webhook vault, bound to the
//! source's id, shown once (on creation and rotation), and never logged.

use std::net::IpAddr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_common::db::audit::{self, Actor};
use flow_common::db::event_sources::{self as db, NewSource, SourceRecord};
use flow_common::db::orgs;
use flow_domain::audit::AuditAction;
use flow_domain::ids::EventSourceId;
use flow_domain::webhook::signing::{generate_secret, same_secret, verify};
use flow_domain::{Invalid, TextRule};
use serde_json::{Map, Value, json};

use super::cloudevent::{CloudEvent, InvalidEvent, MAX_ATTRIBUTE_CHARS, MAX_EVENTS, Received};
use super::triggers::parse_pointer;
use super::{Ingested, ingest};
use crate::{Acting, Caller, Context, ServiceError};

/// Most sources an organization may have.
pub const MAX_SOURCES: i64 = 50;

/// How far a Standard Webhooks delivery's `webhook-timestamp` may be from now, either way.
pub const TIMESTAMP_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// How long the secret before a rotation is still accepted beside the new one.
pub const ROTATION_OVERLAP: Duration = Duration::from_secs(24 * 3600);

/// Longest Okta verification challenge, in characters.
pub const MAX_CHALLENGE_CHARS: usize = 1_000;

/// The answer to every delivery that does not authenticate, whatever the reason.
pub const REFUSED: &str = "the delivery is not authenticated: unknown event source, or not \
    signed with its secret (Standard Webhooks: webhook-id, webhook-timestamp within 5 minutes \
    and webhook-signature; Okta: the secret as the Authorization header)";

/// What a source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Any JSON body signed with the Standard Webhooks scheme.
    StandardWebhooks,
    /// Okta event hooks (with their verification challenge).
    Okta,
}

impl Kind {
    /// Every kind, as the API lists them.
    pub const ALL: [Self; 2] = [Self::StandardWebhooks, Self::Okta];

    /// The name in the API and the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StandardWebhooks => "standard_webhooks",
            Self::Okta => "okta",
        }
    }

    /// The kind of a name.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
    }
}

/// Where a Standard Webhooks source's events get their `type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeFrom {
    /// The string at this JSON Pointer in the body.
    Pointer(String),
    /// Always this type.
    Fixed(String),
}

/// A source as a surface received it, before validation.
#[derive(Debug, Clone, Default)]
pub struct SourceInput {
    /// Name: one line, at most 200 characters. Required.
    pub name: Option<String>,
    /// `standard_webhooks` or `okta`. Required.
    pub kind: Option<String>,
    /// standard_webhooks: JSON Pointer to the event type in the body.
    pub type_pointer: Option<String>,
    /// standard_webhooks: a fixed event type (instead of the pointer).
    pub fixed_type: Option<String>,
    /// The CloudEvents `source` of its events; `flow:event-sources/<id>` when not given.
    pub source: Option<String>,
    /// okta: the header Okta sends the secret in (its "Authentication field"); `Authorization`
    /// when not given.
    pub auth_header: Option<String>,
}

/// A valid source to create.
#[derive(Debug, Clone)]
struct Checked {
    name: String,
    kind: Kind,
    type_from: Option<TypeFrom>,
    source: Option<String>,
    /// Lower-case; none for `authorization`.
    auth_header: Option<String>,
}

/// Most characters of an okta source's `authHeader`.
pub const MAX_AUTH_HEADER_CHARS: usize = 64;

/// Headers that mean something else to Flow, HTTP or the signing schemes: never a secret's.
const RESERVED_HEADERS: &[&str] = &[
    "content-type",
    "content-length",
    "content-encoding",
    "transfer-encoding",
    "connection",
    "host",
    "cookie",
    "x-okta-verification-challenge",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "x-request-id",
    "traceparent",
];

/// An okta source's `authHeader`, lower-case (none for `authorization`): an HTTP header name
/// (token characters) of at most [`MAX_AUTH_HEADER_CHARS`], not one of [`RESERVED_HEADERS`];
/// only okta sources take one.
fn auth_header(kind: Kind, header: Option<String>) -> Result<Option<String>, Invalid> {
    let Some(header) = header else {
        return Ok(None);
    };
    if kind != Kind::Okta {
        return Err(Invalid::new(
            "authHeader applies to okta sources only (a standard_webhooks delivery is \
             authenticated by its signature)",
        ));
    }
    let token = |character: char| {
        character.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(character)
    };
    if header.is_empty() || header.len() > MAX_AUTH_HEADER_CHARS || !header.chars().all(token) {
        return Err(Invalid(format!(
            "authHeader must be an HTTP header name (letters, digits and !#$%&'*+-.^_`|~, at most \
             {MAX_AUTH_HEADER_CHARS} characters), e.g. \"X-Flow-Secret\""
        )));
    }
    let header = header.to_ascii_lowercase();
    if RESERVED_HEADERS.contains(&header.as_str()) {
        return Err(Invalid(format!(
            "authHeader cannot be {header}: that header means something else to HTTP or Flow"
        )));
    }
    Ok((header != "authorization").then_some(header))
}

/// A one-line text field of at most [`MAX_ATTRIBUTE_CHARS`], non-empty when given.
fn attribute(field: &str, text: Option<String>) -> Result<Option<String>, Invalid> {
    let Some(text) = text else { return Ok(None) };
    let rule = TextRule {
        max_chars: MAX_ATTRIBUTE_CHARS,
        multiline: false,
    };
    let text = rule.parse(field, &text)?;
    if text.is_empty() {
        return Err(Invalid(format!("{field} must not be empty")));
    }
    Ok(Some(text))
}

fn check(input: SourceInput) -> Result<Checked, Invalid> {
    let name = TextRule::NAME.parse("name", input.name.as_deref().unwrap_or(""))?;
    if name.is_empty() {
        return Err(Invalid::new("name is required"));
    }
    let kinds = || {
        Kind::ALL
            .iter()
            .map(|kind| kind.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let kind = match input.kind.as_deref() {
        None => return Err(Invalid(format!("kind is required ({})", kinds()))),
        Some(text) => {
            Kind::parse(text).ok_or_else(|| Invalid(format!("kind must be one of: {}", kinds())))?
        }
    };
    let pointer = input
        .type_pointer
        .map(|pointer| parse_pointer("typePointer", &pointer))
        .transpose()?;
    let fixed = attribute("type", input.fixed_type)?;
    let type_from = match (kind, pointer, fixed) {
        (Kind::Okta, None, None) => None,
        (Kind::Okta, _, _) => {
            return Err(Invalid::new(
                "an okta source takes its types from Okta's eventType: leave typePointer and \
                 type out",
            ));
        }
        (Kind::StandardWebhooks, Some(pointer), None) => Some(TypeFrom::Pointer(pointer)),
        (Kind::StandardWebhooks, None, Some(fixed)) => Some(TypeFrom::Fixed(fixed)),
        (Kind::StandardWebhooks, _, _) => {
            return Err(Invalid::new(
                "a standard_webhooks source needs exactly one of typePointer (where the event \
                 type is in the body, e.g. \"/type\") and type (a fixed event type)",
            ));
        }
    };
    let source = attribute("source", input.source)?;
    let auth_header = auth_header(kind, input.auth_header)?;
    Ok(Checked {
        name,
        kind,
        type_from,
        source,
        auth_header,
    })
}

/// The CloudEvents `source` of a source's events when none is configured.
pub fn default_event_source(id: EventSourceId) -> String {
    format!("flow:event-sources/{id}")
}

/// A source with its secret, which is shown this once.
#[derive(Debug, Clone)]
pub struct WithSecret {
    /// The source.
    pub source: SourceRecord,
    /// The secret (`whsec_…`).
    pub secret: String,
}

/// The secret sealed for the source.
fn seal(ctx: &Context, id: EventSourceId, secret: &str) -> Result<String, ServiceError> {
    ctx.settings
        .webhook_secrets
        .seal_bound(&id.to_string(), secret)
        .map_err(|error| ServiceError::Internal(anyhow::anyhow!(error)))
}

/// Creates a source with a new secret. An organization has at most [`MAX_SOURCES`] (409), each
/// with its own CloudEvents `source` (409).
pub async fn create(
    ctx: &Context,
    acting: Acting<'_>,
    input: SourceInput,
) -> Result<WithSecret, ServiceError> {
    let checked = check(input)?;
    let id = EventSourceId::new();
    let secret = generate_secret();
    let sealed = seal(ctx, id, &secret)?;
    let event_source = checked
        .source
        .clone()
        .unwrap_or_else(|| default_event_source(id));
    let (type_pointer, fixed_type) = match &checked.type_from {
        Some(TypeFrom::Pointer(pointer)) => (Some(pointer.as_str()), None),
        Some(TypeFrom::Fixed(fixed)) => (None, Some(fixed.as_str())),
        None => (None, None),
    };
    let org_id = acting.org_id();
    let mut transaction = ctx.db.begin().await?;
    // One creation at a time per organization, so the cap holds under concurrent requests.
    sqlx::query("SELECT id FROM organizations WHERE id = $1 FOR UPDATE")
        .bind(org_id)
        .execute(&mut *transaction)
        .await?;
    if db::count(&mut *transaction, org_id).await? >= MAX_SOURCES {
        return Err(ServiceError::Conflict(format!(
            "an organization has at most {MAX_SOURCES} event sources; delete one first"
        )));
    }
    let new = NewSource {
        id,
        name: &checked.name,
        kind: checked.kind.as_str(),
        type_pointer,
        fixed_type,
        event_source: &event_source,
        auth_header: checked.auth_header.as_deref(),
        secret: &sealed,
    };
    let source = db::create(&mut *transaction, org_id, &new)
        .await?
        .ok_or_else(|| {
            ServiceError::Conflict(format!(
                "another event source of the organization has the source \"{event_source}\"; \
                 give each its own, so triggers can tell their events apart"
            ))
        })?;
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        AuditAction::EventSourceCreated,
        &id.to_string(),
        &source.name,
    )
    .await?;
    transaction.commit().await?;
    tracing::info!(event_source_id = %id, "event source created");
    Ok(WithSecret { source, secret })
}

/// A page of the organization's sources, after `after` when given.
pub async fn list(
    ctx: &Context,
    acting: Acting<'_>,
    after: Option<EventSourceId>,
    limit: i64,
) -> Result<Vec<SourceRecord>, ServiceError> {
    Ok(db::list(&ctx.db, acting.org_id(), after, limit).await?)
}

/// One source (without its secret).
pub async fn get(
    ctx: &Context,
    acting: Acting<'_>,
    id: EventSourceId,
) -> Result<SourceRecord, ServiceError> {
    db::get(&ctx.db, acting.org_id(), id)
        .await?
        .ok_or(ServiceError::NotFound("event source"))
}

/// Gives the source a new secret; the previous one is still accepted for [`ROTATION_OVERLAP`]
/// (a secret rotated out before that is no longer accepted).
pub async fn rotate_secret(
    ctx: &Context,
    acting: Acting<'_>,
    id: EventSourceId,
) -> Result<WithSecret, ServiceError> {
    let secret = generate_secret();
    let sealed = seal(ctx, id, &secret)?;
    let org_id = acting.org_id();
    let mut transaction = ctx.db.begin().await?;
    let source = db::rotate_secret(&mut *transaction, org_id, id, &sealed, ROTATION_OVERLAP)
        .await?
        .ok_or(ServiceError::NotFound("event source"))?;
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        AuditAction::EventSourceSecretRotated,
        &id.to_string(),
        &source.name,
    )
    .await?;
    transaction.commit().await?;
    tracing::info!(event_source_id = %id, "event source secret rotated");
    Ok(WithSecret { source, secret })
}

/// Deletes a source: its deliveries are refused from now on; the events it delivered and what
/// they made stay.
pub async fn delete(
    ctx: &Context,
    acting: Acting<'_>,
    id: EventSourceId,
) -> Result<(), ServiceError> {
    let org_id = acting.org_id();
    let mut transaction = ctx.db.begin().await?;
    let source = db::get(&mut *transaction, org_id, id)
        .await?
        .ok_or(ServiceError::NotFound("event source"))?;
    db::delete(&mut *transaction, org_id, id).await?;
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        AuditAction::EventSourceDeleted,
        &id.to_string(),
        &source.name,
    )
    .await?;
    transaction.commit().await?;
    Ok(())
}

/// The headers of an inbound delivery that authenticate it, as the surface read them.
#[derive(Clone, Default)]
pub struct DeliveryHeaders {
    /// Every header with a text value, its name lower-case (bounded by the server's header
    /// limits): the Standard Webhooks headers, or an okta source's secret in its `auth_header`
    /// (`authorization` by default).
    pub all: Vec<(String, String)>,
}

impl DeliveryHeaders {
    /// The value of the header `name` (lower-case), if the delivery has it.
    fn get(&self, name: &str) -> Option<&str> {
        self.all
            .iter()
            .find(|(header, _)| header == name)
            .map(|(_, value)| value.as_str())
    }

    /// `webhook-id` (Standard Webhooks).
    pub fn webhook_id(&self) -> Option<&str> {
        self.get("webhook-id")
    }

    /// `webhook-timestamp`: seconds since the epoch (Standard Webhooks).
    pub fn webhook_timestamp(&self) -> Option<&str> {
        self.get("webhook-timestamp")
    }

    /// `webhook-signature`: space-separated `v1,<base64>` (Standard Webhooks).
    pub fn webhook_signature(&self) -> Option<&str> {
        self.get("webhook-signature")
    }
}

impl std::fmt::Debug for DeliveryHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeliveryHeaders")
            .field("webhook_id", &self.webhook_id())
            .field("webhook_timestamp", &self.webhook_timestamp())
            .finish_non_exhaustive()
    }
}

/// Why an inbound delivery was not taken.
#[derive(Debug, thiserror::Error)]
pub enum InboundError {
    /// It did not authenticate (401, always [`REFUSED`]: the reason is only logged).
    #[error("the delivery is not authenticated")]
    Refused,
    /// It authenticated, and the operation failed as operations do (400, 413, 429, 503…).
    #[error(transparent)]
    Service(#[from] ServiceError),
}

impl From<Invalid> for InboundError {
    fn from(invalid: Invalid) -> Self {
        Self::Service(invalid.into())
    }
}

impl From<sqlx::Error> for InboundError {
    fn from(error: sqlx::Error) -> Self {
        Self::Service(error.into())
    }
}

/// A source that a delivery authenticated for, with its organization acting.
struct Authenticated {
    source: SourceRecord,
    kind: Kind,
    caller: Caller,
}

impl Authenticated {
    fn acting(&self) -> Acting<'_> {
        Acting {
            caller: &self.caller,
            actor: Actor::EventSource(self.source.id),
        }
    }
}

/// Refuses a delivery, logging why (never a secret or a signature).
fn refuse(source: &str, why: &str) -> InboundError {
    tracing::info!(event_source = source, why, "inbound delivery refused");
    InboundError::Refused
}

/// The source's secrets still accepted at `now`: the current one, and the one before the last
/// rotation within its overlap.
fn secrets(ctx: &Context, source: &SourceRecord, now: DateTime<Utc>) -> Vec<String> {
    let binding = source.id.to_string();
    let vault = &ctx.settings.webhook_secrets;
    let mut secrets = Vec::with_capacity(2);
    match vault.open_bound(&binding, &source.secret) {
        Ok(secret) => secrets.push(secret),
        Err(error) => tracing::error!(%error, event_source = %source.id, "event source secret"),
    }
    if let (Some(previous), Some(until)) =
        (&source.previous_secret, source.previous_secret_expires_at)
        && until > now
    {
        match vault.open_bound(&binding, previous) {
            Ok(secret) => secrets.push(secret),
            Err(error) => {
                tracing::error!(%error, event_source = %source.id, "event source previous secret");
            }
        }
    }
    secrets
}

/// Authenticates a delivery from `client` ([`authenticate_source`]), unless that address had too
/// many deliveries refused lately (429: [`crate::caches::REFUSED_DELIVERIES_PER_ADDRESS`] a
/// minute), counting it in when it is refused.
async fn authenticate(
    ctx: &Context,
    source_id: &str,
    kind: Option<Kind>,
    client: Option<IpAddr>,
    now: DateTime<Utc>,
    authentic: impl Fn(&SourceRecord, &Kind, &str) -> Result<(), &'static str>,
) -> Result<Authenticated, InboundError> {
    let window = ctx
        .caches
        .admit_delivery(client)
        .map_err(ServiceError::from)?;
    let authenticated = authenticate_source(ctx, source_id, kind, now, authentic).await;
    if let (Err(InboundError::Refused), Some(window)) = (&authenticated, window) {
        window.failed();
    }
    authenticated
}

/// Finds the source a delivery names and checks it is of `kind` and that `authentic` accepts
/// one of its secrets (else refuses, logging why `authentic` did not).
async fn authenticate_source(
    ctx: &Context,
    source_id: &str,
    kind: Option<Kind>,
    now: DateTime<Utc>,
    authentic: impl Fn(&SourceRecord, &Kind, &str) -> Result<(), &'static str>,
) -> Result<Authenticated, InboundError> {
    let Some(id) = EventSourceId::parse(source_id) else {
        return Err(refuse(source_id, "not a source id"));
    };
    let Some(source) = db::find(&ctx.db, id).await? else {
        return Err(refuse(source_id, "no such source"));
    };
    let Some(source_kind) = Kind::parse(&source.kind) else {
        return Err(ServiceError::Internal(anyhow::anyhow!(
            "event source {id} has an unreadable kind"
        ))
        .into());
    };
    if kind.is_some_and(|kind| kind != source_kind) {
        return Err(refuse(source_id, "not a source of this kind"));
    }
    let mut why = "no secret of the source could be opened";
    let mut accepted = false;
    for secret in secrets(ctx, &source, now) {
        match authentic(&source, &source_kind, &secret) {
            Ok(()) => {
                accepted = true;
                break;
            }
            Err(reason) => why = reason,
        }
    }
    if !accepted {
        return Err(refuse(source_id, why));
    }
    let org = orgs::get(&ctx.db, source.org_id)
        .await?
        .ok_or_else(|| refuse(source_id, "organization gone"))?;
    Ok(Authenticated {
        source,
        kind: source_kind,
        caller: Caller::without_key(org),
    })
}

/// What a delivery came to: the events' results (and the write budget), and whether the source
/// is an Okta one (Okta expects 200, Standard Webhooks senders any 2xx).
#[derive(Debug)]
pub struct Delivered {
    /// The results, as `POST /v1/events` answers them.
    pub ingested: Ingested,
    /// The source's kind.
    pub kind: Kind,
}

/// Takes a delivery to the source `source_id` from `client` at `now`: authenticates it by the
/// source's kind (401 [`InboundError::Refused`] and nothing recorded otherwise; 429 after too many
/// refusals from the address), turns its body into events and ingests them as `POST /v1/events`
/// does, acting for the source's organization.
pub async fn receive(
    ctx: &Context,
    source_id: &str,
    headers: &DeliveryHeaders,
    body: &[u8],
    client: Option<IpAddr>,
    now: DateTime<Utc>,
) -> Result<Delivered, InboundError> {
    let signed = standard_headers(headers, now);
    let authenticated =
        authenticate(
            ctx,
            source_id,
            None,
            client,
            now,
            |source, kind, secret| match kind {
                Kind::StandardWebhooks => {
                    let (id, timestamp, signature) = signed.as_ref().map_err(|why| *why)?;
                    verify(secret, signature, id, *timestamp, body)
                        .then_some(())
                        .ok_or("no v1 signature matches the body under the source's secrets")
                }
                Kind::Okta => okta_authorized(headers, source, secret),
            },
        )
        .await?;
    let kind = authenticated.kind;
    let body: Value = serde_json::from_slice(body).map_err(|error| {
        Invalid(format!(
            "the body must be one JSON value (it is not valid JSON: {error})"
        ))
    })?;
    let received = match (kind, &signed) {
        (Kind::StandardWebhooks, Ok((id, timestamp, _))) => {
            vec![standard_event(&authenticated.source, id, *timestamp, body)]
        }
        (Kind::StandardWebhooks, Err(_)) => return Err(InboundError::Refused),
        (Kind::Okta, _) => okta_events(&authenticated.source, body)?,
    };
    let ingested = ingest(ctx, authenticated.acting(), received, now).await?;
    Ok(Delivered { ingested, kind })
}

/// Answers Okta's one-time verification `GET` of an event hook: the challenge back, when the
/// request carries the source's secret (else [`InboundError::Refused`]; 429 after too many
/// refusals from `client`'s address).
pub async fn verify_okta(
    ctx: &Context,
    source_id: &str,
    headers: &DeliveryHeaders,
    challenge: Option<&str>,
    client: Option<IpAddr>,
    now: DateTime<Utc>,
) -> Result<String, InboundError> {
    authenticate(
        ctx,
        source_id,
        Some(Kind::Okta),
        client,
        now,
        |source, _, secret| okta_authorized(headers, source, secret),
    )
    .await?;
    let challenge = challenge.unwrap_or_default();
    if challenge.is_empty() {
        return Err(Invalid::new(
            "the X-Okta-Verification-Challenge header is required (Okta sends it when you \
             verify the event hook)",
        )
        .into());
    }
    if challenge.chars().count() > MAX_CHALLENGE_CHARS {
        return Err(Invalid(format!(
            "X-Okta-Verification-Challenge must be at most {MAX_CHALLENGE_CHARS} characters"
        ))
        .into());
    }
    Ok(challenge.to_owned())
}

/// The Standard Webhooks headers when all three are there and the timestamp is within
/// [`TIMESTAMP_TOLERANCE`] of `now`: (id, timestamp, signature); else why not.
fn standard_headers(
    headers: &DeliveryHeaders,
    now: DateTime<Utc>,
) -> Result<(String, i64, String), &'static str> {
    let id = headers
        .webhook_id()
        .filter(|id| !id.is_empty())
        .ok_or("no webhook-id header")?;
    let timestamp: i64 = headers
        .webhook_timestamp()
        .and_then(|text| text.trim().parse().ok())
        .ok_or("no webhook-timestamp header of seconds since the epoch")?;
    let signature = headers
        .webhook_signature()
        .ok_or("no webhook-signature header")?;
    let tolerance = i64::try_from(TIMESTAMP_TOLERANCE.as_secs()).unwrap_or(i64::MAX);
    if (now.timestamp() - timestamp).abs() > tolerance {
        return Err("webhook-timestamp more than 5 minutes from now");
    }
    Ok((id.to_owned(), timestamp, signature.to_owned()))
}

/// Whether the source's authentication header (`Authorization` unless it names another) is
/// `secret` (Okta sends the configured value as it is).
fn okta_authorized(
    headers: &DeliveryHeaders,
    source: &SourceRecord,
    secret: &str,
) -> Result<(), &'static str> {
    headers
        .get(source.auth_header.as_deref().unwrap_or("authorization"))
        .is_some_and(|presented| same_secret(secret, presented.trim()))
        .then_some(())
        .ok_or("the source's authentication header is missing or not its secret")
}

/// The event of a Standard Webhooks delivery: id the `webhook-id`, type from the source's
/// pointer (or fixed), source the source's, time the `webhook-timestamp`, data the body.
fn standard_event(source: &SourceRecord, id: &str, timestamp: i64, body: Value) -> Received {
    let event_type = match (&source.type_pointer, &source.fixed_type) {
        (_, Some(fixed)) => fixed.clone(),
        (Some(pointer), None) => match body.pointer(pointer) {
            Some(Value::String(text)) => text.clone(),
            Some(_) => {
                return Err(InvalidEvent {
                    id: id.to_owned(),
                    source: source.event_source.clone(),
                    reason: format!("the event type at {pointer} in the body is not a string"),
                });
            }
            None => {
                return Err(InvalidEvent {
                    id: id.to_owned(),
                    source: source.event_source.clone(),
                    reason: format!("the body has no event type at {pointer}"),
                });
            }
        },
        (None, None) => String::new(),
    };
    let mut document = Map::new();
    document.insert("specversion".into(), json!("1.0"));
    document.insert("id".into(), json!(id));
    document.insert("source".into(), json!(source.event_source));
    document.insert("type".into(), json!(event_type));
    if let Some(time) = DateTime::<Utc>::from_timestamp(timestamp, 0) {
        document.insert("time".into(), json!(flow_domain::format_timestamp(time)));
    }
    document.insert("datacontenttype".into(), json!("application/json"));
    document.insert("data".into(), body);
    CloudEvent::from_json(Value::Object(document))
}

/// The events of an Okta event hook delivery (`{eventType, data: {events: [...]}}`): one per
/// item, id its `uuid`, type its `eventType`, time its `published`, data the item. 400 for a
/// body of another shape or more than [`MAX_EVENTS`] items.
fn okta_events(source: &SourceRecord, body: Value) -> Result<Vec<Received>, Invalid> {
    let Value::Object(mut body) = body else {
        return Err(Invalid::new(
            "an Okta event hook delivery is a JSON object with data.events",
        ));
    };
    let items = match body.get_mut("data").and_then(|data| data.get_mut("events")) {
        Some(Value::Array(items)) => std::mem::take(items),
        _ => {
            return Err(Invalid::new(
                "an Okta event hook delivery has its events as an array at data.events",
            ));
        }
    };
    if items.len() > MAX_EVENTS {
        return Err(Invalid(format!(
            "at most {MAX_EVENTS} events per delivery ({} sent)",
            items.len()
        )));
    }
    Ok(items
        .into_iter()
        .map(|item| okta_event(source, item))
        .collect())
}

fn okta_event(source: &SourceRecord, item: Value) -> Received {
    let text = |name: &str| item.get(name).and_then(Value::as_str).map(str::to_owned);
    let id = text("uuid").unwrap_or_default();
    let invalid = |reason: &str| InvalidEvent {
        id: id.clone(),
        source: source.event_source.clone(),
        reason: reason.to_owned(),
    };
    if !item.is_object() {
        return Err(invalid("an Okta event must be a JSON object"));
    }
    if id.is_empty() {
        return Err(invalid("an Okta event needs its uuid (a string)"));
    }
    let Some(event_type) = text("eventType").filter(|text| !text.is_empty()) else {
        return Err(invalid("an Okta event needs its eventType (a string)"));
    };
    let mut document = Map::new();
    document.insert("specversion".into(), json!("1.0"));
    document.insert("id".into(), json!(id));
    document.insert("source".into(), json!(source.event_source));
    document.insert("type".into(), json!(event_type));
    if let Some(published) = text("published") {
        document.insert("time".into(), json!(published));
    }
    document.insert("datacontenttype".into(), json!("application/json"));
    document.insert("data".into(), item);
    CloudEvent::from_json(Value::Object(document))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(kind: &str) -> SourceInput {
        SourceInput {
            name: Some("HR".into()),
            kind: Some(kind.into()),
            ..SourceInput::default()
        }
    }

    #[test]
    fn a_standard_webhooks_source_needs_one_way_to_its_type() {
        let error = check(input("standard_webhooks")).unwrap_err();
        assert!(
            error.0.contains("exactly one of typePointer"),
            "{}",
            error.0
        );
        let both = SourceInput {
            type_pointer: Some("/type".into()),
            fixed_type: Some("hired".into()),
            ..input("standard_webhooks")
        };
        assert!(check(both).is_err());
        let pointer = SourceInput {
            type_pointer: Some("/type".into()),
            ..input("standard_webhooks")
        };
        assert_eq!(
            check(pointer).unwrap().type_from,
            Some(TypeFrom::Pointer("/type".into()))
        );
        let bad = SourceInput {
            type_pointer: Some("type".into()),
            ..input("standard_webhooks")
        };
        assert!(check(bad).unwrap_err().0.contains("JSON Pointer"));
        let long = SourceInput {
            type_pointer: Some(format!("/{}", "a".repeat(256))),
            ..input("standard_webhooks")
        };
        assert!(check(long).unwrap_err().0.contains("at most 256"));
    }

    #[test]
    fn an_okta_source_takes_no_type_and_kinds_are_named() {
        assert!(check(input("okta")).unwrap().type_from.is_none());
        let typed = SourceInput {
            fixed_type: Some("x".into()),
            ..input("okta")
        };
        assert!(check(typed).is_err());
        let error = check(input("github")).unwrap_err();
        assert!(error.0.contains("standard_webhooks, okta"), "{}", error.0);
    }

    #[test]
    fn an_okta_sources_auth_header_is_a_header_name_flow_does_not_use_otherwise() {
        assert_eq!(auth_header(Kind::Okta, None), Ok(None));
        assert_eq!(
            auth_header(Kind::Okta, Some("X-Flow-Secret".into())),
            Ok(Some("x-flow-secret".into()))
        );
        assert_eq!(
            auth_header(Kind::Okta, Some("Authorization".into())),
            Ok(None)
        );
        for bad in [
            "",
            "X Flow",
            "x-flow:secret",
            "Content-Type",
            "webhook-signature",
        ] {
            assert!(auth_header(Kind::Okta, Some(bad.into())).is_err(), "{bad}");
        }
        assert!(auth_header(Kind::Okta, Some("x".repeat(65))).is_err());
        assert!(auth_header(Kind::StandardWebhooks, Some("X-Flow-Secret".into())).is_err());
    }

    #[test]
    fn stale_or_incomplete_headers_do_not_authenticate() {
        let now = Utc::now();
        let headers = |offset: i64| DeliveryHeaders {
            all: vec![
                ("webhook-id".into(), "msg_1".into()),
                (
                    "webhook-timestamp".into(),
                    (now.timestamp() + offset).to_string(),
                ),
                ("webhook-signature".into(), "v1,abc".into()),
            ],
        };
        assert!(standard_headers(&headers(0), now).is_ok());
        assert!(standard_headers(&headers(-300), now).is_ok());
        assert_eq!(
            standard_headers(&headers(-301), now),
            Err("webhook-timestamp more than 5 minutes from now")
        );
        assert!(standard_headers(&headers(301), now).is_err());
        let mut without_id = headers(0);
        without_id.all.retain(|(name, _)| name != "webhook-id");
        assert_eq!(
            standard_headers(&without_id, now),
            Err("no webhook-id header")
        );
    }
}
