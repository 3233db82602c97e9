//! Benchmark: what tracing costs a turn. The same in-process bot runs tool turns (two
//! model calls and a `read`, the scripted model answering at once) with the exporter
//! off — the log layer only, as every bot without `telemetry.otlp` runs — and on — the
//! OTLP layer sending to a collector stand-in on loopback that decodes nothing. Rounds
//! alternate so drift hits both alike. Reports medians and their ratio in one run.
//!
//! Run: `cargo bench -p saint-agent --bench tracing_cost`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use saint_agent::{
    runtime::{Inbound, RuntimeOptions},
    telemetry,
};
use saint_config::{ChannelIdentity, ChannelKind, OtlpConfig};
use saint_llm::CancellationToken;
use saint_scripted::llm::Reply;
use serde_json::json;
use tracing_subscriber::{Layer, filter::FilterExt, layer::SubscriberExt};

const ROUNDS: usize = 6;
const TURNS_PER_ROUND: usize = 100;
const WARMUP_TURNS: usize = 50;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) {
        f64::midpoint(values[middle - 1], values[middle])
    } else {
        values[middle]
    }
}

async fn tool_turns(bot: &InProcess, count: usize, first: usize) -> Vec<f64> {
    let mut samples = Vec::with_capacity(count);
    for index in first..first + count {
        bot.llm
            .push(Reply::tool_call("read", json!({"path": "SOUL.md"})));
        bot.llm.push(Reply::text("Sure, here you go."));
        let inbound = Inbound::direct(
            ChannelIdentity::parse(ChannelKind::Whatsapp, &format!("+38591{:07}", index % 50))
                .expect("a phone number"),
            format!("question number {index}"),
        );
        let started = Instant::now();
        bot.runtime
            .handle(inbound, None, CancellationToken::new())
            .await
            .unwrap();
        samples.push(started.elapsed().as_secs_f64() * 1_000.0);
    }
    samples
}

/// A collector that takes every export and keeps nothing.
async fn start_collector() -> String {
    let app = axum::Router::new().route("/v1/traces", axum::routing::post(|| async { "" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}")
}

fn main() {
    // One thread: the subscriber set for a measurement (a thread-local default) sees
    // every span of the turns it times.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let bot = runtime.block_on(InProcess::start_with(|_| {}, RuntimeOptions::default()));
    let endpoint = runtime.block_on(start_collector());
    let otlp = OtlpConfig {
        endpoint,
        headers_env: Default::default(),
        batch_delay_millis: 200,
    };
    let logs = || {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::sink)
            .json()
            .with_filter(tracing_subscriber::EnvFilter::new("info").and(
                tracing_subscriber::filter::filter_fn(|metadata| {
                    metadata.target() != telemetry::TARGET
                }),
            ))
    };
    let off = tracing_subscriber::registry().with(logs());
    let bot_name = test_config("")["bot"]["name"].as_str().unwrap().to_string();
    let (exporter, exporting) = telemetry::layer(&bot_name, &otlp, &|_| None).unwrap();
    let on = tracing_subscriber::registry().with(logs()).with(exporter);
    let off = tracing::Dispatch::new(off);
    let on = tracing::Dispatch::new(on);

    let mut turn = 0;
    let mut run = |dispatch: &tracing::Dispatch, count: usize| {
        let samples = tracing::dispatcher::with_default(dispatch, || {
            runtime.block_on(tool_turns(&bot, count, turn))
        });
        turn += count;
        samples
    };
    run(&off, WARMUP_TURNS);
    run(&on, WARMUP_TURNS);
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        without.extend(run(&off, TURNS_PER_ROUND));
        with.extend(run(&on, TURNS_PER_ROUND));
    }
    exporting.shutdown();
    std::thread::sleep(Duration::from_millis(10));

    let (off_median, on_median) = (median(without.clone()), median(with.clone()));
    println!(
        "tracing cost per tool turn (2 model calls + read; {} turns each, alternating rounds of {TURNS_PER_ROUND}; medians)",
        ROUNDS * TURNS_PER_ROUND
    );
    println!();
    println!("| exporter                                         | p50 ms  |");
    println!("|--------------------------------------------------|---------|");
    println!("| off (log layer only; baseline)                   | {off_median:>7.3} |");
    println!("| on (OTLP/HTTP to a loopback collector, 4 spans)  | {on_median:>7.3} |");
    println!();
    println!(
        "ratio on / off: {:.3}x; added {:.3} ms per turn",
        on_median / off_median,
        on_median - off_median
    );
}
