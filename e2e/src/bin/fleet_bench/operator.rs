//! The operator under measurement: started with the chart's arguments and a token of
//! the chart's ServiceAccount (like `ChartInstall::start_operator`), but keeping its pid
//! for the RSS sampler, and read through its `/metrics` counters.

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use saint_e2e::{
    Failure,
    chart::{self, ChartInstall},
};

/// The SaintBot reconciles the operator started.
pub const RECONCILES: &str = "saint_operator_reconciles";
/// Every HTTP request the operator's client sent.
pub const API_REQUESTS: &str = "saint_operator_api_requests";

/// A running operator process; SIGKILLed (and reaped) when dropped.
pub struct BenchOperator {
    child: Child,
    pub http_url: String,
    log_path: PathBuf,
}

/// The operator's allocator statistics (gauges, bytes).
pub const HEAP_ALLOCATED: &str = "saint_operator_heap_allocated_bytes";
pub const HEAP_RESIDENT: &str = "saint_operator_heap_resident_bytes";

/// SaintBot reconciles finished (the duration histogram observes each at its end).
pub const RECONCILE_DURATION: &str = "saint_operator_reconcile_duration_seconds";

/// The counters the bench reads; `api_requests` is `None` when the operator does
/// not export it, `finished` when it has no duration histogram.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Counters {
    pub reconciles: f64,
    pub finished: Option<f64>,
    pub api_requests: Option<f64>,
    /// `saint_operator_heap_allocated_bytes` and `_resident_bytes`, when exported.
    pub heap_allocated: Option<f64>,
    pub heap_resident: Option<f64>,
}

/// The sum of family `name`'s samples named `name` + `suffix` (any labels), or `None`
/// when the exposition does not mention the family at all. A family declared but never
/// observed (only `# TYPE` lines) reads as 0.
fn family_sum(exposition: &str, name: &str, suffix: &str) -> Option<f64> {
    let sample_name = format!("{name}{suffix}");
    let mut mentioned = false;
    let mut sum = 0.0;
    for line in exposition.lines() {
        if let Some(comment) = line.strip_prefix('#') {
            mentioned |= comment.split_whitespace().nth(1) == Some(name);
            continue;
        }
        let series = line.split([' ', '{']).next().unwrap_or_default();
        if series == sample_name {
            mentioned = true;
            sum += line
                .rsplit(' ')
                .next()
                .and_then(|value| value.parse::<f64>().ok())
                .unwrap_or(0.0);
        }
    }
    mentioned.then_some(sum)
}

/// The value of counter `name` (its `_total` samples summed over labels).
pub fn counter(exposition: &str, name: &str) -> Option<f64> {
    family_sum(exposition, name, "_total")
}

/// The number of observations of histogram `name` (its `_count` samples).
pub fn histogram_count(exposition: &str, name: &str) -> Option<f64> {
    family_sum(exposition, name, "_count")
}

impl BenchOperator {
    /// Starts `binary` with the chart's arguments (listen address moved to a free
    /// loopback port), `kubeconfig` (the chart ServiceAccount's token) and the Lease
    /// identity `identity`, logging to `log_path` (appended, so restarts share a log).
    pub fn start(
        binary: &Path,
        install: &ChartInstall,
        kubeconfig: &Path,
        identity: &str,
        log_path: PathBuf,
    ) -> Result<Self, Failure> {
        let port = chart::free_port()?;
        let arguments: Vec<String> = install
            .operator_arguments
            .iter()
            .map(|argument| {
                if argument.starts_with("--listen-address") {
                    format!("--listen-address=127.0.0.1:{port}")
                } else {
                    argument.clone()
                }
            })
            .collect();
        let log = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|error| {
                Failure::message(format!(
                    "failed to open operator log {}: {error}",
                    log_path.display()
                ))
            })?;
        let log_for_stderr = log.try_clone()?;
        let child = Command::new(binary)
            .args(&arguments)
            .env("KUBECONFIG", kubeconfig)
            // `SAINT_FLEET_RUST_LOG` raises the operator's log level for a diagnosis.
            .env(
                "RUST_LOG",
                std::env::var("SAINT_FLEET_RUST_LOG").unwrap_or_else(|_| "info".to_string()),
            )
            .env("POD_NAME", identity)
            .env("POD_NAMESPACE", &install.namespace)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_for_stderr)
            .spawn()
            .map_err(|error| {
                Failure::message(format!("failed to start {}: {error}", binary.display()))
            })?;
        Ok(Self {
            child,
            http_url: format!("http://127.0.0.1:{port}"),
            log_path,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL: a crash, not a graceful exit.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Fails with the log's tail if the process has exited.
    pub fn check_alive(&mut self) -> Result<(), Failure> {
        match self.child.try_wait() {
            Ok(Some(status)) => Err(Failure::message(format!(
                "the operator exited with {status}; last lines of {}:\n{}",
                self.log_path.display(),
                self.log_tail(20)
            ))),
            _ => Ok(()),
        }
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The counters now, or why `/metrics` could not be read.
    pub async fn counters(&self) -> Result<Counters, String> {
        let exposition = chart::http_get(&self.http_url, "/metrics").await?;
        let reconciles = counter(&exposition, RECONCILES)
            .ok_or_else(|| format!("/metrics of {} has no {RECONCILES}", self.http_url))?;
        Ok(Counters {
            reconciles,
            finished: histogram_count(&exposition, RECONCILE_DURATION),
            api_requests: counter(&exposition, API_REQUESTS),
            heap_allocated: family_sum(&exposition, HEAP_ALLOCATED, ""),
            heap_resident: family_sum(&exposition, HEAP_RESIDENT, ""),
        })
    }
}

impl Drop for BenchOperator {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPOSITION: &str = "\
# HELP saint_operator_reconciles SaintBot reconciles started.
# TYPE saint_operator_reconciles counter
saint_operator_reconciles_total 1042
# HELP saint_operator_api_requests Requests sent to the API server.
# TYPE saint_operator_api_requests counter
saint_operator_api_requests_total{verb=\"get\"} 10
saint_operator_api_requests_total{verb=\"patch\"} 32
# EOF
";

    #[test]
    fn reads_a_plain_counter() {
        assert_eq!(counter(EXPOSITION, RECONCILES), Some(1042.0));
    }

    #[test]
    fn sums_a_counter_over_its_labels() {
        assert_eq!(counter(EXPOSITION, API_REQUESTS), Some(42.0));
    }

    #[test]
    fn reads_a_histogram_count() {
        let exposition = "# TYPE saint_operator_reconcile_duration_seconds histogram\n\
saint_operator_reconcile_duration_seconds_sum 3.5\n\
saint_operator_reconcile_duration_seconds_count 7\n\
saint_operator_reconcile_duration_seconds_bucket{le=\"0.01\"} 2\n";
        assert_eq!(histogram_count(exposition, RECONCILE_DURATION), Some(7.0));
    }

    #[test]
    fn a_counter_declared_but_never_incremented_is_zero() {
        let exposition = "# TYPE saint_operator_api_requests counter\n# EOF\n";
        assert_eq!(counter(exposition, API_REQUESTS), Some(0.0));
    }

    #[test]
    fn a_missing_counter_is_none() {
        let exposition =
            "# TYPE saint_operator_reconciles counter\nsaint_operator_reconciles_total 3\n";
        assert_eq!(counter(exposition, API_REQUESTS), None);
    }
}
