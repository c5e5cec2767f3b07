//! Benchmarks. Figures go to the README; none is asserted in a test.
//!
//! The one place in `flowctl` that calls `flow_common::db` query functions directly, and only for
//! the bench's own data: seeding it (organizations, users, flows, keys, outbox rows and endpoints
//! written in bulk, faster than the operations would and without their audit rows, which a bench
//! does not measure) and reading figures to measure (the report queries timed on their own, the
//! rollups and the outbox backlog a bench waits on). What a bench measures is the service
//! itself, through its HTTP API or the application layer's operations; see docs/architecture.md.

pub mod assign;
pub mod broker;
pub mod compliance;
pub mod csv_import;
pub mod detailed;
pub mod fairness;
pub mod ingest;
pub mod lifecycle;
pub mod plain;
pub mod report;
pub mod schedulers;
pub mod scim;
mod seed;
pub mod soak;
pub mod system;
pub mod webhooks;

use clap::Subcommand;
use flow_common::config::CoreConfig;

/// Benchmark commands.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Load the assign pipeline: accepted/s, latency percentiles, errors, catch-up time.
    Assign(assign::AssignBenchArgs),
    /// Publish-only ceiling of the broker: persistent messages, quorum queue, confirms.
    Broker(broker::BrokerBenchArgs),
    /// The compliance report across required flows (a whole organization, a department, `asOf`,
    /// the roll-up by manager), its CSV export against a plain `COPY`, and a funnel, on 100,000
    /// people and two years of assignments; totals checked against a direct SQL count.
    Compliance(compliance::ComplianceBenchArgs),
    /// Parse time of the dashboard's largest users imports (50,000 rows; 8 MiB of empty records).
    Csv(csv_import::CsvBenchArgs),
    /// The API's peak memory answering the largest detailed report page it allows.
    Detailed(detailed::DetailedBenchArgs),
    /// Events in and progress in: CloudEvents batches a trigger turns into assignments and xAPI
    /// statement batches that complete modules, against the plain REST assign and progress calls,
    /// through the whole system; nothing lost or applied twice.
    Ingest(ingest::IngestBenchArgs),
    /// Lanes: a bystander's single assigns and webhooks while another organization bulk-loads,
    /// and two bulk organizations' shares of the persist rate.
    Fairness(fairness::FairnessBenchArgs),
    /// The whole system under sustained single assigns for N minutes: each process's memory slope,
    /// nothing lost.
    Soak(soak::SoakBenchArgs),
    /// The scheduler's lifecycle work over simulated days (a million assignments with due dates
    /// over a year, reminders, validity): reminders, renewals and expiries per second, Postgres
    /// time per event against a plain indexed scan, nothing lost or twice; the attention page.
    Lifecycle(lifecycle::LifecycleBenchArgs),
    /// Report, weekly aggregate and exports of a flow with a million assignments.
    Report(report::ReportBenchArgs),
    /// Two scheduler processes, one killed with SIGKILL every few seconds and started again:
    /// every reminder, overdue mark, renewal and expiry (and its event) done exactly once.
    Schedulers(schedulers::SchedulersBenchArgs),
    /// An identity provider pushing users one SCIM request each, an enrollment rule assigning
    /// each: requests/s, latency, time to the last `flow.assigned` delivered, against `/v1/users`.
    Scim(scim::ScimBenchArgs),
    /// Deliver lifecycle events to local webhook endpoints: deliveries/s and commit-to-delivery latency.
    Webhooks(webhooks::WebhookBenchArgs),
    /// The plain synchronous handler `bench assign` measures as its baseline (run by it).
    #[command(hide = true)]
    PlainServer(plain::PlainServerArgs),
}

/// `flowctl bench ...`.
pub async fn run(core: &CoreConfig, command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Assign(args) => assign::run(core, args).await,
        BenchCommand::Broker(args) => broker::run(core, args).await,
        BenchCommand::Compliance(args) => compliance::run(core, args).await,
        BenchCommand::Csv(args) => csv_import::run(args),
        BenchCommand::Detailed(args) => detailed::run(core, args).await,
        BenchCommand::Fairness(args) => fairness::run(core, args).await,
        BenchCommand::Lifecycle(args) => lifecycle::run(core, args).await,
        BenchCommand::Soak(args) => soak::run(core, args).await,
        BenchCommand::Report(args) => report::run(core, args).await,
        BenchCommand::Schedulers(args) => schedulers::run(core, args).await,
        BenchCommand::Scim(args) => scim::run(core, args).await,
        BenchCommand::Ingest(args) => ingest::run(core, args).await,
        BenchCommand::Webhooks(args) => webhooks::run(core, args).await,
        BenchCommand::PlainServer(args) => plain::run(core, args).await,
    }
}
