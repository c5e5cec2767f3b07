//! Logging setup (human-readable text by default, JSON lines with `LOG_FORMAT=json`) and the
//! process's Prometheus recorder.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Installs the global tracing subscriber. `RUST_LOG` filters (default `info`); `LOG_FORMAT=json`
/// switches to one JSON object per line. Calling it twice is harmless (tests do).
pub fn init() {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,lapin=warn"));
    let json = std::env::var("LOG_FORMAT").is_ok_and(|format| format.eq_ignore_ascii_case("json"));
    let registry = tracing_subscriber::registry().with(filter);
    let result = if json {
        registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(true),
            )
            .try_init()
    } else {
        registry.with(fmt::layer()).try_init()
    };
    // Already installed (several binaries in one process, or tests): keep the first.
    drop(result);
}

/// Histogram buckets by unit, chosen by the metric name's suffix (the exporter prefers a
/// `Full` match, then suffixes in name order, so `_lag_seconds` wins over `_seconds`).
const BUCKETS: &[(&str, &[f64])] = &[
    // Latencies: half a millisecond to ten seconds.
    (
        "_seconds",
        &[
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ],
    ),
    // Lags that include retries: ten milliseconds to two days.
    (
        "_lag_seconds",
        &[
            0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1_800.0, 3_600.0,
            7_200.0, 21_600.0, 43_200.0, 86_400.0, 172_800.0,
        ],
    ),
    // Counts of things in a batch: one to ten thousand.
    (
        "_items",
        &[
            1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1_000.0, 2_000.0, 5_000.0,
            10_000.0,
        ],
    ),
    // Sizes: a kilobyte to a gigabyte.
    (
        "_bytes",
        &[
            1_024.0,
            16_384.0,
            131_072.0,
            1_048_576.0,
            8_388_608.0,
            67_108_864.0,
            268_435_456.0,
            1_073_741_824.0,
        ],
    ),
];

/// Whole-job durations that run far past ten seconds (exports): a tenth of a second to an hour.
const JOB_SECONDS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1_800.0, 3_600.0,
];

/// Histograms measured in [`JOB_SECONDS`].
const JOB_HISTOGRAMS: &[&str] = &["flow_export_seconds"];

/// The process-wide Prometheus recorder, installed on first use, with buckets by unit, a
/// `flow_build_info` gauge and the standard `process_*` metrics (refreshed by
/// [`render_metrics`]).
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = bucketed_builder()
                .map(PrometheusBuilder::build_recorder)
                .unwrap_or_else(|error| {
                    tracing::error!(%error, "invalid histogram buckets; using summaries");
                    PrometheusBuilder::new().build_recorder()
                });
            let handle = recorder.handle();
            // Another recorder may already be installed (tests embedding several binaries).
            drop(metrics::set_global_recorder(recorder));
            metrics::describe_gauge!(
                "flow_build_info",
                "Always 1; the labels say which build of Flow this process runs."
            );
            metrics::gauge!(
                "flow_build_info",
                "version" => env!("CARGO_PKG_VERSION"),
                "commit" => option_env!("FLOW_GIT_COMMIT").unwrap_or("unknown"),
            )
            .set(1.0);
            process_collector().describe();
            handle
        })
        .clone()
}

/// The Prometheus text exposition of every metric of this process, process metrics refreshed.
pub fn render_metrics() -> String {
    let handle = metrics_handle();
    process_collector().collect();
    handle.render()
}

fn process_collector() -> &'static metrics_process::Collector {
    static COLLECTOR: OnceLock<metrics_process::Collector> = OnceLock::new();
    COLLECTOR.get_or_init(metrics_process::Collector::default)
}

fn bucketed_builder() -> Result<PrometheusBuilder, BuildError> {
    let mut builder = PrometheusBuilder::new();
    for name in JOB_HISTOGRAMS {
        builder = builder.set_buckets_for_metric(Matcher::Full((*name).to_owned()), JOB_SECONDS)?;
    }
    for (suffix, buckets) in BUCKETS {
        builder = builder.set_buckets_for_metric(Matcher::Suffix((*suffix).to_owned()), buckets)?;
    }
    Ok(builder)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposition(record: impl FnOnce()) -> String {
        let recorder = bucketed_builder().expect("valid buckets").build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, record);
        handle.render()
    }

    #[test]
    fn histograms_get_the_buckets_of_their_unit() {
        let text = exposition(|| {
            metrics::histogram!("flow_test_request_seconds").record(0.002);
            metrics::histogram!("flow_test_delivery_lag_seconds").record(7_200.0);
            metrics::histogram!("flow_test_batch_items").record(300.0);
            metrics::histogram!("flow_export_seconds").record(120.0);
        });
        for expected in [
            "flow_test_request_seconds_bucket{le=\"0.0005\"} 0",
            "flow_test_request_seconds_bucket{le=\"0.0025\"} 1",
            "flow_test_delivery_lag_seconds_bucket{le=\"3600\"} 0",
            "flow_test_delivery_lag_seconds_bucket{le=\"7200\"} 1",
            "flow_test_batch_items_bucket{le=\"200\"} 0",
            "flow_test_batch_items_bucket{le=\"500\"} 1",
            "flow_export_seconds_bucket{le=\"60\"} 0",
            "flow_export_seconds_bucket{le=\"120\"} 1",
        ] {
            assert!(text.contains(expected), "missing {expected} in\n{text}");
        }
        assert!(
            !text.contains("flow_test_delivery_lag_seconds_bucket{le=\"0.0005\"}"),
            "lags do not get latency buckets"
        );
    }
}
