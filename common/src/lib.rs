//! Shared by every Flow binary: configuration, telemetry, ids, domain types and their validation,
//! SQL access per aggregate, the AMQP topology and message types.

pub mod amqp;
pub mod config;
pub mod db;
#[macro_use]
pub mod domain;
pub mod duration;
pub mod events;
pub mod export_store;
pub mod ids;
pub mod messages;
pub mod ops;
pub mod recurrence;
pub mod report;
pub mod shutdown;
pub mod telemetry;
pub mod webhook;
