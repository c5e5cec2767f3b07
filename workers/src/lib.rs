//! Flow's background workers. Each role's module holds its own work and its settings, which
//! implement [`runtime::Role`]; [`runtime`] holds what every role runs on. Each binary under
//! `src/bin/` is [`runtime::main`] over one role, and the tests and `flowctl up` start roles with
//! [`runtime::run`]. [`roles::ALL`] lists every role: `flowctl up` runs them from it, and the
//! deploy files and docs are checked against it.

pub mod assign;
pub mod consumer;
pub mod dead_letters;
pub mod gauges;
pub mod relay;
pub mod report;
pub mod roles;
pub mod runtime;
pub mod scheduler;
pub mod webhook;
