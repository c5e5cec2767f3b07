//! `webhook-worker`: delivers lifecycle events to customers' webhook endpoints, signed and retried.

/// mimalloc, as in every Flow binary: many short-lived buffers.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    flow_workers::runtime::main::<flow_workers::webhook::WebhookWorkerConfig>().await
}
