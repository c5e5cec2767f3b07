//! Webhook delivery rules shared by the API and the webhook-worker, one concept per module.

pub mod address;
pub mod retry;
pub mod signing;
pub mod vault;
