//! The webhook rules that need no infrastructure: Standard Webhooks signatures and the retry
//! schedule of deliveries. The secret vault and the address policy are in `flow-common`.

pub mod retry;
pub mod signing;
