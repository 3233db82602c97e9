//! Benchmark of the `browser` tool on a warm local sandbox (real bubblewrap, runner,
//! Chromium and the guarded egress proxy), against baselines named in each line:
//!
//! - cold start: `open` of a fresh browser (Chromium start, DevTools attach, the page
//!   through the egress proxy) against `chromium --headless --dump-dom` of the same
//!   page straight from loopback, unsandboxed and unproxied;
//! - warm page action: `click` and `read` on an open page against a `web_fetch`-style
//!   fetch of the same page through the same SSRF guard.
//!
//! Medians from one run. Needs `bwrap`, `chromium` and `saint-sandbox-runner` and
//! `porter` built next to this bench, or `SAINT_TEST_BIN_DIR` naming their directory.

#[path = "../tests/sandbox_harness/mod.rs"]
mod sandbox_harness;

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::{Duration, Instant},
};

use axum::{Router, response::Html, routing::get};
use futures::future::BoxFuture;
use saint_tools::{
    Tool, ToolContext,
    browser::{BrowserLimits, BrowserTool},
    exec::{ExecLimits, ExecTool},
    guard::ssrf::{FetchLimits, Resolver, SsrfGuard},
    policy,
};
use serde_json::{Value, json};

const COLD_RUNS: usize = 7;
const WARM_RUNS: usize = 30;
const PUBLIC_ADDRESS: &str = "93.184.215.14";
const PAGE: &str = r#"<!doctype html><html><head><title>Bench</title></head><body>
<p id="status">Waiting</p>
<button onclick="document.getElementById('status').textContent = 'Shown by JavaScript'">Show</button>
</body></html>"#;

struct Names(HashMap<&'static str, Vec<IpAddr>>);

impl Resolver for Names {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            self.0
                .get(host)
                .cloned()
                .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such name"))
        })
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn milliseconds(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

async fn call(tool: &BrowserTool, context: &ToolContext, input: Value) -> Duration {
    let permit = policy::permit(&context.caller, tool, true).unwrap();
    let started = Instant::now();
    if let Err(error) = tool.call(&permit, context, input.clone()).await {
        panic!("{input}: {error}");
    }
    started.elapsed()
}

#[tokio::main]
async fn main() {
    let router = Router::new().route("/", get(|| async { Html(PAGE) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let site: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    let harness = sandbox_harness::Harness::start();
    let names = Names(HashMap::from([(
        "site.acme-test.com",
        vec![PUBLIC_ADDRESS.parse().unwrap()],
    )]));
    let guard = Arc::new(
        SsrfGuard::new(Arc::new(names)).with_test_route(PUBLIC_ADDRESS.parse().unwrap(), site),
    );
    let exec = Arc::new(ExecTool::new(
        harness.sandbox.clone(),
        None,
        ExecLimits::default(),
    ));
    let tool = BrowserTool::new(exec, guard.clone(), BrowserLimits::default());
    let mut config = (*harness.config).clone();
    config
        .roles
        .get_mut("employee")
        .unwrap()
        .tools
        .allow
        .push("browser".to_string());
    let config = Arc::new(config);
    let mut ana = harness.context("http:ana", "employee");
    ana.caller.role = Arc::new(config.roles["employee"].clone());
    ana.config = config;
    let url = "http://site.acme-test.com/";
    // Warm the sandbox (bubblewrap + runner) so only the browser's start is measured.
    harness.run("http:ana", "true").await;

    let baseline_cold: Vec<Duration> = (0..COLD_RUNS)
        .map(|_| {
            let profile = tempfile::tempdir().unwrap();
            let started = Instant::now();
            let output = std::process::Command::new("/usr/lib/chromium/chromium")
                .args([
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                    &format!("--user-data-dir={}", profile.path().display()),
                    "--dump-dom",
                    &format!("http://{site}/"),
                ])
                .output()
                .unwrap();
            assert!(String::from_utf8_lossy(&output.stdout).contains("Waiting"));
            started.elapsed()
        })
        .collect();

    let mut cold = Vec::new();
    for _ in 0..COLD_RUNS {
        cold.push(call(&tool, &ana, json!({"action": "open", "url": url})).await);
        call(&tool, &ana, json!({"action": "close"})).await;
    }

    call(&tool, &ana, json!({"action": "open", "url": url})).await;
    let mut clicks = Vec::new();
    let mut reads = Vec::new();
    for _ in 0..WARM_RUNS {
        clicks.push(call(&tool, &ana, json!({"action": "click", "text": "Show"})).await);
        reads.push(call(&tool, &ana, json!({"action": "read"})).await);
    }
    let mut fetches = Vec::new();
    for _ in 0..WARM_RUNS {
        let started = Instant::now();
        let fetched = guard.fetch(url, &[], FetchLimits::default()).await.unwrap();
        assert!(String::from_utf8_lossy(&fetched.body).contains("Waiting"));
        fetches.push(started.elapsed());
    }
    call(&tool, &ana, json!({"action": "close"})).await;

    let baseline_cold = median(baseline_cold);
    let cold = median(cold);
    let fetch = median(fetches);
    println!("browser tool (medians, one run; warm bubblewrap sandbox, real Chromium)");
    println!(
        "  cold start: open in a fresh browser        {:8.1} ms  vs `chromium --headless --dump-dom` {:8.1} ms ({:.2}x)",
        milliseconds(cold),
        milliseconds(baseline_cold),
        cold.as_secs_f64() / baseline_cold.as_secs_f64()
    );
    for (what, samples) in [("click", clicks), ("read", reads)] {
        let warm = median(samples);
        println!(
            "  warm action: {what:<6}                       {:8.1} ms  vs web_fetch of the page        {:8.1} ms ({:.1}x)",
            milliseconds(warm),
            milliseconds(fetch),
            warm.as_secs_f64() / fetch.as_secs_f64()
        );
    }
}
