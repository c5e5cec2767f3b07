//! Logging setup: human-readable text by default, JSON lines with `LOG_FORMAT=json`.

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

/// The process-wide Prometheus recorder, installed on first use.
pub fn metrics_handle() -> metrics_exporter_prometheus::PrometheusHandle {
    static HANDLE: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> =
        std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = metrics_exporter_prometheus::PrometheusBuilder::new()
                .set_buckets(&[
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0,
                ])
                .map(|builder| builder.build_recorder())
                .unwrap_or_else(|_| {
                    metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder()
                });
            let handle = recorder.handle();
            // Another recorder may already be installed (tests embedding several binaries).
            drop(metrics::set_global_recorder(recorder));
            handle
        })
        .clone()
}
