//! Webhook endpoint secrets at rest: a new master key for `WEBHOOK_SECRET_KEY`, and re-encrypting
//! the stored secrets in the current form (sealed for their endpoint).

use anyhow::Context;
use clap::Subcommand;
use flow_common::config::CoreConfig;
use flow_common::webhook::vault::{SecretVault, StoredForm, generate_master_key};
use flow_domain::ids::WebhookEndpointId;
use serde::Serialize;

use crate::output::Outcome;

/// Endpoints read per statement while resealing.
const PAGE: i64 = 500;

/// Webhook commands.
#[derive(Subcommand)]
pub enum WebhooksCommand {
    /// Print a new master key for `WEBHOOK_SECRET_KEY` (base64 of 32 random bytes).
    #[command(after_help = "\
Examples:
  echo \"WEBHOOK_SECRET_KEY=$(flowctl webhooks generate-key)\" >> .env")]
    GenerateKey,
    /// Re-encrypt every stored endpoint secret (current and previous) sealed for its endpoint
    /// with `WEBHOOK_SECRET_KEY`: secrets stored in plain text and those sealed before the
    /// binding to endpoints (`enc:v1:`). In place, one endpoint at a time; running it again
    /// changes nothing.
    #[command(after_help = "\
Examples:
  WEBHOOK_SECRET_KEY=… flowctl webhooks reseal
  flowctl --json webhooks reseal          # {\"checked\": 12, \"resealed\": 3, \"changedMeanwhile\": 0}")]
    Reseal {
        /// The master key.
        #[command(flatten)]
        vault: SecretVault,
    },
}

/// What `flowctl webhooks reseal` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resealed {
    /// Endpoints holding a secret in an older form.
    pub checked: u64,
    /// Of those, rewritten.
    pub resealed: u64,
    /// Of those, left alone because their secret changed while this ran (a rotation, which
    /// stores the current form); run the command again to be sure.
    pub changed_meanwhile: u64,
}

/// `flowctl webhooks ...`.
pub async fn run(core: &CoreConfig, command: WebhooksCommand) -> anyhow::Result<Outcome> {
    match command {
        WebhooksCommand::GenerateKey => Ok(Outcome::text(generate_master_key())),
        WebhooksCommand::Reseal { vault } => {
            let pool = crate::admin::pool(core).await?;
            let resealed = reseal(&pool, &vault).await?;
            pool.close().await;
            let text = format!(
                "{} endpoint(s) held a secret in an older form; {} resealed, {} changed meanwhile",
                resealed.checked, resealed.resealed, resealed.changed_meanwhile
            );
            Outcome::new(&resealed, text)
        }
    }
}

/// Re-encrypts every endpoint secret not in the current form; see [`WebhooksCommand::Reseal`].
pub async fn reseal(pool: &sqlx::PgPool, vault: &SecretVault) -> anyhow::Result<Resealed> {
    vault.check()?;
    anyhow::ensure!(
        vault.master_key.is_some(),
        "WEBHOOK_SECRET_KEY is not set: there is nothing to reseal with"
    );
    let mut report = Resealed::default();
    let mut after: Option<WebhookEndpointId> = None;
    loop {
        let rows: Vec<(WebhookEndpointId, String, Option<String>)> = sqlx::query_as(
            "SELECT id, secret, previous_secret FROM webhook_endpoints
             WHERE ($1::uuid IS NULL OR id > $1)
               AND (secret NOT LIKE 'enc:v2:%' OR previous_secret NOT LIKE 'enc:v2:%')
             ORDER BY id LIMIT $2",
        )
        .bind(after)
        .bind(PAGE)
        .fetch_all(pool)
        .await
        .context("reading endpoint secrets")?;
        let Some(last) = rows.last() else {
            return Ok(report);
        };
        after = Some(last.0);
        for (id, secret, previous) in rows {
            report.checked += 1;
            let current = resealed(vault, id, &secret)?;
            let earlier = previous
                .as_deref()
                .map(|stored| resealed(vault, id, stored))
                .transpose()?;
            // Written only if the row still holds what was read.
            let updated = sqlx::query(
                "UPDATE webhook_endpoints SET secret = $2, previous_secret = $3
                 WHERE id = $1 AND secret = $4 AND previous_secret IS NOT DISTINCT FROM $5",
            )
            .bind(id)
            .bind(&current)
            .bind(&earlier)
            .bind(&secret)
            .bind(&previous)
            .execute(pool)
            .await
            .with_context(|| format!("storing the secret of {id}"))?;
            match updated.rows_affected() {
                0 => report.changed_meanwhile += 1,
                _ => report.resealed += 1,
            }
        }
    }
}

/// `stored` (a secret of endpoint `id`) in the current form.
fn resealed(vault: &SecretVault, id: WebhookEndpointId, stored: &str) -> anyhow::Result<String> {
    if StoredForm::of(stored) == StoredForm::SealedV2 {
        return Ok(stored.to_owned());
    }
    let secret = vault
        .open(id, stored)
        .with_context(|| format!("opening the secret of {id}"))?;
    Ok(vault.seal(id, &secret)?)
}
