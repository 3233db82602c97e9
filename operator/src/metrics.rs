//! Prometheus metrics of the operator: reconciles, errors, reconcile duration and bots by
//! readiness. Shared by the controller (writes) and the web server (encodes).

use std::collections::BTreeMap;

use parking_lot::Mutex;
use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

/// Label of the error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// The error variant (`Apply`, `Dereference`, `InvalidSpec`, …).
    pub reason: String,
}

/// Label of the drift-repair counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// The child's kind (`NetworkPolicy`, `Deployment`, …).
    pub kind: String,
}

/// Label of the readiness gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadinessLabels {
    /// `true` or `false`.
    pub ready: String,
}

/// All operator metrics.
pub struct Metrics {
    registry: Registry,
    /// Reconciles started.
    pub reconciles: Counter,
    /// Reconcile failures by reason.
    pub errors: Family<ErrorLabels, Counter>,
    /// Reconcile duration in seconds.
    pub duration: Histogram,
    /// Bots by readiness.
    pub bots: Family<ReadinessLabels, Gauge>,
    /// Every HTTP request the operator's API client sent (reads, writes, watches).
    pub api_requests: Counter,
    /// Children written (server-side apply or repair); an unchanged child is not written.
    pub child_writes: Counter,
    /// Children restored whole after someone else changed them, by kind.
    pub drift_repairs: Family<KindLabels, Counter>,
    /// Bytes the allocator has handed out and holds resident (set by the binary, which
    /// chooses the allocator).
    pub heap_allocated: Gauge,
    pub heap_resident: Gauge,
    readiness: Mutex<BTreeMap<String, bool>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("saint_operator");
        let reconciles = Counter::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let duration = Histogram::new([0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]);
        let bots = Family::<ReadinessLabels, Gauge>::default();
        registry.register(
            "reconciles",
            "SaintBot reconciles started",
            reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "SaintBot reconciles that failed, by reason",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of SaintBot reconciles",
            duration.clone(),
        );
        registry.register("bots", "SaintBots by Ready condition", bots.clone());
        let api_requests = Counter::default();
        registry.register(
            "api_requests",
            "HTTP requests sent to the Kubernetes API server",
            api_requests.clone(),
        );
        let child_writes = Counter::default();
        registry.register(
            "child_writes",
            "Children written to the API server (unchanged children are not)",
            child_writes.clone(),
        );
        let drift_repairs = Family::<KindLabels, Counter>::default();
        registry.register(
            "drift_repairs",
            "Children restored whole after another field manager changed them, by kind",
            drift_repairs.clone(),
        );
        let heap_allocated = Gauge::default();
        registry.register(
            "heap_allocated_bytes",
            "Bytes of memory the operator has allocated and not freed",
            heap_allocated.clone(),
        );
        let heap_resident = Gauge::default();
        registry.register(
            "heap_resident_bytes",
            "Bytes of physical memory the allocator holds (allocated, plus its free pages not yet returned)",
            heap_resident.clone(),
        );
        Self {
            registry,
            reconciles,
            errors,
            duration,
            bots,
            api_requests,
            child_writes,
            drift_repairs,
            heap_allocated,
            heap_resident,
            readiness: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Metrics {
    /// Counts a failure.
    pub fn record_error(&self, reason: &str) {
        self.errors
            .get_or_create(&ErrorLabels {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Counts one child restored after drift.
    pub fn record_drift_repair(&self, kind: &str) {
        self.drift_repairs
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }

    /// Records whether the bot `key` (`namespace/name`) is ready, and refreshes the gauge.
    pub fn record_readiness(&self, key: String, ready: bool) {
        let mut readiness = self.readiness.lock();
        readiness.insert(key, ready);
        self.refresh_bots(&readiness);
    }

    /// Drops bots for which `exists` (given `namespace/name`) is false, so a deleted
    /// bot stops being counted (deletions trigger no reconcile that could say so).
    pub fn retain_bots(&self, exists: impl Fn(&str) -> bool) {
        let mut readiness = self.readiness.lock();
        let before = readiness.len();
        readiness.retain(|key, _| exists(key));
        if readiness.len() != before {
            self.refresh_bots(&readiness);
        }
    }

    fn refresh_bots(&self, readiness: &BTreeMap<String, bool>) {
        let ready_count = readiness.values().filter(|ready| **ready).count() as i64;
        self.bots
            .get_or_create(&ReadinessLabels {
                ready: "true".to_string(),
            })
            .set(ready_count);
        self.bots
            .get_or_create(&ReadinessLabels {
                ready: "false".to_string(),
            })
            .set(readiness.len() as i64 - ready_count);
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("encoding into a String cannot fail");
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gauge(metrics: &Metrics, ready: &str) -> i64 {
        metrics
            .bots
            .get_or_create(&ReadinessLabels {
                ready: ready.to_string(),
            })
            .get()
    }

    #[test]
    fn a_deleted_bot_stops_being_counted() {
        let metrics = Metrics::default();
        metrics.record_readiness("acme/a".into(), true);
        metrics.record_readiness("acme/b".into(), false);
        metrics.record_readiness("acme/c".into(), true);
        assert_eq!((gauge(&metrics, "true"), gauge(&metrics, "false")), (2, 1));
        metrics.retain_bots(|key| key != "acme/a" && key != "acme/b");
        assert_eq!((gauge(&metrics, "true"), gauge(&metrics, "false")), (1, 0));
        // Recorded again (re-created), it counts again.
        metrics.record_readiness("acme/a".into(), false);
        assert_eq!((gauge(&metrics, "true"), gauge(&metrics, "false")), (1, 1));
    }
}
