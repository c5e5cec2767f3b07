//! The webhook rules that need no infrastructure: what an endpoint's fields may hold, where a
//! delivery stands, Standard Webhooks signatures and the retry schedule of deliveries. The secret
//! vault and the address policy are in `flow-common`.

pub mod endpoint;
pub mod retry;
pub mod signing;

string_enum!(
    /// Where a delivery of an event to an endpoint stands.
    DeliveryStatus {
        /// Waiting for its next attempt.
        Pending => "pending",
        /// A webhook-worker is attempting it now.
        Delivering => "delivering",
        /// The endpoint answered 2xx. Final.
        Succeeded => "succeeded",
        /// Every attempt failed; it can be retried or recovered.
        Failed => "failed",
    }
);
