//! `scheduler`: marks overdue assignments and assigns recurring schedules.

/// mimalloc, as in every Flow binary: many short-lived buffers.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    flow_workers::runtime::main::<flow_workers::scheduler::SchedulerConfig>().await
}
