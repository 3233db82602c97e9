//! Prometheus metrics: proxy decisions, refused connections, open tunnels, live keys and
//! reloads.
//!
//! In-memory counters only; `server` exposes them over HTTP.

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub cli: String,
    pub decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
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
    pub requests: Family<RequestLabels, Counter>,
    pub refused_connections: Family<ReasonLabels, Counter>,
    pub open_tunnels: Gauge,
    pub live_keys: Gauge,
    pub reloads: Family<ReloadLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("porter");
        let requests = Family::<RequestLabels, Counter>::default();
        let refused_connections = Family::<ReasonLabels, Counter>::default();
        let open_tunnels = Gauge::default();
        let live_keys = Gauge::default();
        let reloads = Family::<ReloadLabels, Counter>::default();
        registry.register(
            "requests",
            "Proxy decisions by credential and decision (allowed, refused, held, answered, upstream_error)",
            requests.clone(),
        );
        registry.register(
            "refused_connections",
            "Proxy connections closed before a tunnel opened, by reason",
            refused_connections.clone(),
        );
        registry.register("open_tunnels", "Tunnels open now", open_tunnels.clone());
        registry.register(
            "live_keys",
            "Proxy keys live now (running sandbox commands)",
            live_keys.clone(),
        );
        registry.register(
            "reloads",
            "Registry reloads by result (ok, error, unreadable)",
            reloads.clone(),
        );
        Self {
            registry,
            requests,
            refused_connections,
            open_tunnels,
            live_keys,
            reloads,
        }
    }
}

impl Metrics {
    /// Counts one proxy decision.
    pub fn request(&self, cli: &str, decision: &str) {
        self.requests
            .get_or_create(&RequestLabels {
                cli: cli.to_owned(),
                decision: decision.to_owned(),
            })
            .inc();
    }

    /// Counts one connection closed before its tunnel opened.
    pub fn refused_connection(&self, reason: &str) {
        self.refused_connections
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

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
        metrics.request("gh", "refused");
        metrics.refused_connection("no_connect");
        metrics.open_tunnels.inc();
        let text = metrics.render();
        assert!(
            text.contains(r#"porter_requests_total{cli="gh",decision="refused"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"porter_refused_connections_total{reason="no_connect"} 1"#),
            "{text}"
        );
        assert!(text.contains("porter_open_tunnels 1"), "{text}");
    }
}
