//! Webhook endpoints and their deliveries, for every surface: create (the secret sealed for its
//! endpoint and shown once), change, delete, rotate the secret, send a test ping, retry one
//! delivery and recover the failed ones since a time. Each change commits with its audit row.
//! The field rules are one: the domain's for events and description, the address policy for the
//! URL. What the webhook-worker works through (fan-out, claims, leases, outcomes) is
//! [`dispatch`].

pub mod dispatch;

use std::time::Duration;

use chrono::{DateTime, Utc};
use flow_common::db::audit;
use flow_common::db::dashboard::{self as queries, EndpointHealth};
use flow_common::db::webhooks;
use flow_common::db::webhooks::endpoints::{Endpoint, EndpointChanges, NewEndpoint};
use flow_common::db::webhooks::log::{AttemptRecord, DeliveryRecord, DeliverySearch, RetryRefusal};
use flow_common::webhook::address::check_endpoint_url;
use flow_domain::audit::AuditAction;
use flow_domain::events::{EventType, TEST_EVENT_TYPE, TestEventData, event_body};
use flow_domain::format_timestamp;
use flow_domain::ids::{DeliveryId, EventId, WebhookEndpointId};
use flow_domain::webhook::DeliveryStatus;
use flow_domain::webhook::endpoint as rules;
use flow_domain::webhook::signing::generate_secret;

use crate::Context;
use crate::ratelimit::{Operation, RateInfo, RateLimitError};
use crate::{Acting, FieldProblem, ServiceError};

/// How long a rotated-out secret keeps signing beside the new one.
pub const ROTATION_OVERLAP: Duration = Duration::from_secs(24 * 3600);

/// Most deliveries one recovery queues (the oldest first); recovering again takes the next.
pub const MAX_RECOVERY: i64 = 500;

/// What names a missing endpoint in errors.
const ENDPOINT: &str = "webhook endpoint";

/// An endpoint's fields as a surface received them; absent fields are unchanged on update (and
/// take their defaults on creation: every event kind, no description, enabled).
#[derive(Debug, Clone, Default)]
pub struct EndpointFields {
    /// Where events are POSTed (required on creation).
    pub url: Option<String>,
    /// Event kinds delivered; empty means all.
    pub events: Option<Vec<String>>,
    /// Free text; empty clears it.
    pub description: Option<String>,
    /// Whether deliveries go out (update only).
    pub enabled: Option<bool>,
}

/// The fields once they passed the rules.
struct Checked {
    url: Option<String>,
    events: Option<Vec<EventType>>,
    description: Option<Option<String>>,
}

/// Checks every field, so a form can show each problem beside its field; the API answers the
/// first (a missing URL, the event kinds, the description, then the URL's address).
async fn check(
    ctx: &Context,
    fields: &EndpointFields,
    url_required: bool,
) -> Result<Checked, ServiceError> {
    let mut problems = Vec::new();
    let url_text = fields.url.as_deref().map(str::trim);
    if url_text.is_some_and(str::is_empty) || (url_required && url_text.is_none()) {
        problems.push(FieldProblem::missing("url"));
    }
    let events = match fields
        .events
        .as_deref()
        .map(rules::parse_events)
        .transpose()
    {
        Ok(events) => events,
        Err(problem) => {
            problems.push(FieldProblem::invalid("events", problem));
            None
        }
    };
    let description = match fields
        .description
        .as_deref()
        .map(rules::parse_description)
        .transpose()
    {
        Ok(description) => description,
        Err(problem) => {
            problems.push(FieldProblem::invalid("description", problem));
            None
        }
    };
    let url = match url_text.filter(|text| !text.is_empty()) {
        None => None,
        Some(text) => match check_endpoint_url(text, ctx.settings.webhook_policy).await {
            Ok(url) => Some(url.to_string()),
            Err(problem) => {
                problems.push(FieldProblem::invalid("url", problem));
                None
            }
        },
    };
    if problems.is_empty() {
        Ok(Checked {
            url,
            events,
            description,
        })
    } else {
        Err(ServiceError::Fields(problems))
    }
}

