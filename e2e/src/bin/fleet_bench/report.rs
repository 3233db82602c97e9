//! What one fleet size measured, and the table (medians, ratios against the first size,
//! the targets) printed and written as JSON. Pure: no I/O but the caller's.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};

/// One cold restart of the operator (SIGKILL, start again).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Resync {
    /// From the new process's start to its first SaintBot reconcile.
    pub first_reconcile_seconds: Option<f64>,
    /// From the new process's start until `reconciles_total` (reconciles started)
    /// reached the bot count.
    pub all_started_seconds: Option<f64>,
    /// From the new process's start until as many reconciles had finished as there are
    /// bots (the reconcile duration histogram's count).
    pub all_finished_seconds: Option<f64>,
    /// Reconciles started when the resync ended (all finished, or the timeout).
    pub reconciles: f64,
    /// API requests sent by then.
    pub api_requests: Option<f64>,
    pub peak_rss_megabytes: f64,
}

/// Everything measured for one fleet size.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SizeResult {
    pub bots: usize,
    /// Secrets, Roles, Contacts and SaintBots (plus the shared Role).
    pub objects: usize,
    /// From the first create to the last create's answer.
    pub create_seconds: f64,
    /// From the first create until every bot's `status.observedGeneration` equals its
    /// `metadata.generation`; `None` when that never happened (see `outcome`).
    pub converged_seconds: Option<f64>,
    /// `converged`, or why not.
    pub outcome: String,
    /// Bots by their `Ready` reason when the wait ended (`none` without one). With no
    /// kubelet every healthy bot says `PodNotReady`; anything else means the API server
    /// refused part of the fleet and the figures measure retries.
    pub ready_reasons: BTreeMap<String, usize>,
    /// Median RSS over the steady window after convergence.
    pub steady_rss_megabytes: Option<f64>,
    /// Peak RSS from the operator's start through the steady window.
    pub peak_rss_megabytes: f64,
    /// At the end of the steady window: what the operator had allocated and not freed,
    /// and what its allocator held resident (`saint_operator_heap_*_bytes`).
    pub steady_heap_allocated_megabytes: Option<f64>,
    pub steady_heap_resident_megabytes: Option<f64>,
    /// SaintBot reconciles from the first create until convergence.
    pub convergence_reconciles: f64,
    /// API requests over the same span.
    pub convergence_api_requests: Option<f64>,
    /// SaintBot reconciles during the steady window (0 when the operator is idle).
    pub steady_reconciles: f64,
    pub resyncs: Vec<Resync>,
}

/// Median of the values (mean of the middle two for an even count); `None` if empty.
pub fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut sorted: Vec<f64> = values
        .into_iter()
        .filter(|value| value.is_finite())
        .collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    Some(if sorted.len().is_multiple_of(2) {
        f64::midpoint(sorted[middle - 1], sorted[middle])
    } else {
        sorted[middle]
    })
}

fn ratio(numerator: Option<f64>, denominator: Option<f64>) -> Option<f64> {
    match (numerator, denominator) {
        (Some(numerator), Some(denominator)) if denominator > 0.0 => Some(numerator / denominator),
        _ => None,
    }
}

impl SizeResult {
    /// Only for a size that converged: a stopped size's counts cover an unfinished run.
    pub fn convergence_requests_per_reconcile(&self) -> Option<f64> {
        self.converged_seconds?;
        ratio(
            self.convergence_api_requests,
            Some(self.convergence_reconciles),
        )
    }

    fn resync_median(&self, value: impl Fn(&Resync) -> Option<f64>) -> Option<f64> {
        median(self.resyncs.iter().filter_map(value))
    }

    pub fn resync_requests_per_reconcile(&self) -> Option<f64> {
        self.resync_median(|resync| ratio(resync.api_requests, Some(resync.reconciles)))
    }
}

/// What the issue asks of the largest fleet.
#[derive(Clone, Copy, Debug)]
enum Target {
    AtMost(f64),
    /// At most `x` times the baseline's value: not growing with the fleet (a fixed
    /// start-up cost spread over more bots may make it shrink).
    NotGrowing(f64),
    None,
}

struct Row {
    metric: &'static str,
    value: fn(&SizeResult) -> Option<f64>,
    target: Target,
}

