//! Dead letters: list them, replay them to the queue they died in.

use anyhow::Context;
use clap::Subcommand;
use flow_common::amqp::{self, Topology};
use flow_common::config::CoreConfig;
use lapin::options::{BasicAckOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::FieldTable;

/// Dead-letter commands.
#[derive(Subcommand)]
pub enum DlqCommand {
    /// Show up to `limit` dead-lettered messages (they stay in the queue).
    List {
        /// Most messages to show.
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Publish up to `limit` dead-lettered messages again to the queue they died in.
    Replay {
        /// Most messages to replay.
        #[arg(long, default_value_t = 1_000)]
        limit: usize,
    },
}

/// `flowctl dlq ...`.
pub async fn run(core: &CoreConfig, command: DlqCommand) -> anyhow::Result<()> {
    let topology = Topology::new(&core.queue_prefix, core.delivery_limit);
    let connection = amqp::connect(&core.amqp_url, "flowctl")
        .await
        .context("connecting to RabbitMQ")?;
    let channel = connection.create_channel().await?;
    topology.declare(&channel).await?;
    let queue = topology.queue(amqp::QueueKind::DeadLetters);
    match command {
        DlqCommand::List { limit } => {
            let mut shown = 0;
            while shown < limit {
                let Some(message) = channel
                    .basic_get(queue.clone().into(), BasicGetOptions::default())
                    .await?
                else {
                    break;
                };
                shown += 1;
                println!(
                    "{}\tfrom {}\t{}",
                    message
                        .delivery
                        .properties
                        .message_id()
                        .as_ref()
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                    amqp::dead_letter_origin(&message.delivery.properties)
                        .unwrap_or_else(|| "?".into()),
                    String::from_utf8_lossy(&message.delivery.data)
                );
            }
            println!("{shown} message(s) shown; they remain in {queue}");
        }
        DlqCommand::Replay { limit } => {
            let publisher = connection.create_channel().await?;
            publisher
                .confirm_select(ConfirmSelectOptions::default())
                .await?;
            let mut replayed = 0;
            while replayed < limit {
                let Some(message) = channel
                    .basic_get(queue.clone().into(), BasicGetOptions::default())
                    .await?
                else {
                    break;
                };
                let origin = amqp::dead_letter_origin(&message.delivery.properties)
                    .with_context(|| "dead letter without an origin queue header")?;
                let mut properties = message.delivery.properties.clone();
                properties = properties.with_headers(FieldTable::default());
                // Publishing to the default exchange with the queue's name routes straight to it.
                let confirm = publisher
                    .basic_publish(
                        "".into(),
                        origin.clone().into(),
                        BasicPublishOptions {
                            mandatory: true,
                            ..Default::default()
                        },
                        &message.delivery.data,
                        properties,
                    )
                    .await?
                    .await?;
                if !confirm.is_ack() || confirm.take_message().is_some() {
                    anyhow::bail!("the broker did not accept the replayed message for {origin}");
                }
                message.delivery.ack(BasicAckOptions::default()).await?;
                replayed += 1;
            }
            println!("{replayed} message(s) replayed");
        }
    }
    drop(connection.close(200, "done".into()).await);
    Ok(())
}
