//! Benchmark: scheduler overhead with 10,000 jobs against a baseline of 100 in the same
//! run — the time one scheduler tick takes to find the due jobs (the store's `due` query
//! plus the next due time, through the `next_run` index), the memory the job store adds
//! to a process that opens it and ticks, and the store's size on disk. Reports medians
//! (and p95 for the tick) as a markdown table.
//!
//! Memory is measured in a child process per size (this binary re-run), so what one size
//! allocated does not blur the other's figure.
//!
//! Run: `CARGO_TARGET_DIR=/root/.cache/saint/target-release cargo bench -p saint-agent --bench scheduler`.

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use jiff::Timestamp;
use saint_agent::schedule::{jobs::JobStore, spec::Spec};

const SIZES: [usize; 2] = [100, 10_000];
const WARMUP_TICKS: usize = 200;
const MEASURED_TICKS: usize = 2_000;
const MEMORY_ROUNDS: usize = 5;
/// Due jobs one tick takes at most (the loop's free run slots).
const BATCH: usize = saint_agent::schedule::MAX_CONCURRENT_RUNS;
/// Set in the child process: the database to open and measure.
const CHILD_ENV: &str = "SAINT_BENCH_SCHEDULER_DB";

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) {
        f64::midpoint(values[middle - 1], values[middle])
    } else {
        values[middle]
    }
}

fn percentile(mut values: Vec<f64>, share: f64) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    values[((values.len() as f64 - 1.0) * share).round() as usize]
}

fn microseconds(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1_000_000.0
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .expect("/proc/self/status")
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.split_whitespace().next())
        .and_then(|value| value.parse().ok())
        .expect("VmRSS in /proc/self/status")
}

fn start() -> Timestamp {
    "2026-03-02T00:00:00Z".parse().unwrap()
}

/// `count` jobs like people make them: weekly cron jobs at spread-out minutes of the
/// week, in a few time zones, owned by a hundred people. Written in one transaction
/// (the tool adds one per fsync; that is not what this measures).
fn fill(path: &Path, count: usize) {
    // Creates the schema.
    drop(JobStore::open(path).unwrap());
    let mut connection = rusqlite::Connection::open(path).unwrap();
    let transaction = connection.transaction().unwrap();
    let zones = ["Europe/Zagreb", "UTC", "America/New_York", "Asia/Tokyo"];
    let days = ["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"];
    {
        let mut insert = transaction
            .prepare(
                "INSERT INTO jobs (owner, owner_role, owner_identity, schedule, text, next_run, created_at)
                 VALUES (?1, 'employee', ?2, ?3, ?4, ?5, ?6)",
            )
            .unwrap();
        for index in 0..count {
            let spec = Spec::Cron {
                expression: format!(
                    "{} {} * * {}",
                    index % 60,
                    (index / 60) % 24,
                    days[(index / 1_440) % 7]
                ),
                timezone: zones[index % zones.len()].to_string(),
            };
            let next = spec.next_after(start()).unwrap().unwrap();
            insert
                .execute(rusqlite::params![
                    format!("person-{}", index % 100),
                    format!("telegram:{}", 1_000 + index % 100),
                    serde_json::to_string(&spec).unwrap(),
                    format!("Scheduled task number {index}: check the report and tell me."),
                    next.as_millisecond(),
                    Timestamp::now().to_string(),
                ])
                .unwrap();
        }
    }
    transaction.commit().unwrap();
}

fn file_kib(path: &Path) -> f64 {
    let size = |path: &Path| std::fs::metadata(path).map(|meta| meta.len()).unwrap_or(0);
    let wal = path.with_extension("sqlite3-wal");
    (size(path) + size(&wal)) as f64 / 1024.0
}

/// One tick as the loop makes it: the due jobs (at most a batch), then the next due time.
fn tick(store: &JobStore, now: Timestamp) -> usize {
    let due = store.due(now, BATCH).unwrap();
    let _ = store.next_due().unwrap();
    due.len()
}

