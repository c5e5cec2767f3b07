//! The application layer: the operations every surface shares (the `/v1` routes, the dashboard,
//! SCIM, the workers and `flowctl`). Each takes an [`Context`] and typed input, owns its
//! validation, its transaction and its audit row, and answers with a typed result or a
//! [`ServiceError`]. Surfaces only translate: their input into these calls, the results into their
//! answers (JSON, pages, a command's output), the errors into their own (the API's error body,
//! the dashboard's form messages, `flowctl`'s). No surface calls another surface's handler or
//! builds its wire types.
//!
//! One module per resource: [`assign`] (assigning flows, one or many), [`progress`] (what an
//! assignment id resolves to, recording module progress), [`webhooks`] (endpoints,
//! test pings, retries and recoveries), [`keys`], [`team`] (dashboard accounts), [`users`],
//! [`groups`] (SCIM, sharing [`provisioning`]), [`enrollment`] (rules that assign on their own),
//! [`erasure`], [`orgs`] (an operator's), [`flows`], [`schedules`], [`reports`], [`operations`]
//! (the lanes' queue depths and an organization's backlog) and [`exports`]. Rate limits that
//! apply whatever the surface (reports, test pings and retries, export downloads) are checked
//! here; the `/v1` read and write limits per request stay in the API's routes. What the workers
//! work off goes through operations here too: [`assign`] and [`progress`] apply their commands,
//! [`schedules`] hands out due occurrences, [`outbox`] the relay's turns, [`upkeep`] the
//! scheduler's rounds, [`dead_letters`] what the recorder keeps, [`webhooks::dispatch`] the webhook-worker's
//! fan-out, claims and recorded attempts, [`exports::job`] the report-worker's exports,
//! [`backlogs`] what the gauges count.
//!
//! What the operations stand on, none of it HTTP: the [`Context`] ([`context`]) with its
//! read-through [`caches`] of keys, flows and rules, the [`ratelimit`]er, the batched assign
//! [`lookup`]s and the [`queue_depths`] poller's latest reading, and the [`engine`]s; [`caller`] is who an operation
//! acts for. Below them: `flow_common` (Postgres, the broker, the export store) and the domain.

pub mod analysis;
pub mod assign;
pub mod assignments;
pub mod attention;
pub mod audit;
pub mod backlogs;
pub mod caches;
pub mod caller;
pub mod changes;
pub mod compliance;
pub mod context;
pub mod csv_lines;
pub mod dead_letters;
pub mod enrollment;
/// The engines the operations and the workers share: [`engine::enrollment`] (evaluating rules
/// and assigning what they match, for `enrollment` and the scheduler) and [`engine::report`]
/// (assembling a report in one snapshot, for `reports` and the report-worker).
pub mod engine {
    pub mod enrollment;
    pub mod report;
}
pub mod erasure;
pub mod error;
pub mod events;
pub mod exports;
pub mod flows;
pub mod groups;
pub mod keys;
pub mod lookup;
pub mod operations;
pub mod org_settings;
pub mod orgs;
pub mod outbox;
pub mod progress;
pub mod provisioning;
pub mod queue_depths;
pub mod ratelimit;
pub mod reports;
pub mod schedules;
pub mod sign_in;
pub mod team;
pub mod upkeep;
pub mod user_import;
pub mod users;
pub mod webhooks;
pub mod xapi;

use flow_common::db::audit::Actor;
use flow_domain::ids::OrgId;

pub use crate::caller::Caller;
pub use crate::context::{Context, Settings, StartConfig};
pub use crate::error::{
    DATABASE_UNAVAILABLE, FieldProblem, ProblemKind, ServiceError, VALUE_REFUSED, data_exception,
};

/// Who asks for an operation: the organization it acts in (with its tier, limits and time zone)
/// and who the audit trail names.
#[derive(Debug, Clone, Copy)]
pub struct Acting<'a> {
    /// The organization, as the caches and the rate limiter know it.
    pub caller: &'a Caller,
    /// Who the audit rows name: an API key, a dashboard account or `flowctl`.
    pub actor: Actor<'a>,
}

impl Acting<'_> {
    /// The organization's id.
    pub fn org_id(&self) -> OrgId {
        self.caller.org_id()
    }
}
