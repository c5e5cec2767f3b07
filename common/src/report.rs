//! Reports read from the database. What a report is about (its parameters, their validation, the
//! rules of its figures and its cost) is `flow_domain::report`'s; here is the [`engine`] that
//! assembles one.

pub mod engine;