fn rows() -> Vec<Row> {
    vec![
        Row {
            metric: "operator RSS, steady median (MB)",
            value: |size| size.steady_rss_megabytes,
            target: Target::AtMost(40.0),
        },
        Row {
            metric: "operator RSS, peak (MB)",
            value: |size| Some(size.peak_rss_megabytes),
            target: Target::None,
        },
        Row {
            metric: "operator heap allocated, steady end (MB)",
            value: |size| size.steady_heap_allocated_megabytes,
            target: Target::None,
        },
        Row {
            metric: "operator heap resident, steady end (MB)",
            value: |size| size.steady_heap_resident_megabytes,
            target: Target::None,
        },
        Row {
            metric: "creates: first to last (s)",
            value: |size| Some(size.create_seconds),
            target: Target::None,
        },
        Row {
            metric: "first create to all observedGeneration (s)",
            value: |size| size.converged_seconds,
            target: Target::AtMost(60.0),
        },
        Row {
            // The creates themselves take long on a busy machine: this is the operator's part.
            metric: "last create to all observedGeneration (s)",
            value: |size| {
                size.converged_seconds
                    .map(|seconds| seconds - size.create_seconds)
            },
            target: Target::None,
        },
        Row {
            metric: "reconciles per bot until converged",
            value: |size| {
                size.converged_seconds?;
                Some(size.convergence_reconciles / size.bots as f64)
            },
            target: Target::None,
        },
        Row {
            metric: "reconciles in the steady window",
            value: |size| size.converged_seconds.map(|_| size.steady_reconciles),
            target: Target::None,
        },
        Row {
            metric: "API requests per reconcile, convergence",
            value: SizeResult::convergence_requests_per_reconcile,
            target: Target::NotGrowing(1.5),
        },
        Row {
            metric: "resync: start to first reconcile (s, median)",
            value: |size| size.resync_median(|resync| resync.first_reconcile_seconds),
            target: Target::None,
        },
        Row {
            metric: "resync: start to N reconciles started (s, median)",
            value: |size| size.resync_median(|resync| resync.all_started_seconds),
            target: Target::None,
        },
        Row {
            metric: "resync: start to N reconciles finished (s, median)",
            value: |size| size.resync_median(|resync| resync.all_finished_seconds),
            target: Target::AtMost(10.0),
        },
        Row {
            metric: "resync: RSS peak (MB, median)",
            value: |size| size.resync_median(|resync| Some(resync.peak_rss_megabytes)),
            target: Target::None,
        },
        Row {
            metric: "API requests per reconcile, resync (median)",
            value: SizeResult::resync_requests_per_reconcile,
            target: Target::NotGrowing(1.5),
        },
    ]
}

fn format_value(value: Option<f64>) -> String {
    match value {
        None => "-".to_owned(),
        Some(value) if value.abs() >= 100.0 => format!("{value:.0}"),
        Some(value) => format!("{value:.2}"),
    }
}

/// Whether the largest size meets the row's target: `Some(met)`, `None` when unknown.
fn target_met(target: Target, largest: Option<f64>, growth: Option<f64>) -> Option<bool> {
    match target {
        Target::AtMost(limit) => largest.map(|value| value <= limit),
        Target::NotGrowing(factor) => growth.map(|growth| growth <= factor),
        Target::None => None,
    }
}

fn describe_target(target: Target) -> String {
    match target {
        Target::AtMost(limit) => format!("<= {limit}"),
        Target::NotGrowing(factor) => format!("ratio <= {factor}"),
        Target::None => String::new(),
    }
}

