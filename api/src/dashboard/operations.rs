//! Settings → Operations (admins only): the depth of each lane's queues, the organization's bulk
//! shard and its own webhook backlog, from [`flow_app::operations`].

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use flow_app::operations::{self, DepthRow};

use super::auth::SignedIn;
use super::view::{Layout, Section, count};
use super::{PageError, PageResult};
use crate::state::AppState;

/// Routes of this module.
pub fn router() -> Router<AppState> {
    Router::new().route("/settings/operations", get(show))
}

/// A queue as the page shows it.
pub struct QueueRow {
    /// What it is.
    pub label: String,
    /// Its name.
    pub queue: String,
    /// Its lane.
    pub lane: &'static str,
    /// Messages waiting, or `–` before the first reading.
    pub messages: String,
    /// Consumers, or `–`.
    pub consumers: String,
}

impl From<DepthRow> for QueueRow {
    fn from(row: DepthRow) -> Self {
        let figure =
            |value: Option<u64>| value.map_or_else(|| "–".to_owned(), |value| count(value as i64));
        Self {
            messages: figure(row.messages),
            consumers: figure(row.consumers),
            label: row.label,
            queue: row.queue,
            lane: row.lane,
        }
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "dashboard/settings_operations.html")]
struct OperationsPage {
    layout: Layout,
    bulk_shard: u16,
    shards: u16,
    read_at: Option<String>,
    queues: Vec<QueueRow>,
    unpublished_events: String,
    waiting: String,
    retrying: String,
}

async fn show(State(state): State<AppState>, account: SignedIn) -> PageResult<OperationsPage> {
    if !account.is_admin() {
        return Err(PageError::new(
            StatusCode::FORBIDDEN,
            "The operations view is for the admins of your organization.",
        ));
    }
    let layout = Layout::new(&account, Section::Settings).await;
    let overview = operations::overview(&state, account.org.id, account.org.bulk_lane).await?;
    Ok(OperationsPage {
        bulk_shard: overview.bulk_shard,
        shards: flow_common::amqp::BULK_SHARDS,
        read_at: overview.read_at.map(|at| {
            at.with_timezone(&layout.zone)
                .format("%H:%M:%S")
                .to_string()
        }),
        queues: overview.queues.into_iter().map(QueueRow::from).collect(),
        unpublished_events: match overview.unpublished_events {
            backlog if backlog.complete => count(backlog.backlog),
            backlog => format!("at least {}", count(backlog.backlog)),
        },
        waiting: count(overview.webhook_backlog.waiting),
        retrying: count(overview.webhook_backlog.retrying),
        layout,
    })
}
