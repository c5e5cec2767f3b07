//! The infrastructure every Flow binary shares: configuration, telemetry, SQL access per
//! aggregate, the AMQP topology, the export store, the operations endpoints, shutdown, the
//! runtime of a long-running process (supervised tasks, Postgres wake-ups, backoff), and the
//! safeguards of webhook delivery. What these carry (ids, domain types, messages, events) is
//! `flow_domain`'s; what is decided with them (the operations, the report and enrollment
//! engines) is the application layer's, `flow_app`.

pub mod amqp;
pub mod config;
pub mod db;
pub mod export_store;
pub mod ops;
pub mod redact;
pub mod runtime;
pub mod shutdown;
pub mod telemetry;
pub mod webhook;
