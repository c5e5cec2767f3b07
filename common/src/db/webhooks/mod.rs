//! Webhook endpoints (per organization) and deliveries: one row per event and endpoint, which is
//! the delivery job itself (claimed with a lease, retried on a schedule), and one row per attempt.
//! Split by caller: [`endpoints`] (the API's and dashboard's endpoint management), [`fan_out`]
//! (the webhook-worker's fan-out, claims and leases), [`outcomes`] (its recorder: attempts and
//! endpoint health) and [`log`] (the delivery log the API and the dashboard read and act on).

pub mod endpoints;
pub mod fan_out;
pub mod log;
pub mod outcomes;
