//! Prometheus metrics for calls, refusals, bytes and reloads.
//!
//! In-memory counters only; `server` exposes them over HTTP.

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub cli: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CliLabels {
    pub cli: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StreamLabels {
    pub cli: String,
    pub stream: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    pub file: String,
    pub result: String,
}

/// Every metric Porter exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub calls: Family<CallLabels, Counter>,
    pub duration: Family<CliLabels, Histogram>,
    pub bytes: Family<StreamLabels, Counter>,
    pub running: Gauge,
    pub reloads: Family<ReloadLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("porter");
        let calls = Family::<CallLabels, Counter>::default();
        let duration = Family::<CliLabels, Histogram>::new_with_constructor(|| {
            Histogram::new([0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0])
        });
        let bytes = Family::<StreamLabels, Counter>::default();
        let running = Gauge::default();
        let reloads = Family::<ReloadLabels, Counter>::default();
        registry.register("calls", "Calls by CLI and outcome", calls.clone());
        registry.register(
            "call_duration_seconds",
            "Call duration by CLI",
            duration.clone(),
        );
        registry.register("bytes", "Bytes streamed by CLI and stream", bytes.clone());
        registry.register("running_calls", "Calls running now", running.clone());
        registry.register(
            "reloads",
            "Registry and token file reloads by result (ok, error, unreadable)",
            reloads.clone(),
        );
        Self {
            registry,
            calls,
            duration,
            bytes,
            running,
            reloads,
        }
    }
}

impl Metrics {
    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a string cannot fail");
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendered_metrics_carry_the_labels_recorded() {
        let metrics = Metrics::default();
        metrics
            .calls
            .get_or_create(&CallLabels {
                cli: "gh".into(),
                outcome: "denied_args".into(),
            })
            .inc();
        metrics.running.inc();
        let text = metrics.render();
        assert!(
            text.contains(r#"porter_calls_total{cli="gh",outcome="denied_args"} 1"#),
            "{text}"
        );
        assert!(text.contains("porter_running_calls 1"), "{text}");
    }
}