/// The table as text (one line per metric) and as JSON rows. The first size is the
/// baseline; each later size gets a ratio column against it; targets apply to the last.
pub fn table(sizes: &[SizeResult]) -> (String, Vec<Value>) {
    let Some(baseline) = sizes.first() else {
        return (String::new(), Vec::new());
    };
    let largest = sizes.last().unwrap_or(baseline);
    let mut header = vec![format!("{:<52}", "metric")];
    header.extend(
        sizes
            .iter()
            .map(|size| format!("{:>10}", format!("N={}", size.bots))),
    );
    header.extend(
        sizes[1..]
            .iter()
            .map(|size| format!("{:>10}", format!("{}/{}", size.bots, baseline.bots))),
    );
    header.push(format!(
        "  {:<22} met",
        format!("target (N={})", largest.bots)
    ));
    let mut lines = vec![header.concat()];
    let mut json_rows = Vec::new();
    for row in rows() {
        let values: Vec<Option<f64>> = sizes.iter().map(|size| (row.value)(size)).collect();
        let ratios: Vec<Option<f64>> = values[1..]
            .iter()
            .map(|value| ratio(*value, values[0]))
            .collect();
        let growth = ratios.last().copied().flatten();
        let met = target_met(row.target, values.last().copied().flatten(), growth);
        let mut line = vec![format!("{:<52}", row.metric)];
        line.extend(
            values
                .iter()
                .map(|value| format!("{:>10}", format_value(*value))),
        );
        line.extend(ratios.iter().map(|value| {
            format!(
                "{:>10}",
                value.map_or("-".to_owned(), |value| format!("x{value:.2}"))
            )
        }));
        let met_text = match met {
            Some(true) => "yes",
            Some(false) => "NO",
            None if matches!(row.target, Target::None) => "",
            None => "?",
        };
        line.push(format!("  {:<22} {met_text}", describe_target(row.target)));
        lines.push(line.concat());
        json_rows.push(json!({
            "metric": row.metric,
            "values": sizes.iter().zip(&values).map(|(size, value)| json!({"bots": size.bots, "value": value})).collect::<Vec<_>>(),
            "ratios_to_baseline": sizes[1..].iter().zip(&ratios).map(|(size, value)| json!({"bots": size.bots, "ratio": value})).collect::<Vec<_>>(),
            "target": describe_target(row.target),
            "met": met,
        }));
    }
    (lines.join("\n"), json_rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median([3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median([4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(Vec::<f64>::new()), None);
    }

    fn size(bots: usize, steady: f64, requests: f64) -> SizeResult {
        SizeResult {
            bots,
            converged_seconds: Some(1.0),
            steady_rss_megabytes: Some(steady),
            convergence_reconciles: bots as f64,
            convergence_api_requests: Some(requests * bots as f64),
            ..SizeResult::default()
        }
    }

    #[test]
    fn a_constant_or_shrinking_request_count_meets_the_target_and_a_growing_one_does_not() {
        let (text, rows) = table(&[size(100, 20.0, 12.0), size(1000, 30.0, 12.0)]);
        let per_reconcile = rows
            .iter()
            .find(|row| row["metric"] == "API requests per reconcile, convergence")
            .unwrap();
        assert_eq!(per_reconcile["met"], json!(true));
        assert!(text.contains("x1.00"), "{text}");

        let (_, rows) = table(&[size(100, 20.0, 12.0), size(1000, 30.0, 120.0)]);
        let per_reconcile = rows
            .iter()
            .find(|row| row["metric"] == "API requests per reconcile, convergence")
            .unwrap();
        assert_eq!(per_reconcile["met"], json!(false));

        // A fixed start-up cost spread over more bots shrinks the ratio: not growth.
        let (_, rows) = table(&[size(100, 20.0, 2.3), size(1000, 30.0, 1.1)]);
        let per_reconcile = rows
            .iter()
            .find(|row| row["metric"] == "API requests per reconcile, convergence")
            .unwrap();
        assert_eq!(per_reconcile["met"], json!(true));
    }

    #[test]
    fn a_size_that_never_converged_has_no_requests_per_reconcile() {
        let stopped = SizeResult {
            converged_seconds: None,
            ..size(300, 20.0, 12.0)
        };
        assert_eq!(stopped.convergence_requests_per_reconcile(), None);
        let (_, rows) = table(&[size(100, 20.0, 12.0), stopped]);
        let per_reconcile = rows
            .iter()
            .find(|row| row["metric"] == "API requests per reconcile, convergence")
            .unwrap();
        assert_eq!(per_reconcile["met"], Value::Null);
    }

    #[test]
    fn rss_above_the_target_at_the_largest_size_is_not_met() {
        let (_, rows) = table(&[size(100, 20.0, 1.0), size(1000, 41.0, 1.0)]);
        assert_eq!(rows[0]["met"], json!(false));
        assert_eq!(rows[0]["values"][1]["value"], json!(41.0));
    }
}
