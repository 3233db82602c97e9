//! Traces over OpenTelemetry, off unless the bot config names a collector
//! (`telemetry.otlp`).
//!
//! The runtime opens three kinds of spans under [`TARGET`], following the GenAI
//! semantic conventions: `invoke_agent` per turn, `chat` per model call and
//! `execute_tool` per tool call. Their attributes name the bot, the person's slug and
//! role, the trigger, models, token counts and tools — never message text, tool input
//! or output, identities or secrets. Only spans of [`TARGET`] reach the exporter; the
//! log keeps its own filter.
//!
//! The exporter is built once at start (before the tokio runtime, as its batch
//! processor has a thread of its own); a changed `telemetry` section takes effect at
//! the next start.

use std::{collections::HashMap, path::Path, time::Duration};

use opentelemetry::{KeyValue, trace::TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::{
    Resource,
    trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider},
};
use saint_config::{BotConfig, OtlpConfig};
use tracing_subscriber::{Layer, filter::filter_fn, registry::LookupSpan};

/// The tracing target of the spans that are exported.
pub const TARGET: &str = "saint_otel";

/// Why the exporter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("telemetry.otlp.headersEnv.{header}: the variable {variable} is not set")]
    MissingHeader { header: String, variable: String },
    #[error("failed to build the OTLP exporter for {endpoint}")]
    Exporter {
        endpoint: String,
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// The running exporter; [`Telemetry::shutdown`] sends what is left.
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Sends the spans still queued and stops the exporter's thread.
    pub fn shutdown(self) {
        if let Err(error) = self.provider.shutdown_with_timeout(Duration::from_secs(5)) {
            tracing::warn!(%error, "failed to send the last spans to the OTLP collector");
        }
    }
}

/// The `telemetry.otlp` section of the bot file at `path`, if it parses and has one. A
/// file that does not parse is reported by the config load that follows, not here.
pub fn otlp_of_file(path: &Path) -> Option<(String, OtlpConfig)> {
    let text = std::fs::read_to_string(path).ok()?;
    let config: BotConfig = serde_json::from_str(&text).ok()?;
    let otlp = config.telemetry.otlp?;
    Some((config.bot.name, otlp))
}

/// The layer exporting this crate's spans to `otlp`, with the exporter that runs it.
pub fn layer<S>(
    bot: &str,
    otlp: &OtlpConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(impl Layer<S> + use<S>, Telemetry), TelemetryError>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    let mut headers = HashMap::new();
    for (header, variable) in &otlp.headers_env {
        let value = env(variable).ok_or_else(|| TelemetryError::MissingHeader {
            header: header.clone(),
            variable: variable.clone(),
        })?;
        headers.insert(header.clone(), value);
    }
    let endpoint = format!("{}/v1/traces", otlp.endpoint.trim_end_matches('/'));
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint.clone())
        .with_headers(headers)
        .with_timeout(Duration::from_secs(10))
        .build()
        .map_err(|source| TelemetryError::Exporter { endpoint, source })?;
    let batches = BatchConfigBuilder::default()
        .with_scheduled_delay(Duration::from_millis(otlp.batch_delay_millis.max(1)))
        .build();
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(batches)
        .build();
    let resource = Resource::builder()
        .with_service_name("saint-agent")
        .with_attribute(KeyValue::new("saint.bot", bot.to_string()))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("saint-agent");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        // Only the runtime's GenAI spans: channel and sandbox spans carry ids and
        // paths a trace backend has no business with.
        .with_filter(filter_fn(|metadata| metadata.target() == TARGET));
    Ok((layer, Telemetry { provider }))
}

/// The `gen_ai.provider.name` of a provider.
pub fn provider_name(provider: saint_config::ModelProvider) -> &'static str {
    match provider {
        saint_config::ModelProvider::Anthropic => "anthropic",
        saint_config::ModelProvider::Openai => "openai",
    }
}
