//! Benchmark: what the model failover chain costs and saves. Reports medians from one
//! run: the time a turn spends in the chain around its model attempts on a healthy
//! primary (reservation, key choice, metering; target under 100 µs), and the time to
//! first token when the primary is down and the fallback answers — a primary refusing
//! connections (retried with the tests' 5–20 ms backoff first), one refusing its key,
//! and one cooling down after that (skipped).
//!
//! Run: `cargo bench -p saint-agent --bench failover`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use common::*;
use saint_agent::runtime::{Inbound, RuntimeOptions, TurnEvent};
use saint_config::{ChannelIdentity, ChannelKind};
use saint_llm::CancellationToken;
use saint_scripted::llm::{Reply, ScriptedLlm};
use serde_json::{Value, json};

const WARMUP: usize = 30;
const MEASURED: usize = 300;
const MEASURED_FAILOVERS: usize = 60;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) {
        f64::midpoint(values[middle - 1], values[middle])
    } else {
        values[middle]
    }
}

/// The example company with an OpenAI-wire fallback at `fallback`, adjusted.
async fn bot(fallback: &ScriptedLlm, adjust: impl FnOnce(&mut Value)) -> InProcess {
    let url = fallback.base_url();
    InProcess::start_with(
        move |config| {
            config["model"]["fallbacks"] =
                json!([{"provider": "openai", "name": "gpt-4.1", "baseUrl": url}]);
            config["model"]["prices"]["gpt-4.1"] =
                json!({"inputPerMtok": 2.0, "outputPerMtok": 8.0});
            adjust(config);
        },
        RuntimeOptions::default(),
    )
    .await
}

/// A URL nothing listens on: connections are refused.
fn refused_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{address}")
}

fn inbound(index: usize) -> Inbound {
    Inbound::direct(
        ChannelIdentity::parse(ChannelKind::Whatsapp, &format!("+38591{:07}", index % 50))
            .expect("a phone number"),
        format!("question number {index}"),
    )
}

/// Microseconds a turn spent in the chain around its attempts, healthy primary.
async fn wrapper_overhead(bot: &InProcess) -> Vec<f64> {
    let mut samples = Vec::new();
    for index in 0..WARMUP + MEASURED {
        bot.llm.push(Reply::text("Sure, here you go."));
        let reply = bot
            .runtime
            .handle(inbound(index), None, CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(reply.model_calls, 1);
        if index >= WARMUP {
            samples.push(reply.failover_time.as_secs_f64() * 1e6);
        }
    }
    samples
}

/// Milliseconds from the message to the first streamed token.
async fn first_token(bot: &InProcess, fallback: &ScriptedLlm, count: usize) -> Vec<f64> {
    let mut samples = Vec::new();
    for index in 0..count {
        fallback.push(Reply::text("The fallback answers."));
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        let runtime = bot.runtime.clone();
        let started = Instant::now();
        let turn = tokio::spawn(async move {
            runtime
                .handle(inbound(index), Some(sender), CancellationToken::new())
                .await
        });
        let mut first = None;
        while let Some(event) = receiver.recv().await {
            if matches!(event, TurnEvent::TextDelta(_)) {
                first = Some(started.elapsed());
                break;
            }
        }
        turn.await.unwrap().unwrap();
        samples.push(first.expect("a token streamed").as_secs_f64() * 1e3);
    }
    samples
}

fn main() {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    tokio.block_on(async {
        let fallback = ScriptedLlm::start().await.unwrap();

        let healthy = bot(&fallback, |_| {}).await;
        let overhead = median(wrapper_overhead(&healthy).await);
        drop(healthy);

        let refused_url = refused_url();
        let refused = bot(&fallback, |config| {
            config["model"]["baseUrl"] = json!(refused_url);
        })
        .await;
        let refused_ms = median(first_token(&refused, &fallback, MEASURED_FAILOVERS).await);
        drop(refused);

        // A refused key with no cool-down: every turn tries the primary first.
        let unauthorized = bot(&fallback, |config| {
            config["model"]["failover"] = json!({"coolDownSeconds": 0});
        })
        .await;
        unauthorized.llm.set_fallback(Reply::failure(
            401,
            None,
            "authentication_error",
            "invalid x-api-key",
        ));
        let unauthorized_ms =
            median(first_token(&unauthorized, &fallback, MEASURED_FAILOVERS).await);

        // The same primary with the default cool-down: refused once, then skipped.
        let cooling = bot(&fallback, |_| {}).await;
        cooling.llm.set_fallback(Reply::failure(
            401,
            None,
            "authentication_error",
            "invalid x-api-key",
        ));
        first_token(&cooling, &fallback, 1).await;
        let cooling_ms = median(first_token(&cooling, &fallback, MEASURED_FAILOVERS).await);

        // The same call when the fallback is the only model, for comparison.
        let direct = InProcess::start_with(
            |config| {
                config["model"]["provider"] = json!("openai");
                config["model"]["name"] = json!("gpt-4.1");
                config["model"]["baseUrl"] = json!(fallback.base_url());
                config["model"]["prices"]["gpt-4.1"] =
                    json!({"inputPerMtok": 2.0, "outputPerMtok": 8.0});
            },
            RuntimeOptions::default(),
        )
        .await;
        let direct_ms = median(first_token(&direct, &fallback, MEASURED_FAILOVERS).await);

        println!("failover chain, medians of one run");
        println!(
            "  wrapper overhead per model call, healthy primary: {overhead:.1} µs (target < 100 µs; {MEASURED} turns)"
        );
        println!("  time to first token, fallback as the only model: {direct_ms:.2} ms");
        println!(
            "  time to first token, primary refusing connections (4 retries, 5–20 ms backoff): {refused_ms:.2} ms"
        );
        println!("  time to first token, primary refusing its key (401): {unauthorized_ms:.2} ms");
        println!("  time to first token, primary cooling down (skipped): {cooling_ms:.2} ms");
    });
}
