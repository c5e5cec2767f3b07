//! `flowctl`: the operator tool. Migrations, organizations, keys, users and flows, demo data, the
//! whole stack in one process for local use, dead letters, and benchmarks. Each command is a
//! library function so the tests can run it.

pub mod accounts;
pub mod admin;
pub mod bench;
pub mod demo;
pub mod dlq;
pub mod up;
