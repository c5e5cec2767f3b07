//! Logging setup (human-readable text by default, JSON lines with `LOG_FORMAT=json`), trace
//! context across processes (W3C `traceparent`, optional OTLP export), and the process's
//! Prometheus recorder.

use std::collections::HashMap;
use std::io::IsTerminal as _;
use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use opentelemetry::trace::{TraceContextExt, TracerProvider};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::FilterFn;
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Installs the global tracing subscriber. `RUST_LOG` filters (default `info`); `LOG_FORMAT=json`
/// switches to one JSON object per line. Text is coloured only when stdout is a terminal. Spans carry W3C trace context (see [`continue_trace`]);
/// with `OTEL_EXPORTER_OTLP_ENDPOINT` set they are also exported over OTLP/HTTP (service name from
/// `OTEL_SERVICE_NAME`). Libraries' events that would log a request's raw path are dropped
/// ([`hide_raw_paths`]). Calling it twice is harmless (tests do).
pub fn init() {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,lapin=warn"));
    let json = std::env::var("LOG_FORMAT").is_ok_and(|format| format.eq_ignore_ascii_case("json"));
    let traces = tracing_opentelemetry::layer().with_tracer(tracer_provider().tracer("flow"));
    let registry = tracing_subscriber::registry()
        .with(hide_raw_paths())
        .with(filter)
        .with(traces);
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
        // Colours only for a person at a terminal: piped or redirected (a file, `docker logs`,
        // a CI log) the lines stay plain text, with no escape codes between the words.
        registry
            .with(fmt::layer().with_ansi(std::io::stdout().is_terminal()))
            .try_init()
    };
    // Already installed (several binaries in one process, or tests): keep the first.
    drop(result);
}

/// A filter that drops the events of libraries that log a request's raw path, whatever
/// `RUST_LOG` says: a path can carry a secret (the one-time token of a dashboard sign-in link),
/// and our own request span names the route template instead. Today that is tower-http's CSRF
/// layer, which logs `uri` at trace level.
pub fn hide_raw_paths() -> FilterFn<impl Fn(&tracing::Metadata<'_>) -> bool> {
    tracing_subscriber::filter::filter_fn(|metadata| {
        !(metadata.target().starts_with("tower_http::csrf")
            && *metadata.level() == tracing::Level::TRACE)
    })
}

/// The process's tracer provider: it gives spans their trace and span ids, and exports them over
/// OTLP only when `OTEL_EXPORTER_OTLP_ENDPOINT` is set. Installs the W3C trace-context propagator.
fn tracer_provider() -> &'static SdkTracerProvider {
    static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();
    PROVIDER.get_or_init(|| {
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        let mut builder = SdkTracerProvider::builder();
        if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() {
            // The exporter reads the endpoint (and OTEL_EXPORTER_OTLP_HEADERS...) itself.
            match opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .build()
            {
                Ok(exporter) => builder = builder.with_batch_exporter(exporter),
                Err(error) => eprintln!("OTLP trace export disabled: {error}"),
            }
        }
        let provider = builder.build();
        opentelemetry::global::set_tracer_provider(provider.clone());
        provider
    })
}

/// Sends the spans still buffered to the OTLP endpoint (binaries call it on the way out).
pub fn flush_traces() {
    drop(tracer_provider().force_flush());
}

/// Header carrying W3C trace context, over HTTP and in AMQP message headers.
pub const TRACEPARENT: &str = "traceparent";

/// The W3C `traceparent` of `span` (`00-<trace id>-<span id>-<flags>`), when it has a valid
/// context.
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    let mut carrier = HashMap::new();
    let context = span.context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut carrier);
    });
    carrier.remove(TRACEPARENT)
}

/// The `traceparent` of the current span (what a published message should carry).
pub fn current_traceparent() -> Option<String> {
    traceparent(&tracing::Span::current())
}

/// Makes `span` a child of the remote span named by `traceparent` (from an HTTP header or an
/// AMQP message), so the trace continues across the process boundary. A missing or malformed
/// header leaves `span` the root of a new trace.
pub fn continue_trace(span: &tracing::Span, traceparent: Option<&str>) {
    let Some(traceparent) = traceparent else {
        return;
    };
    let carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
    let parent =
        opentelemetry::global::get_text_map_propagator(|propagator| propagator.extract(&carrier));
    if parent.span().span_context().is_valid() {
        drop(span.set_parent(parent));
    }
}

/// The trace id of `span` (32 hex digits), for logs and tests.
pub fn trace_id(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
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

/// How often the recorder's upkeep runs: it folds the histogram samples recorded since into their
/// buckets and frees them. The exporter's own default (`PrometheusBuilder::upkeep_timeout`, which
/// only applies to the recorders it serves itself).
pub const METRICS_UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The process-wide Prometheus recorder, installed on first use, with buckets by unit, a
/// `flow_build_info` gauge and the standard `process_*` metrics (refreshed by
/// [`render_metrics`]). Installing it starts its upkeep ([`METRICS_UPKEEP_INTERVAL`]) on a thread
/// of its own: a recorder built with `build_recorder` keeps every histogram sample until someone
/// runs the upkeep or renders `/metrics`, so a process nobody scrapes would grow without end.
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
            spawn_upkeep(handle.clone());
            handle
        })
        .clone()
}

/// Runs the recorder's upkeep every [`METRICS_UPKEEP_INTERVAL`] for the life of the process. A
/// plain thread rather than a task, so it runs whatever runtime (or none) installed the recorder.
fn spawn_upkeep(handle: PrometheusHandle) {
    let spawned = std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(METRICS_UPKEEP_INTERVAL);
                handle.run_upkeep();
            }
        });
    if let Err(error) = spawned {
        tracing::error!(%error, "could not start the metrics upkeep; histogram samples are kept until /metrics is scraped");
    }
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

    #[test]
    fn a_span_continues_the_trace_of_a_traceparent_and_hands_it_on() {
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(tracer_provider().tracer("test")));
        tracing::subscriber::with_default(subscriber, || {
            let remote = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
            let span = tracing::info_span!("handling");
            continue_trace(&span, Some(remote));
            assert_eq!(
                trace_id(&span).as_deref(),
                Some("4bf92f3577b34da6a3ce929d0e0e4736")
            );
            let handed_on = span.in_scope(current_traceparent).expect("a traceparent");
            assert!(
                handed_on.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
                "{handed_on}"
            );
            assert!(
                !handed_on.contains("00f067aa0ba902b7"),
                "a new span id: {handed_on}"
            );

            let fresh = tracing::info_span!("unrelated");
            continue_trace(&fresh, Some("not a traceparent"));
            let fresh_id = trace_id(&fresh).expect("a new trace");
            assert_ne!(fresh_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        });
    }

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
