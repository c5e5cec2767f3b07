//! Reading assignments, for every surface: one by id with its modules' progress (or what the id
//! stands for when it is not persisted: [`get`]), a page of the organization's ([`list`]), and
//! its change feed ([`changes`]).

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use flow_common::db::assignments::{self, AssignmentRecord, ListFilter, ModuleState};
pub use flow_common::db::assignments::{ChangePosition, ChangeStart, ChangedAssignment};
use flow_common::db::dead_letters::AssignmentFailure;
use flow_domain::ids::{AssignmentId, FlowId};
use flow_domain::messages::AssignCommand;

use crate::progress::{Resolution, resolve};
use crate::{Acting, Context, ServiceError};

/// What an assignment id of the organization stands for, with what a surface shows of it.
pub enum Found {
    /// Persisted (or an alias of a persisted assignment), with every module of its flow in flow
    /// order and what was reported of each.
    Persisted {
        /// The assignment.
        record: Box<AssignmentRecord>,
        /// Its flow's modules, each with its progress or none yet.
        modules: Vec<ModuleState>,
    },
    /// Its command was dead-lettered: it will not be persisted unless an operator replays it.
    Failed {
        /// The command as it was published.
        command: Box<AssignCommand>,
        /// Why and when it failed.
        failure: AssignmentFailure,
        /// The modules of its flow (none when the flow is gone).
        total_modules: i64,
    },
    /// Handed out with a 200 and not persisted yet.
    Accepted,
    /// Not an id of this organization.
    Unknown,
}

/// The assignment `id` of the organization, as [`resolve`] finds it.
pub async fn get(
    ctx: &Context,
    acting: Acting<'_>,
    id: AssignmentId,
) -> Result<Found, ServiceError> {
    let org_id = acting.org_id();
    Ok(match resolve(ctx, org_id, id).await? {
        Resolution::Persisted(record) => {
            let modules = assignments::module_states(&ctx.db, record.id).await?;
            Found::Persisted { record, modules }
        }
        Resolution::Failed(failure) => {
            let command: AssignCommand = serde_json::from_value(failure.command.clone())
                .context("reading a failed command")?;
            let total_modules = ctx
                .caches
                .flow(&ctx.db, org_id, command.flow_id)
                .await?
                .map_or(0, |flow| flow.module_count);
            Found::Failed {
                command: Box::new(command),
                failure,
                total_modules,
            }
        }
        Resolution::Accepted => Found::Accepted,
        Resolution::Unknown => Found::Unknown,
    })
}

/// Up to `limit` of the organization's assignments that `filter` lets through, in
/// (assigned at, id) order after `after`, their statuses judged at `now`.
pub async fn list(
    ctx: &Context,
    acting: Acting<'_>,
    filter: &ListFilter,
    after: Option<(DateTime<Utc>, AssignmentId)>,
    limit: i64,
    now: DateTime<Utc>,
) -> Result<Vec<AssignmentRecord>, ServiceError> {
    Ok(assignments::list(&ctx.db, acting.org_id(), filter, after, limit, now).await?)
}

/// Up to `limit` of the organization's assignments in the order of their last change from
/// `start` (the change feed of `GET /v1/assignments?updatedSince=`): read on the primary, whose
/// running transactions bound what the feed may show yet.
pub async fn changes(
    ctx: &Context,
    acting: Acting<'_>,
    flow_id: Option<FlowId>,
    email_normalized: Option<&str>,
    start: ChangeStart,
    limit: i64,
) -> Result<Vec<ChangedAssignment>, ServiceError> {
    Ok(assignments::changes(
        &ctx.db,
        acting.org_id(),
        flow_id,
        email_normalized,
        start,
        limit,
    )
    .await?)
}
