//! Benchmark: agent overhead per turn with the scripted LLM answering instantly, idle RSS
//! of the real binary, and RSS with 1,000 active sessions. Reports medians from one run
//! and ratios against baselines measured in the same run (a bare model call for the
//! overhead; the ~256 MB per bot of the Node-based original for memory).
//!
//! Run: `cargo bench -p saint-agent --bench turn_overhead`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use common::*;
use saint_agent::runtime::{Inbound, RuntimeOptions};
use saint_config::{ChannelIdentity, ChannelKind};
use saint_llm::{
    CancellationToken, ChatRequest, ClientOptions, Endpoint, LlmClient, Message, Provider,
};
use saint_scripted::llm::{Reply, ScriptedLlm};
use serde_json::json;

const WARMUP_TURNS: usize = 50;
const MEASURED_TURNS: usize = 500;
const ACTIVE_SESSIONS: usize = 1_000;
const NODE_ORIGINAL_RSS_MB: f64 = 256.0;

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

fn milliseconds(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1_000.0
}

fn rss_megabytes(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("failed to read /proc status");
    let kilobytes: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.split_whitespace().next())
        .and_then(|value| value.parse().ok())
        .expect("VmRSS missing");
    kilobytes / 1024.0
}

fn rss_median(pid: u32) -> f64 {
    let mut samples = Vec::new();
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(100));
        samples.push(rss_megabytes(pid));
    }
    median(samples)
}

async fn bare_model_call_ms(llm: &ScriptedLlm) -> Vec<f64> {
    let endpoint = Endpoint {
        provider: Provider::Anthropic,
        base_url: llm.base_url(),
        api_key: Some("k".into()),
    };
    let client = LlmClient::new(endpoint, ClientOptions::default()).unwrap();
    let request = ChatRequest {
        model: "claude-haiku-4-5".into(),
        system: "You are Acme's helpful colleague.".into(),
        messages: vec![Message::user_text("hello")],
        tools: Vec::new(),
        max_tokens: 256,
    };
    let mut samples = Vec::new();
    for index in 0..WARMUP_TURNS + MEASURED_TURNS {
        llm.push(Reply::text("Sure, here you go."));
        let started = Instant::now();
        client
            .complete(&request, &CancellationToken::new(), &mut |_| {})
            .await
            .unwrap();
        if index >= WARMUP_TURNS {
            samples.push(milliseconds(started.elapsed()));
        }
    }
    samples
}

struct TurnSamples {
    total: Vec<f64>,
    model: Vec<f64>,
    overhead: Vec<f64>,
}

async fn measure_turns(bot: &InProcess, with_tool: bool) -> TurnSamples {
    let mut samples = TurnSamples {
        total: Vec::new(),
        model: Vec::new(),
        overhead: Vec::new(),
    };
    for index in 0..WARMUP_TURNS + MEASURED_TURNS {
        if with_tool {
            bot.llm
                .push(Reply::tool_call("read", json!({"path": "SOUL.md"})));
        }
        bot.llm.push(Reply::text("Sure, here you go."));
        // 50 people, so transcripts grow to ~20 messages each as in a lively bot.
        let inbound = Inbound::direct(
            ChannelIdentity::parse(ChannelKind::Whatsapp, &format!("+38591{:07}", index % 50))
                .expect("a phone number"),
            format!("question number {index}"),
        );
        let started = Instant::now();
        let reply = bot
            .runtime
            .handle(inbound, None, CancellationToken::new())
            .await
            .unwrap();
        let total = started.elapsed();
        if index >= WARMUP_TURNS {
            samples.total.push(milliseconds(total));
            samples.model.push(milliseconds(reply.model_time));
            samples
                .overhead
                .push(milliseconds(total.saturating_sub(reply.model_time)));
        }
    }
    samples
}

async fn measure_http_turns(bot: &InProcess) -> Vec<f64> {
    let mut samples = Vec::new();
    for index in 0..WARMUP_TURNS + MEASURED_TURNS {
        bot.llm.push(Reply::text("Sure."));
        let started = Instant::now();
        let (status, _) = bot
            .send("telegram", &format!("{}", 7_000 + index % 50), "hi")
            .await;
        assert_eq!(status, 200);
        if index >= WARMUP_TURNS {
            samples.push(milliseconds(started.elapsed()));
        }
    }
    samples
}

