//! Benchmark of the local sandbox: the round trip of `exec true` on a warm bubblewrap
//! sandbox against spawning `sh -c true` directly (the floor), and the cold start of a
//! sandbox (bubblewrap + runner until its socket answers). Medians from one run.
//!
//! Needs `bwrap` and `saint-sandbox-runner` built next to this bench (`cargo build
//! --release -p saint-sandbox-runner`), or `SAINT_TEST_BIN_DIR` naming its directory.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use futures::StreamExt;
use saint_agent::sandbox::{
    ExecEvent, ExecRequest, Sandbox, ScopeKey,
    local::{LocalConfig, LocalSandbox},
};
use saint_config::SandboxScope;

const WARM_RUNS: usize = 300;
const COLD_RUNS: usize = 30;

fn runner_binary() -> PathBuf {
    let directory = match std::env::var_os("SAINT_TEST_BIN_DIR") {
        Some(directory) => PathBuf::from(directory),
        None => std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf(),
    };
    let path = directory.join("saint-sandbox-runner");
    assert!(
        path.is_file(),
        "{} is missing: cargo build --release -p saint-sandbox-runner",
        path.display()
    );
    path
}

struct Summary {
    median: Duration,
    p90: Duration,
}

fn summarise(mut samples: Vec<Duration>) -> Summary {
    samples.sort();
    Summary {
        median: samples[samples.len() / 2],
        p90: samples[samples.len() * 9 / 10],
    }
}

fn milliseconds(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

async fn exec_true(sandbox: &LocalSandbox, scope: &ScopeKey) {
    let request = ExecRequest {
        command: "true".to_string(),
        cwd: "/workspace".to_string(),
        timeout: Duration::from_secs(10),
        ..ExecRequest::default()
    };
    let mut events = sandbox.exec(scope, request).await.expect("sandbox exec");
    while let Some(event) = events.next().await {
        match event.expect("sandbox event") {
            ExecEvent::Exit(0) => return,
            ExecEvent::Exit(code) => panic!("`true` exited {code}"),
            ExecEvent::TimedOut => panic!("`true` timed out"),
            _ => {}
        }
    }
    panic!("stream ended without an exit");
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let base = tempfile::tempdir().unwrap();
    let workspace = base.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("SOUL.md"), "bench\n").unwrap();
    let config = LocalConfig::new(workspace, base.path().join("state"), runner_binary());
    let sandbox = LocalSandbox::new(config).unwrap();

    // Direct spawn: the cost of starting `sh -c true` at all, without any sandbox.
    let mut direct = Vec::with_capacity(WARM_RUNS);
    for _ in 0..WARM_RUNS {
        let started = Instant::now();
        let status = tokio::process::Command::new("/bin/sh")
            .args(["-c", "true"])
            .status()
            .await
            .unwrap();
        assert!(status.success());
        direct.push(started.elapsed());
    }

    // Warm sandbox: one start, then many commands through the runner socket.
    let warm_scope = ScopeKey::for_session(SandboxScope::Session, "bench-warm");
    exec_true(&sandbox, &warm_scope).await;
    let mut warm = Vec::with_capacity(WARM_RUNS);
    for _ in 0..WARM_RUNS {
        let started = Instant::now();
        exec_true(&sandbox, &warm_scope).await;
        warm.push(started.elapsed());
    }

    // Cold start: a new scope each time, until the runner answers on its socket.
    let mut cold = Vec::with_capacity(COLD_RUNS);
    for run in 0..COLD_RUNS {
        let scope = ScopeKey::for_session(SandboxScope::Session, &format!("bench-cold-{run}"));
        let started = Instant::now();
        drop(sandbox.ensure(&scope).await.expect("cold start"));
        cold.push(started.elapsed());
        sandbox.discard(&scope).await.unwrap();
    }

    let direct = summarise(direct);
    let warm = summarise(warm);
    let cold = summarise(cold);
    println!("sandbox exec benchmark ({WARM_RUNS} warm runs, {COLD_RUNS} cold starts)");
    println!(
        "  direct `sh -c true` spawn (baseline)     median {:7.3} ms   p90 {:7.3} ms",
        milliseconds(direct.median),
        milliseconds(direct.p90)
    );
    println!(
        "  exec `true`, warm bubblewrap sandbox     median {:7.3} ms   p90 {:7.3} ms   ({:.1}x baseline; target < 20 ms)",
        milliseconds(warm.median),
        milliseconds(warm.p90),
        warm.median.as_secs_f64() / direct.median.as_secs_f64()
    );
    println!(
        "  sandbox cold start (bwrap to runner up)  median {:7.3} ms   p90 {:7.3} ms   ({:.1}x baseline)",
        milliseconds(cold.median),
        milliseconds(cold.p90),
        cold.median.as_secs_f64() / direct.median.as_secs_f64()
    );
}
