//! The process's metrics recorder frees its histogram samples with nobody scraping `/metrics`:
//! its upkeep folds them into their buckets every few seconds. Measured by the bytes the process
//! holds on its heap (this test binary's allocator counts them), not by timing.

use std::alloc::System;
use std::time::{Duration, Instant};

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Bytes allocated and not freed yet.
fn heap_bytes() -> i64 {
    let stats = ALLOCATOR.stats();
    i64::try_from(stats.bytes_allocated).unwrap_or(i64::MAX)
        - i64::try_from(stats.bytes_deallocated).unwrap_or(i64::MAX)
        + i64::try_from(stats.bytes_reallocated).unwrap_or(0)
}

#[test]
fn histogram_samples_do_not_stay_in_memory_when_nobody_scrapes() {
    const SAMPLES: usize = 1_000_000;
    let handle = flow_common::telemetry::metrics_handle();
    let histogram = metrics::histogram!("flow_test_upkeep_seconds");
    histogram.record(0.001);
    let before = heap_bytes();
    for index in 0..SAMPLES {
        histogram.record(f64::from(u32::try_from(index % 1_000).unwrap()) / 1e4);
    }
    let grown = heap_bytes() - before;
    // Each sample is an f64 kept in the recorder until upkeep: at least 8 bytes apiece.
    assert!(
        grown >= 8 * i64::try_from(SAMPLES).unwrap(),
        "the burst is held until the upkeep ({grown} bytes)"
    );
    // A process keeps recording now and then; the memory of the burst must be freed meanwhile.
    let deadline = Instant::now()
        + flow_common::telemetry::METRICS_UPKEEP_INTERVAL * 6
        + Duration::from_secs(10);
    loop {
        histogram.record(0.002);
        let held = heap_bytes() - before;
        if held < grown / 10 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{held} of the burst's {grown} bytes are still held, with nobody scraping"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Nothing was lost: every sample is in the histogram's buckets.
    let text = handle.render();
    let count = text
        .lines()
        .find_map(|line| line.strip_prefix("flow_test_upkeep_seconds_count "))
        .and_then(|count| count.trim().parse::<usize>().ok())
        .expect("the histogram's count");
    assert!(count > SAMPLES, "{count} samples counted");
}
