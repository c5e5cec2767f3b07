//! Dead letters: list them, replay them to the queue they died in. The dead-letter recorder (in
//! the assign-worker) moves them from the dead-letter queue into Postgres with their reason; a
//! replay publishes each back to its queue with a confirm and only then marks it replayed, so an
//! interrupted replay sends a message at most once more (the workers apply a command once).

use anyhow::Context;
use clap::Subcommand;
use flow_app::dead_letters;
use flow_common::amqp::{self, Topology};
use flow_common::config::CoreConfig;
use lapin::BasicProperties;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use serde::Serialize;

use crate::output::Outcome;

/// Dead-letter commands.
#[derive(Subcommand)]
pub enum DlqCommand {
    /// Show up to `limit` dead letters waiting for an operator, oldest first, with their reason.
    List {
        /// Most messages to show.
        #[arg(long, default_value_t = 20)]
        limit: i64,
    },
    /// Publish up to `limit` dead letters again to the queue they died in.
    Replay {
        /// Most messages to replay.
        #[arg(long, default_value_t = 1_000)]
        limit: i64,
    },
}

/// A dead letter as `flowctl dlq list` prints it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LetterSummary {
    /// Its number (what a replay marks).
    pub id: i64,
    /// When it was dead-lettered.
    pub dead_lettered_at: String,
    /// The queue it died in.
    pub origin_queue: Option<String>,
    /// The AMQP message id.
    pub message_id: Option<String>,
    /// Why.
    pub reason: String,
    /// The body's first 500 characters.
    pub body: String,
}

/// The dead letters shown and how many wait in all.
#[derive(Debug, Clone, Serialize)]
pub struct LetterList {
    /// Oldest first.
    pub letters: Vec<LetterSummary>,
    /// Dead letters waiting for an operator.
    pub waiting: i64,
}

/// `flowctl dlq ...`.
pub async fn run(core: &CoreConfig, command: DlqCommand) -> anyhow::Result<Outcome> {
    let pool = flow_common::db::connect(&core.database_url, 2)
        .await
        .context("connecting to Postgres")?;
    let outcome = match command {
        DlqCommand::List { limit } => {
            let mut text = String::new();
            let mut letters = Vec::new();
            for letter in dead_letters::pending(&pool, limit).await? {
                let body = String::from_utf8_lossy(&letter.payload);
                let summary = LetterSummary {
                    id: letter.id,
                    dead_lettered_at: flow_domain::format_timestamp(letter.dead_lettered_at),
                    origin_queue: letter.origin_queue,
                    message_id: letter.message_id,
                    reason: letter.reason,
                    body: body.chars().take(500).collect(),
                };
                text.push_str(&format!(
                    "#{}\t{}\tfrom {}\t{}\t{}\n\t{}\n",
                    summary.id,
                    summary.dead_lettered_at,
                    summary.origin_queue.as_deref().unwrap_or("?"),
                    summary.message_id.as_deref().unwrap_or("-"),
                    summary.reason,
                    summary.body
                ));
                letters.push(summary);
            }
            let waiting = dead_letters::pending_count(&pool).await?;
            text.push_str(&format!(
                "{} shown, {waiting} waiting in all",
                letters.len()
            ));
            Outcome::new(&LetterList { letters, waiting }, text)
        }
        DlqCommand::Replay { limit } => {
            let topology = Topology::new(&core.queue_prefix, core.delivery_limit);
            let connection = amqp::connect(&core.amqp_url, "flowctl")
                .await
                .context("connecting to RabbitMQ")?;
            let channel = connection.create_channel().await?;
            topology.declare(&channel).await?;
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await?;
            let letters = dead_letters::pending(&pool, limit).await?;
            let mut replayed = 0;
            for letter in &letters {
                let Some(origin) = letter.origin_queue.as_deref() else {
                    eprintln!("#{}: no origin queue recorded; left as is", letter.id);
                    continue;
                };
                let mut properties = BasicProperties::default()
                    .with_delivery_mode(2)
                    .with_content_type("application/json".into())
                    .with_app_id("flowctl".into());
                if let Some(id) = &letter.message_id {
                    properties = properties.with_message_id(id.as_str().into());
                }
                if let Some(kind) = &letter.kind {
                    properties = properties.with_type(kind.as_str().into());
                }
                // The default exchange routes by queue name, straight to the origin queue.
                let confirm = channel
                    .basic_publish(
                        "".into(),
                        origin.into(),
                        BasicPublishOptions {
                            mandatory: true,
                            ..Default::default()
                        },
                        &letter.payload,
                        properties,
                    )
                    .await?
                    .await?;
                if !confirm.is_ack() || confirm.take_message().is_some() {
                    anyhow::bail!("the broker did not accept the replayed message for {origin}");
                }
                dead_letters::mark_replayed(&pool, letter.id).await?;
                replayed += 1;
            }
            drop(connection.close(200, "done".into()).await);
            Outcome::new(
                &serde_json::json!({ "replayed": replayed }),
                format!("{replayed} message(s) replayed"),
            )
        }
    };
    pool.close().await;
    outcome
}