/// The secret of endpoint `id` as stored: sealed for that endpoint.
fn seal(ctx: &Context, id: WebhookEndpointId, secret: &str) -> Result<String, ServiceError> {
    ctx.settings
        .webhook_secrets
        .seal(id, secret)
        .map_err(|error| ServiceError::Internal(anyhow::anyhow!(error)))
}

/// Writes the audit row of a change to `endpoint` (`action`, e.g. `webhook.updated`) and commits
/// it with the change.
async fn commit_with_audit(
    mut transaction: sqlx::Transaction<'_, sqlx::Postgres>,
    acting: Acting<'_>,
    action: AuditAction,
    endpoint: &Endpoint,
) -> Result<(), ServiceError> {
    audit::record(
        &mut *transaction,
        acting.org_id(),
        acting.actor,
        action,
        &endpoint.id.to_string(),
        &endpoint.url,
    )
    .await?;
    transaction.commit().await?;
    Ok(())
}

/// An endpoint with its signing secret, which is shown this once.
#[derive(Debug, Clone)]
pub struct WithSecret {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// The secret (`whsec_…`).
    pub secret: String,
}

/// One endpoint of the organization.
pub async fn get(
    ctx: &Context,
    acting: Acting<'_>,
    id: WebhookEndpointId,
) -> Result<Endpoint, ServiceError> {
    webhooks::endpoints::get(&ctx.db, acting.org_id(), id)
        .await?
        .ok_or(ServiceError::NotFound(ENDPOINT))
}

/// Creates an endpoint with a new secret; refused (409) when the organization has
/// [`webhooks::endpoints::MAX_ENDPOINTS_PER_ORG`].
pub async fn create(
    ctx: &Context,
    acting: Acting<'_>,
    fields: &EndpointFields,
) -> Result<WithSecret, ServiceError> {
    let checked = check(ctx, fields, true).await?;
    let id = WebhookEndpointId::new();
    let secret = generate_secret();
    let new = NewEndpoint {
        id,
        url: checked.url.unwrap_or_default(),
        description: checked.description.flatten(),
        events: checked.events.unwrap_or_default(),
        secret: seal(ctx, id, &secret)?,
    };
    let mut transaction = ctx.db.begin().await?;
    let endpoint = webhooks::endpoints::create(&mut transaction, acting.org_id(), &new)
        .await?
        .ok_or_else(|| {
            ServiceError::Conflict(format!(
                "an organization may have at most {} webhook endpoints",
                webhooks::endpoints::MAX_ENDPOINTS_PER_ORG
            ))
        })?;
    commit_with_audit(transaction, acting, AuditAction::WebhookCreated, &endpoint).await?;
    tracing::info!(webhook_id = %endpoint.id, "webhook endpoint created");
    Ok(WithSecret { endpoint, secret })
}

/// Changes the fields given; enabling clears the reason the endpoint was disabled.
pub async fn update(
    ctx: &Context,
    acting: Acting<'_>,
    id: WebhookEndpointId,
    fields: &EndpointFields,
) -> Result<Endpoint, ServiceError> {
    let checked = check(ctx, fields, false).await?;
    let changes = EndpointChanges {
        url: checked.url,
        description: checked.description,
        events: checked.events,
        enabled: fields.enabled,
    };
    let mut transaction = ctx.db.begin().await?;
    let endpoint = webhooks::endpoints::update(&mut *transaction, acting.org_id(), id, &changes)
        .await?
        .ok_or(ServiceError::NotFound(ENDPOINT))?;
    commit_with_audit(transaction, acting, AuditAction::WebhookUpdated, &endpoint).await?;
    Ok(endpoint)
}

