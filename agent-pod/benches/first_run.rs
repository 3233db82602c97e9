//! The first ten minutes, measured: how long `saint-agent up` takes from the command to
//! the chat page answering a message (a scripted, instant model), and how much memory
//! the bot holds idle (agent + its Porter), with memory off and on.
//!
//! Three ways to start, medians of one run each:
//! - `cargo run --release -p saint-agent -- up` — the README's command (in the release
//!   profile, like the baseline binary) on a warm build (cargo checks the build twice:
//!   the agent, then Porter and the runner with it);
//! - `saint-agent up` — the same binary without cargo (the baseline);
//! - both into a fresh data directory (first start: files written) and an existing one.
//!
//! Needs a release build of Porter and the runner next to the agent
//! (`cargo build --release -p porter -p saint-sandbox-runner`) and, for memory on, the
//! embedding model (`agent-pod/memory/fetch-model.sh`).
//!
//! cargo bench -p saint-agent --bench first_run

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use saint_scripted::llm::{Reply, ScriptedLlm};

const RUNS: usize = 7;

struct Started {
    child: Child,
    token: String,
}

impl Drop for Started {
    fn drop(&mut self) {
        // SIGTERM, so the agent stops its Porter and sandboxes as a user's Ctrl-C would.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

fn agent_binary() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_saint-agent"));
    for companion in ["porter", "saint-sandbox-runner"] {
        let sibling = path.parent().unwrap().join(companion);
        assert!(
            sibling.is_file(),
            "{} is missing: cargo build --release -p porter -p saint-sandbox-runner",
            sibling.display()
        );
    }
    path
}

/// Starts `command` (an `up`), waits for the page's address, then for `/chat` and one
/// answered message; returns the time from spawn to the answer.
fn start_and_ask(
    mut command: Command,
    model: &ScriptedLlm,
    tokio: &tokio::runtime::Runtime,
) -> (Duration, Started) {
    let began = Instant::now();
    command
        .env("SAINT_MODEL_BASE_URL", model.base_url())
        .env("SAINT_MODEL_PROVIDER", "anthropic")
        .env("SAINT_MODEL_API_KEY", "bench")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = command.spawn().expect("failed to start up");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("up exited before printing the page's address")
            .unwrap();
        if let Some((_, url)) = line
            .split_once(" at ")
            .filter(|_| line.starts_with("Chat with"))
        {
            break url.to_string();
        }
    };
    // Keep draining stdout so the agent never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    let (base_url, token) = url.split_once("/chat#token=").unwrap();
    let started = Started {
        child,
        token: token.to_string(),
    };
    let answer: serde_json::Value = tokio.block_on(async {
        let http = reqwest::Client::new();
        let page = http.get(format!("{base_url}/chat")).send().await.unwrap();
        assert!(page.status().is_success());
        http.post(format!("{base_url}/v1/messages"))
            .bearer_auth(&started.token)
            .json(&serde_json::json!({"channel": "http", "peer": "bench", "text": "hello"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    });
    assert_eq!(answer["reply"], "hi", "{answer}");
    (began.elapsed(), started)
}

fn up_command(program: &Path, data: &Path, memory: bool) -> Command {
    let mut command = Command::new(program);
    command.args(["up", "--listen", "127.0.0.1:0", "--no-build"]);
    if !memory {
        command.arg("--no-memory");
    }
    command.arg("--data-dir").arg(data);
    command
}

fn cargo_command(data: &Path) -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut command = Command::new(cargo);
    command
        .args([
            "run",
            "--quiet",
            "--release",
            "--manifest-path",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"),
            "-p",
            "saint-agent",
            "--",
            "up",
            "--listen",
            "127.0.0.1:0",
            "--no-memory",
            "--data-dir",
        ])
        .arg(data);
    command
}

/// Resident memory of `pid` and its child processes (Porter), in KiB.
fn resident_kib(pid: u32) -> (u64, u64) {
    let rss = |pid: u32| -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|line| line.strip_prefix("VmRSS:"))
                    .and_then(|value| value.split_whitespace().next()?.parse().ok())
            })
            .unwrap_or(0)
    };
    let mut children = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        let parent = std::fs::read_to_string(format!("/proc/{child}/stat"))
            .ok()
            .and_then(|stat| {
                let after = stat.rsplit_once(')')?.1.to_string();
                after.split_whitespace().nth(1)?.parse::<u32>().ok()
            });
        if parent == Some(pid) {
            children += rss(child);
        }
    }
    (rss(pid), children)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn median_u64(mut samples: Vec<u64>) -> u64 {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn main() {
    if std::env::args().any(|argument| argument == "--list") {
        return;
    }
    let agent = agent_binary();
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let model = tokio.block_on(ScriptedLlm::start()).unwrap();
    model.set_fallback(Reply::text("hi"));
    let scratch = tempfile::tempdir().unwrap();

    let mut fresh = Vec::new();
    let mut existing = Vec::new();
    let mut through_cargo = Vec::new();
    let mut idle_off = (Vec::new(), Vec::new());
    for run in 0..RUNS {
        let data = scratch.path().join(format!("fresh-{run}"));
        let (elapsed, started) = start_and_ask(up_command(&agent, &data, false), &model, &tokio);
        fresh.push(elapsed);
        drop(started);
        let (elapsed, started) = start_and_ask(up_command(&agent, &data, false), &model, &tokio);
        existing.push(elapsed);
        std::thread::sleep(Duration::from_secs(2));
        let (agent_kib, porter_kib) = resident_kib(started.child.id());
        idle_off.0.push(agent_kib);
        idle_off.1.push(porter_kib);
        drop(started);
        let (elapsed, started) = start_and_ask(cargo_command(&data), &model, &tokio);
        through_cargo.push(elapsed);
        drop(started);
    }
    let mut idle_on = (Vec::new(), Vec::new());
    let model_present = std::env::var_os("HOME")
        .map(|home| Path::new(&home).join(".cache/saint/models/all-MiniLM-L6-v2/model.safetensors"))
        .is_some_and(|path| path.is_file())
        || std::env::var_os("SAINT_MODEL_DIR").is_some();
    if model_present {
        for run in 0..3 {
            let data = scratch.path().join(format!("memory-{run}"));
            let (_, started) = start_and_ask(up_command(&agent, &data, true), &model, &tokio);
            std::thread::sleep(Duration::from_secs(2));
            let (agent_kib, porter_kib) = resident_kib(started.child.id());
            idle_on.0.push(agent_kib);
            idle_on.1.push(porter_kib);
        }
    }

    let baseline = median(existing.clone());
    println!(
        "first_run: command → chat page answering a message (scripted instant model), {RUNS} runs, medians"
    );
    println!(
        "  saint-agent up, existing data dir (baseline)   {:>8.1} ms",
        ms(baseline)
    );
    let first = median(fresh);
    println!(
        "  saint-agent up, fresh data dir (files written) {:>8.1} ms  ({:.2}x baseline)",
        ms(first),
        first.as_secs_f64() / baseline.as_secs_f64()
    );
    let cargo = median(through_cargo);
    println!(
        "  cargo run --release -p saint-agent -- up      {:>8.1} ms  ({:.2}x baseline; warm build)",
        ms(cargo),
        cargo.as_secs_f64() / baseline.as_secs_f64()
    );
    println!("idle resident memory after one message, medians (release build)");
    println!(
        "  memory off: agent {:>6.1} MiB + porter {:>5.1} MiB = {:>6.1} MiB",
        median_u64(idle_off.0.clone()) as f64 / 1024.0,
        median_u64(idle_off.1.clone()) as f64 / 1024.0,
        (median_u64(idle_off.0) + median_u64(idle_off.1)) as f64 / 1024.0
    );
    if model_present {
        println!(
            "  memory on:  agent {:>6.1} MiB + porter {:>5.1} MiB = {:>6.1} MiB",
            median_u64(idle_on.0.clone()) as f64 / 1024.0,
            median_u64(idle_on.1.clone()) as f64 / 1024.0,
            (median_u64(idle_on.0) + median_u64(idle_on.1)) as f64 / 1024.0
        );
    } else {
        println!(
            "  memory on:  not measured — no embedding model (run agent-pod/memory/fetch-model.sh)"
        );
    }
}
