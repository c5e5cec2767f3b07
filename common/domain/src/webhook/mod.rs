//! The webhook rules that need no infrastructure: what an endpoint's fields may hold, Standard
//! Webhooks signatures and the retry schedule of deliveries. The secret vault and the address policy are in `flow-common`.

pub mod endpoint;
pub mod retry;
pub mod signing;