/// Deletes an endpoint and its delivery history; answers what was deleted.
pub async fn delete(
    ctx: &Context,
    acting: Acting<'_>,
    id: WebhookEndpointId,
) -> Result<Endpoint, ServiceError> {
    let mut transaction = ctx.db.begin().await?;
    let endpoint = webhooks::endpoints::get(&mut *transaction, acting.org_id(), id)
        .await?
        .ok_or(ServiceError::NotFound(ENDPOINT))?;
    if !webhooks::endpoints::delete(&mut transaction, acting.org_id(), id).await? {
        return Err(ServiceError::NotFound(ENDPOINT));
    }
    commit_with_audit(transaction, acting, AuditAction::WebhookDeleted, &endpoint).await?;
    tracing::info!(webhook_id = %endpoint.id, "webhook endpoint deleted");
    Ok(endpoint)
}

/// Gives the endpoint a new secret; the previous one keeps signing for [`ROTATION_OVERLAP`].
pub async fn rotate_secret(
    ctx: &Context,
    acting: Acting<'_>,
    id: WebhookEndpointId,
) -> Result<WithSecret, ServiceError> {
    let secret = generate_secret();
    let sealed = seal(ctx, id, &secret)?;
    let mut transaction = ctx.db.begin().await?;
    let endpoint = webhooks::endpoints::rotate_secret(
        &mut *transaction,
        acting.org_id(),
        id,
        &sealed,
        ROTATION_OVERLAP,
    )
    .await?
    .ok_or(ServiceError::NotFound(ENDPOINT))?;
    commit_with_audit(
        transaction,
        acting,
        AuditAction::WebhookSecretRotated,
        &endpoint,
    )
    .await?;
    tracing::info!(webhook_id = %endpoint.id, "webhook secret rotated");
    Ok(WithSecret { endpoint, secret })
}

/// A test delivery, queued.
#[derive(Debug, Clone, Copy)]
pub struct TestQueued {
    /// The delivery.
    pub delivery_id: DeliveryId,
    /// Its event id (the `webhook-id` header).
    pub event_id: EventId,
}

/// Queues a `webhook.test` event to the endpoint (even a disabled one, so it can be checked
/// before it is enabled again). Counts against the organization's `webhook_send` limit.
pub async fn send_test(
    ctx: &Context,
    acting: Acting<'_>,
    id: WebhookEndpointId,
) -> Result<(TestQueued, RateInfo), ServiceError> {
    let rate = ctx
        .limiter
        .check(acting.caller, Operation::WebhookSend, 1)
        .await?;
    let endpoint = get(ctx, acting, id).await?;
    let event_id = EventId::new();
    let now = Utc::now();
    let body = event_body(
        event_id,
        TEST_EVENT_TYPE,
        now,
        TestEventData {
            webhook_id: endpoint.id,
            message: "This is a test event from Flow.".to_owned(),
        },
    );
    let mut transaction = ctx.db.begin().await?;
    let delivery_id =
        webhooks::log::create_test_delivery(&mut transaction, &endpoint, event_id, &body, now)
            .await?
            .ok_or(ServiceError::NotFound(ENDPOINT))?;
    transaction.commit().await?;
    Ok((
        TestQueued {
            delivery_id,
            event_id,
        },
        rate,
    ))
}

/// A delivery with its attempts, oldest first.
#[derive(Debug, Clone)]
pub struct DeliveryWithAttempts {
    /// The delivery.
    pub delivery: DeliveryRecord,
    /// Its attempts.
    pub attempts: Vec<AttemptRecord>,
}

/// Queues a delivery for one more attempt now (a failed one gets exactly one; a pending one is
/// brought forward; the event keeps its id). Refused while an attempt is under way and once it
/// succeeded. Counts against the organization's `webhook_send` limit.
pub async fn retry_delivery(
    ctx: &Context,
    acting: Acting<'_>,
    id: DeliveryId,
) -> Result<(DeliveryWithAttempts, RateInfo), ServiceError> {
    let rate = ctx
        .limiter
        .check(acting.caller, Operation::WebhookSend, 1)
        .await?;
    let mut transaction = ctx.db.begin().await?;
    let delivery = match webhooks::log::retry(&mut transaction, acting.org_id(), id).await? {
        Ok(record) => record,
        Err(RetryRefusal::NotFound) => return Err(ServiceError::NotFound("delivery")),
        Err(RetryRefusal::InFlight) => {
            return Err(ServiceError::Conflict(
                "an attempt of this delivery is under way; retry when it has finished".into(),
            ));
        }
        Err(RetryRefusal::Succeeded) => {
            return Err(ServiceError::Conflict(
                "this delivery succeeded already; it is not sent again".into(),
            ));
        }
    };
    transaction.commit().await?;
    let attempts = webhooks::log::attempts(&ctx.db, &[delivery.id]).await?;
    Ok((DeliveryWithAttempts { delivery, attempts }, rate))
}