/// Child: opens the store at `path`, ticks, prints the RSS before and after.
fn child(path: &str) {
    let before = rss_kib();
    let store = JobStore::open(path).unwrap();
    let now = store.next_due().unwrap().unwrap();
    for _ in 0..WARMUP_TICKS + MEASURED_TICKS {
        std::hint::black_box(tick(&store, now));
    }
    let after = rss_kib();
    println!("{before} {after}");
}

struct Timings {
    idle: Vec<f64>,
    due: Vec<f64>,
}

/// Tick times at two moments: just before the earliest job is due (nothing to run: the
/// common tick), and when a batch of jobs is due.
fn time_ticks(path: &Path) -> Timings {
    let store = JobStore::open(path).unwrap();
    let first = store.next_due().unwrap().unwrap();
    let idle_now = first
        .checked_sub(jiff::SignedDuration::from_secs(1))
        .unwrap();
    // The moment the BATCH-th job is due.
    let batch_now = store
        .due(Timestamp::MAX, BATCH)
        .unwrap()
        .last()
        .and_then(|job| job.next_run)
        .unwrap();
    assert_eq!(tick(&store, idle_now), 0);
    assert_eq!(tick(&store, batch_now), BATCH);
    let measure = |now: Timestamp| {
        for _ in 0..WARMUP_TICKS {
            std::hint::black_box(tick(&store, now));
        }
        (0..MEASURED_TICKS)
            .map(|_| {
                let started = Instant::now();
                std::hint::black_box(tick(&store, now));
                microseconds(started.elapsed())
            })
            .collect::<Vec<f64>>()
    };
    Timings {
        idle: measure(idle_now),
        due: measure(batch_now),
    }
}

fn main() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        child(&path);
        return;
    }
    // `cargo bench` passes `--bench`; nothing else is taken.
    let directory = tempfile::tempdir().unwrap();
    let mut rows = Vec::new();
    for size in SIZES {
        let path = directory.path().join(format!("jobs-{size}.sqlite3"));
        let started = Instant::now();
        fill(&path, size);
        eprintln!(
            "{size} jobs written in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let timings = time_ticks(&path);
        let mut added = Vec::new();
        for _ in 0..MEMORY_ROUNDS {
            let output = Command::new(std::env::current_exe().unwrap())
                .env(CHILD_ENV, &path)
                .output()
                .unwrap();
            assert!(output.status.success(), "{output:?}");
            let text = String::from_utf8(output.stdout).unwrap();
            let (before, after) = text.trim().split_once(' ').unwrap();
            let (before, after): (f64, f64) = (before.parse().unwrap(), after.parse().unwrap());
            added.push((after - before) / 1024.0);
        }
        rows.push((size, timings, median(added), file_kib(&path)));
    }

    println!("## Scheduler overhead (medians of one run; tick = due jobs + next due time)\n");
    println!(
        "| Jobs | Idle tick (median / p95) | Tick with {BATCH} due (median / p95) | RSS added by the store | Store on disk |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: |");
    for (size, timings, rss, disk) in &rows {
        println!(
            "| {size} | {:.1} µs / {:.1} µs | {:.1} µs / {:.1} µs | {rss:.2} MiB | {:.0} KiB |",
            median(timings.idle.clone()),
            percentile(timings.idle.clone(), 0.95),
            median(timings.due.clone()),
            percentile(timings.due.clone(), 0.95),
            disk
        );
    }
    let (baseline, large) = (&rows[0], &rows[1]);
    println!(
        "\n{}× the jobs: idle tick {:.2}×, due tick {:.2}× the {}-job baseline.",
        large.0 / baseline.0,
        median(large.1.idle.clone()) / median(baseline.1.idle.clone()),
        median(large.1.due.clone()) / median(baseline.1.due.clone()),
        baseline.0
    );
}
