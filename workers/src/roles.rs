//! The registry of worker roles: every role this crate has, with what `flowctl up`, the deploy
//! files and the docs know of it. `flowctl up` runs the roles of [`ALL`] and takes their names
//! as `--only` values; each role's binary serves its ops endpoints on its own default address.
//!
//! A new role is a module whose settings are made a [`Role`] with `role!`, a binary under
//! `src/bin/` (a `[[bin]]` of this crate's manifest) and a line in [`ALL`]. What the compiler
//! cannot see is checked by tests against this list: the binaries of the manifest, the
//! Dockerfile, docker-compose.yml and the Prometheus configuration (tests/it/compose.rs), and
//! the README's and docs' tables of roles and ops ports (tests/it/roles.rs).

use std::future::Future;
use std::pin::Pin;

use tokio_util::sync::CancellationToken;

pub use crate::runtime::Shared;
use crate::runtime::{self, Role};

/// One worker role as a process that runs several (`flowctl up`), the deploy files and the docs
/// know it.
#[derive(Debug)]
pub struct WorkerRole {
    /// The role's name, which is also its binary's (`assign-worker`).
    pub name: &'static str,
    /// What it does, in a few words (the help of its `--only` value).
    pub description: &'static str,
    /// The binary's default ops address (`METRICS_BIND`).
    pub ops_address: &'static str,
    prepare: fn(&Shared, CancellationToken) -> Prepared,
}

/// A role's work, started when first polled.
pub type Work = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

/// A role with its settings read, not started: [`Prepared::start`] makes its work, which counts
/// in the process's readiness from then on (not ready until it has connected).
pub struct Prepared(Box<dyn FnOnce() -> Work + Send>);

impl Prepared {
    /// The role's work, to spawn now.
    pub fn start(self) -> Work {
        (self.0)()
    }
}

impl WorkerRole {
    /// The entry of the role whose settings are `R`.
    const fn of<R: Role>() -> Self {
        Self {
            name: R::NAME,
            description: R::DESCRIPTION,
            ops_address: R::OPS_ADDRESS,
            prepare: prepare::<R>,
        }
    }

    /// Reads the role's settings from the environment now (a setting that does not parse ends
    /// the process here, as in the role's binary), with what `shared` gives; the work runs until
    /// `shutdown` once started and polled.
    pub fn prepare(&self, shared: &Shared, shutdown: CancellationToken) -> Prepared {
        (self.prepare)(shared, shutdown)
    }
}

fn prepare<R: Role>(shared: &Shared, shutdown: CancellationToken) -> Prepared {
    let mut config: R = flow_common::config::from_env();
    config.share(shared);
    Prepared(Box::new(move || Box::pin(runtime::run(config, shutdown))))
}

/// Every worker role, in the order `flowctl up` starts them.
pub static ALL: [WorkerRole; 5] = [
    WorkerRole::of::<crate::assign::AssignWorkerConfig>(),
    WorkerRole::of::<crate::report::ReportWorkerConfig>(),
    WorkerRole::of::<crate::relay::RelayConfig>(),
    WorkerRole::of::<crate::scheduler::SchedulerConfig>(),
    WorkerRole::of::<crate::webhook::WebhookWorkerConfig>(),
];

/// The role named `name`.
pub fn named(name: &str) -> Option<&'static WorkerRole> {
    ALL.iter().find(|role| role.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_have_distinct_names_and_ops_addresses_beside_the_apis() {
        let mut names: Vec<&str> = ALL.iter().map(|role| role.name).collect();
        let mut addresses: Vec<&str> = ALL.iter().map(|role| role.ops_address).collect();
        names.sort_unstable();
        names.dedup();
        addresses.sort_unstable();
        addresses.dedup();
        assert_eq!(names.len(), ALL.len(), "one entry per role");
        assert_eq!(addresses.len(), ALL.len(), "a port of its own per role");
        for role in &ALL {
            let address: std::net::SocketAddr = role.ops_address.parse().expect(role.name);
            assert_ne!(address.port(), 9100, "{}: the API's ops port", role.name);
            assert!(
                address.ip().is_loopback(),
                "{}: private by default",
                role.name
            );
            assert_eq!(named(role.name).map(|found| found.name), Some(role.name));
        }
    }
}