/// What a recovery of failed deliveries did.
#[derive(Debug, Clone, Copy)]
pub struct Recovery {
    /// Deliveries that had failed since the time given, before the recovery.
    pub failed: i64,
    /// Of those, queued for another attempt now.
    pub recovered: u64,
    /// Whether the `webhook_send` allowance, rather than [`MAX_RECOVERY`], held the recovery
    /// back.
    pub limited_by_allowance: bool,
    /// Seconds until the `webhook_send` allowance is whole again.
    pub reset_seconds: u64,
}

impl Recovery {
    /// Failed deliveries still waiting for a recovery.
    pub fn left(&self) -> u64 {
        self.failed.unsigned_abs().saturating_sub(self.recovered)
    }
}

/// Queues the endpoint's deliveries that failed since `since` for another attempt: the oldest
/// first, at most [`MAX_RECOVERY`], and no more than the organization's `webhook_send` allowance
/// grants now (one per delivery); the action itself counts against `webhook_recover`. A
/// recovery the `webhook_send` allowance cannot start at all is refused with that operation's
/// [`RateLimitError::Exceeded`].
pub async fn recover_failed(
    ctx: &Context,
    acting: Acting<'_>,
    id: WebhookEndpointId,
    since: DateTime<Utc>,
) -> Result<Recovery, ServiceError> {
    let endpoint = get(ctx, acting, id).await?;
    ctx.limiter
        .check(acting.caller, Operation::WebhookRecover, 1)
        .await?;
    let org_id = acting.org_id();
    let failed = queries::count_failed_since(&ctx.db, org_id, endpoint.id, since).await?;
    let wanted = failed.min(MAX_RECOVERY);
    if wanted == 0 {
        return Ok(Recovery {
            failed,
            recovered: 0,
            limited_by_allowance: false,
            reset_seconds: 0,
        });
    }
    let (granted, rate, wait) = ctx
        .limiter
        .check_up_to(
            acting.caller,
            Operation::WebhookSend,
            u32::try_from(wanted).unwrap_or(u32::MAX),
        )
        .await?;
    if granted == 0 {
        return Err(RateLimitError::Exceeded {
            operation: Operation::WebhookSend,
            retry_after: wait,
            info: rate,
        }
        .into());
    }
    let mut transaction = ctx.db.begin().await?;
    let recovered = queries::recover_failed_since(
        &mut transaction,
        org_id,
        endpoint.id,
        since,
        i64::from(granted),
    )
    .await?;
    let detail = if recovered == failed.unsigned_abs() {
        format!("{recovered} failed since {}", format_timestamp(since))
    } else {
        format!(
            "{recovered} failed since {} (of {failed})",
            format_timestamp(since)
        )
    };
    audit::record(
        &mut *transaction,
        org_id,
        acting.actor,
        AuditAction::WebhookRecovered,
        &endpoint.id.to_string(),
        &detail,
    )
    .await?;
    transaction.commit().await?;
    tracing::info!(webhook_id = %endpoint.id, recovered, failed, "failed webhook deliveries recovered");
    Ok(Recovery {
        failed,
        recovered,
        limited_by_allowance: i64::from(granted) < wanted,
        reset_seconds: rate.reset_seconds,
    })
}

/// Up to `limit` of the organization's endpoints after `after`, in id order (a page of the API,
/// the dashboard's list).
pub async fn list(
    ctx: &Context,
    acting: Acting<'_>,
    after: Option<WebhookEndpointId>,
    limit: i64,
) -> Result<Vec<Endpoint>, ServiceError> {
    Ok(webhooks::endpoints::list(&ctx.db, acting.org_id(), after, limit).await?)
}

