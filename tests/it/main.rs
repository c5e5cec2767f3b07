//! The end-to-end tests, one module per area, built into one test binary: the whole workspace is
//! linked once instead of once per file. `metrics_upkeep` stays its own binary (tests/tests/): it
//! counts the heap with a global allocator, which must see no other test's allocations.

mod accounts;
mod api_docs;
mod assign;
mod bad_input;
mod cluster;
mod compose;
mod control_plane;
mod dashboard;
mod dashboard_browser;
mod detailed_reports;
mod enrollment_rules;
mod erasure;
mod errors;
mod exactly_once;
mod export_fairness;
mod exports;
mod faults;
mod flowctl;
mod lanes;
mod lifecycle;
mod log_secrets;
mod ops;
mod outbox;
mod publish_batches;
mod read_write_limits;
mod reliability;
mod replicas;
mod reports;
mod request_timeout;
mod rollups;
mod rules_fairness;
mod schedules;
mod scim;
mod scim_limits;
mod sessions;
mod sign_in;
mod status_rule;
mod trace_context;
mod uploads;
mod webhook_endpoint_rules;
mod webhook_proxy;
mod webhook_recovery;
mod webhook_secrets;
mod webhooks;
