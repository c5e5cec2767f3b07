//! `outbox-relay`: publishes lifecycle events from the outbox to RabbitMQ.

/// mimalloc, as in every Flow binary: many short-lived buffers.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    flow_workers::runtime::main::<flow_workers::relay::RelayConfig>().await
}