/// How the organization's endpoints among `ids` fared lately (attempts and successes of the last
/// 24 hours, the last failure); an endpoint with no recent attempt has no row.
pub async fn health(
    ctx: &Context,
    acting: Acting<'_>,
    ids: &[WebhookEndpointId],
) -> Result<Vec<EndpointHealth>, ServiceError> {
    Ok(queries::endpoint_health(&ctx.db, acting.org_id(), ids).await?)
}

/// Up to `limit` deliveries of the organization's endpoint `endpoint_id` (of `status`, if
/// given) before `before`, newest first, each with its attempts; not found when the endpoint is
/// not the organization's.
pub async fn deliveries(
    ctx: &Context,
    acting: Acting<'_>,
    endpoint_id: WebhookEndpointId,
    status: Option<DeliveryStatus>,
    before: Option<(DateTime<Utc>, DeliveryId)>,
    limit: i64,
) -> Result<Vec<DeliveryWithAttempts>, ServiceError> {
    let endpoint = get(ctx, acting, endpoint_id).await?;
    let search = DeliverySearch {
        statuses: status
            .map(|status| vec![status.as_str().to_owned()])
            .unwrap_or_default(),
        ..DeliverySearch::default()
    };
    let rows = webhooks::log::search_deliveries(
        &ctx.db,
        acting.org_id(),
        endpoint.id,
        &search,
        before,
        limit,
    )
    .await?;
    let ids: Vec<DeliveryId> = rows.iter().map(|row| row.id).collect();
    let mut attempts = webhooks::log::attempts(&ctx.db, &ids).await?;
    Ok(rows
        .into_iter()
        .map(|delivery| DeliveryWithAttempts {
            attempts: attempts
                .extract_if(.., |attempt| attempt.delivery_id == delivery.id)
                .collect(),
            delivery,
        })
        .collect())
}

/// Up to `limit` deliveries of the organization's endpoint `endpoint_id` that `search` lets
/// through, before `before`, newest first (the dashboard's delivery log).
pub async fn search_deliveries(
    ctx: &Context,
    acting: Acting<'_>,
    endpoint_id: WebhookEndpointId,
    search: &DeliverySearch,
    before: Option<(DateTime<Utc>, DeliveryId)>,
    limit: i64,
) -> Result<Vec<DeliveryRecord>, ServiceError> {
    Ok(webhooks::log::search_deliveries(
        &ctx.db,
        acting.org_id(),
        endpoint_id,
        search,
        before,
        limit,
    )
    .await?)
}

/// The delivery `id` of the organization's endpoint `endpoint_id`; not found when it is another
/// endpoint's or organization's.
pub async fn delivery(
    ctx: &Context,
    acting: Acting<'_>,
    endpoint_id: WebhookEndpointId,
    id: DeliveryId,
) -> Result<DeliveryRecord, ServiceError> {
    queries::delivery(&ctx.db, acting.org_id(), endpoint_id, id)
        .await?
        .ok_or(ServiceError::NotFound("delivery"))
}

/// [`delivery`] with its attempts, oldest first.
pub async fn delivery_with_attempts(
    ctx: &Context,
    acting: Acting<'_>,
    endpoint_id: WebhookEndpointId,
    id: DeliveryId,
) -> Result<DeliveryWithAttempts, ServiceError> {
    let delivery = delivery(ctx, acting, endpoint_id, id).await?;
    let attempts = webhooks::log::attempts(&ctx.db, &[delivery.id]).await?;
    Ok(DeliveryWithAttempts { delivery, attempts })
}

/// How many deliveries of the organization's endpoint `endpoint_id` created since `since` have
/// failed (what [`recover_failed`] would take up).
pub async fn failed_since(
    ctx: &Context,
    acting: Acting<'_>,
    endpoint_id: WebhookEndpointId,
    since: DateTime<Utc>,
) -> Result<i64, ServiceError> {
    Ok(queries::count_failed_since(&ctx.db, acting.org_id(), endpoint_id, since).await?)
}
