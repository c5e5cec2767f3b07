//! The safeguards of webhook delivery shared by the API and the webhook-worker: endpoint secrets
//! sealed at rest, and the address policy that keeps endpoints off internal networks. Signatures
//! and the retry schedule are `flow_domain::webhook`'s.

pub mod address;
pub mod vault;
