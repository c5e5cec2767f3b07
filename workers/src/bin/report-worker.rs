//! `report-worker`: generates report exports (CSV, Excel, PDF) into the export store.

/// mimalloc: exports allocate many short-lived buffers.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    flow_workers::runtime::main::<flow_workers::report::ReportWorkerConfig>().await
}
