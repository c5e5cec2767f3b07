//! Flow's background workers. Each binary under `src/bin/` is a thin `main` over one of these
//! modules' `run` functions, which the tests and `flowctl up` call too.

pub mod assign;
pub mod consumer;
pub mod dead_letters;
pub mod gauges;
pub mod relay;
pub mod report;
pub mod scheduler;
pub mod webhook;
