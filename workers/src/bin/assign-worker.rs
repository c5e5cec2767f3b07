//! `assign-worker`: persists assign commands from RabbitMQ into Postgres.

/// mimalloc: the request path allocates many short-lived buffers, which glibc's allocator
/// handles markedly slower under contention.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    flow_workers::runtime::main::<flow_workers::assign::AssignWorkerConfig>().await
}
