//! Report rollups: check them against a recount over the rows.

use anyhow::Context;
use clap::Subcommand;
use flow_common::config::CoreConfig;
use serde::Serialize;

use crate::output::Outcome;

/// Report commands.
#[derive(Subcommand)]
pub enum ReportsCommand {
    /// Recount every assignment by flow, quarter hour and status and compare with the maintained
    /// rollups (and their unmerged deltas), in one snapshot; exit status 1 when any key differs.
    /// Reads every assignment: run it off-peak on a large database.
    #[command(after_help = "\
Examples:
  flowctl reports verify
  flowctl --json reports verify")]
    Verify,
}

/// What `flowctl reports verify` found.
#[derive(Debug, Clone, Serialize)]
pub struct Verification {
    /// Keys whose maintained figures differ from the recount (empty: the rollups are exact).
    pub mismatches: Vec<MismatchSummary>,
}

/// One key that differs.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MismatchSummary {
    /// `bucket` (a quarter hour) or `flow` (the flow's total).
    pub level: String,
    /// The flow.
    pub flow_id: String,
    /// The quarter hour, at the bucket level.
    pub bucket: Option<String>,
    /// The stored status.
    pub status: String,
    /// Assignments counted from the rows.
    pub counted: i64,
    /// Assignments the rollups hold.
    pub maintained: i64,
}

/// `flowctl reports ...`.
pub async fn run(core: &CoreConfig, command: ReportsCommand) -> anyhow::Result<Outcome> {
    let pool = flow_common::db::connect(&core.database_url, 2)
        .await
        .context("connecting to Postgres")?;
    match command {
        ReportsCommand::Verify => {
            // Rows, rollups and deltas from one snapshot.
            let mismatches = flow_app::upkeep::verify_rollups(&pool).await?;
            let mismatches: Vec<MismatchSummary> = mismatches
                .into_iter()
                .map(|mismatch| MismatchSummary {
                    level: mismatch.level,
                    flow_id: mismatch.flow_id.to_string(),
                    bucket: mismatch.bucket.map(flow_domain::format_timestamp),
                    status: mismatch.status,
                    counted: mismatch.counted,
                    maintained: mismatch.maintained,
                })
                .collect();
            if mismatches.is_empty() {
                return Outcome::new(
                    &Verification { mismatches },
                    "report rollups match a recount of every assignment",
                );
            }
            let mut text = format!("{} keys differ from a recount:\n", mismatches.len());
            for mismatch in &mismatches {
                text.push_str(&format!(
                    "{}\tflow {}\t{}\t{}\tcounted {}\tmaintained {}\n",
                    mismatch.level,
                    mismatch.flow_id,
                    mismatch.bucket.as_deref().unwrap_or("-"),
                    mismatch.status,
                    mismatch.counted,
                    mismatch.maintained
                ));
            }
            anyhow::bail!("{}", text.trim_end())
        }
    }
}