async fn measure_rss() -> (f64, f64) {
    let llm = ScriptedLlm::start().await.unwrap();
    llm.set_fallback(Reply::text("Noted."));
    let directory = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let workspace = directory.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    seed_workspace(&workspace);
    let config_path = directory.path().join("bot-config.json");
    write_config(&config_path, &test_config(&llm.base_url()));
    let agent = spawn_agent(&config_path, &workspace, &[]);
    let pid = agent.child.id();
    let idle = tokio::task::spawn_blocking(move || rss_median(pid))
        .await
        .unwrap();

    let client = reqwest::Client::new();
    let url = format!("{}/v1/messages", agent.http);
    let semaphore = Arc::new(tokio::sync::Semaphore::new(16));
    let mut sends = Vec::new();
    for index in 0..ACTIVE_SESSIONS {
        let (client, url, semaphore) = (client.clone(), url.clone(), semaphore.clone());
        sends.push(tokio::spawn(async move {
            let _permit = semaphore.acquire().await.unwrap();
            let response = client
                .post(url)
                .bearer_auth(TOKEN)
                .json(&json!({"channel": "whatsapp", "peer": format!("+38592{index:07}"), "text": "hello, remember me"}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
        }));
    }
    for send in sends {
        send.await.unwrap();
    }
    let active = tokio::task::spawn_blocking(move || rss_median(pid))
        .await
        .unwrap();
    let sessions =
        saint_agent::session::SessionStore::open(workspace.join("sessions/transcripts.sqlite3"))
            .unwrap()
            .list()
            .unwrap()
            .len();
    assert_eq!(
        sessions, ACTIVE_SESSIONS,
        "every message opened its own session"
    );
    drop(agent);
    (idle, active)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let bot = InProcess::start_with(|_| {}, RuntimeOptions::default()).await;
        let bare = bare_model_call_ms(&bot.llm).await;
        let plain = measure_turns(&bot, false).await;
        let tool = measure_turns(&bot, true).await;
        let http = measure_http_turns(&bot).await;
        let (idle_rss, active_rss) = measure_rss().await;

        let bare_median = median(bare.clone());
        println!("saint-agent turn benchmark ({MEASURED_TURNS} measured turns each, {WARMUP_TURNS} warm-up; medians)");
        println!("transcripts: SQLite WAL, synchronous=FULL (an fsync per commit) on {}", bot.workspace.display());
        println!();
        println!("| measurement                                   | p50 ms  | p90 ms  |");
        println!("|-----------------------------------------------|---------|---------|");
        let row = |label: &str, values: &Vec<f64>| {
            println!("| {label:<45} | {:>7.3} | {:>7.3} |", median(values.clone()), percentile(values.clone(), 0.9));
        };
        row("baseline: bare model call (scripted, instant)", &bare);
        row("text turn: total", &plain.total);
        row("text turn: model call time", &plain.model);
        row("text turn: agent overhead (total - model)", &plain.overhead);
        row("tool turn (2 model calls + read): total", &tool.total);
        row("tool turn: model call time", &tool.model);
        row("tool turn: agent overhead (total - model)", &tool.overhead);
        row("text turn over the HTTP API (app, total)", &http);
        println!();
        println!(
            "ratio text-turn total / bare model call: {:.2}x; overhead p50 {:.3} ms (target < 5 ms)",
            median(plain.total.clone()) / bare_median,
            median(plain.overhead.clone())
        );
        println!();
        println!("| memory (real binary, VmRSS median of 5 samples) | MB     | share of Node original (256 MB) |");
        println!("|--------------------------------------------------|--------|---------------------------------|");
        println!("| idle after start                                 | {idle_rss:>6.1} | {:>30.1}% |", 100.0 * idle_rss / NODE_ORIGINAL_RSS_MB);
        println!(
            "| after {ACTIVE_SESSIONS} active sessions                       | {active_rss:>6.1} | {:>30.1}% |",
            100.0 * active_rss / NODE_ORIGINAL_RSS_MB
        );
        println!("idle RSS target < 30 MB: {}", if idle_rss < 30.0 { "met" } else { "NOT met" });
    });
}
