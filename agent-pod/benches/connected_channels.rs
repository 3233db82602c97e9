//! The four channels that connect out — Telegram (long polling), Slack (Socket Mode),
//! Discord (the Gateway) and Matrix (`/sync` against a real Synapse) — measured against
//! the HTTP channel in the same run, with an instant scripted model and the real agent
//! binary:
//!
//! - idle memory: the agent's RSS with only the HTTP channel, and with all four channels
//!   connected as well, each settled for a few seconds after every channel connected;
//!   medians of alternating rounds, and the difference (target: under 8 MB for all four);
//! - message → first reply byte: a direct message until the platform received the
//!   bot's reply (for Matrix: until the sender's `/sync` long poll returned it), against
//!   HTTP (request until the first streamed `delta`).
//!
//! Needs Synapse (`./test.sh synapse`).
//!
//! cargo bench -p saint-agent --bench connected_channels

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

#[path = "../tests/synapse/mod.rs"]
mod synapse;

use futures::StreamExt;
use saint_scripted::llm::{Reply, ScriptedLlm};
use saint_scripted::{
    discord::{self, ScriptedDiscord},
    slack::{self, ScriptedSlack},
    telegram::{self, ScriptedTelegram},
};
use serde_json::{Value, json};
use synapse::{Synapse, User};

const HTTP_TOKEN: &str = "bench-http-token";
const TELEGRAM_TOKEN: &str = "123456:bench-telegram-token";
const SLACK_BOT_TOKEN: &str = "xoxb-bench";
const SLACK_APP_TOKEN: &str = "xapp-bench";
const DISCORD_TOKEN: &str = "bench-discord-token";
const DISCORD_IVAN: &str = "80351110224678913";
const MEMORY_ROUNDS: usize = 5;
const SETTLE: Duration = Duration::from_secs(3);
const LATENCY_RUNS: usize = 50;
const MEMORY_ROUNDS_ENV: &str = "SAINT_BENCH_MEMORY_ROUNDS";
const WAIT: Duration = Duration::from_secs(30);

struct Agent {
    child: Child,
    http: String,
    /// The metrics listener, whose `/readyz` names what does not work.
    metrics: String,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    /// Resident set size, from `/proc`.
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/<pid>/status")
    }
}

struct Platforms {
    llm: ScriptedLlm,
    telegram: ScriptedTelegram,
    slack: ScriptedSlack,
    discord: ScriptedDiscord,
    synapse: &'static Synapse,
    bot: User,
    ana: User,
}

fn spawn_agent(directory: &Path, platforms: &Platforms, connected: bool) -> Agent {
    let workspace = directory.join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(
        workspace.join("SOUL.md"),
        "You are Acme's helpful colleague.",
    )
    .unwrap();
    let mut config: Value = serde_json::from_str(include_str!(
        "../config/tests/fixtures/acme-bot-config.json"
    ))
    .unwrap();
    config["model"]["baseUrl"] = json!(platforms.llm.base_url());
    config["memory"]["enabled"] = json!(false);
    // The senders are Contacts (strangers are rate-limited, which this does not
    // measure): Ana invites the bot on Matrix (it joins only for a Contact), Ivan
    // writes on Telegram, Slack (the fixture's ids) and Discord.
    for (slug, identity) in [
        ("ana", format!("matrix:{}", platforms.ana.id)),
        ("ivan", format!("discord:{DISCORD_IVAN}")),
    ] {
        for contact in config["contacts"].as_array_mut().unwrap() {
            if contact["slug"] == slug {
                contact["identities"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!(identity));
            }
        }
        if let Some(links) = config["identityLinks"][slug].as_array_mut() {
            links.push(json!(identity));
        }
    }
    let mut channels =
        vec![json!({"name": "api", "kind": "http", "secretEnv": {"token": "HTTP_TOKEN"}})];
    if connected {
        channels.extend([
            json!({"name": "telegram", "kind": "telegram",
                   "settings": {"apiBaseUrl": platforms.telegram.base_url()},
                   "secretEnv": {"botToken": "TG_TOKEN"}}),
            json!({"name": "slack", "kind": "slack",
                   "settings": {"apiBaseUrl": platforms.slack.api_url()},
                   "secretEnv": {"botToken": "SLACK_BOT", "appToken": "SLACK_APP"}}),
            json!({"name": "discord", "kind": "discord",
                   "settings": {"apiBaseUrl": platforms.discord.api_base_url()},
                   "secretEnv": {"botToken": "DISCORD_TOKEN"}}),
            json!({"name": "matrix", "kind": "matrix",
                   "settings": {"homeserverUrl": platforms.synapse.base_url,
                                "userId": platforms.bot.id},
                   "secretEnv": {"accessToken": "MATRIX_TOKEN"}}),
        ]);
    }
    config["channels"] = Value::Array(channels);
    let config_path = directory.join("bot-config.json");
    std::fs::write(&config_path, serde_json::to_string(&config).unwrap()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_saint-agent"))
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .arg("--config")
        .arg(&config_path)
        .arg("--workspace")
        .arg(&workspace)
        .env_clear()
        .env("RUST_LOG", "error")
        .env("SAINT_MODEL_API_KEY", "sk-bench")
        .env("HTTP_TOKEN", HTTP_TOKEN)
        .env("TG_TOKEN", TELEGRAM_TOKEN)
        .env("SLACK_BOT", SLACK_BOT_TOKEN)
        .env("SLACK_APP", SLACK_APP_TOKEN)
        .env("DISCORD_TOKEN", DISCORD_TOKEN)
        .env("MATRIX_TOKEN", &platforms.bot.token)
        .env("SAINT_SANDBOX_STATE", directory.join("sandbox-state"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("saint-agent starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address = |name: &str| {
        line.split_whitespace()
            .find_map(|part| part.strip_prefix(&format!("{name}=")))
            .map(|address| format!("http://{address}"))
            .unwrap_or_else(|| panic!("saint-agent did not report its addresses: {line:?}"))
    };
    Agent {
        http: address("http"),
        metrics: address("metrics"),
        child,
    }
}

/// Waits until `/readyz` lists no channel problem and each scripted platform saw the
/// bot connect (a pending long poll, a socket, an identified Gateway session).
async fn wait_connected(
    agent: &Agent,
    platforms: &Platforms,
    polls_before: usize,
    sockets_before: u64,
) {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + WAIT;
    loop {
        let ready = client
            .get(format!("{}/readyz", agent.metrics))
            .send()
            .await
            .ok()
            .filter(|response| response.status() == 200);
        let clean = match ready {
            Some(response) => !response
                .text()
                .await
                .unwrap_or_default()
                .contains("warning:"),
            None => false,
        };
        if clean
            && platforms.telegram.requests_of("getUpdates").len() > polls_before
            && platforms.slack.connections() > sockets_before
            && platforms.discord.connected()
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the channels did not all connect within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(|a, b| a.total_cmp(b));
    samples[samples.len() / 2]
}

async fn http_first_delta(client: &reqwest::Client, agent: &Agent, peer: &str) -> Duration {
    let started = Instant::now();
    let response = client
        .post(format!("{}/v1/messages", agent.http))
        .bearer_auth(HTTP_TOKEN)
        .json(&json!({"channel": "telegram", "peer": peer, "text": "hello", "stream": true}))
        .send()
        .await
        .unwrap();
    let mut body = response.bytes_stream();
    let mut seen = String::new();
    while let Some(Ok(chunk)) = body.next().await {
        seen.push_str(&String::from_utf8_lossy(&chunk));
        if seen.contains("event: delta") {
            return started.elapsed();
        }
    }
    panic!("no delta in {seen:?}");
}

/// The sender's next `/sync` batch token.
async fn sync_token(user: &User) -> String {
    let (_, answer) = user
        .call(reqwest::Method::GET, "sync?timeout=0", None)
        .await;
    answer["next_batch"].as_str().unwrap().to_string()
}

/// Long-polls the sender's `/sync` from `since` until a message from `from` arrives in
/// `room`; returns the new token.
async fn wait_for_matrix_reply(user: &User, room: &str, from: &str, mut since: String) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, answer) = user
            .call(
                reqwest::Method::GET,
                &format!("sync?timeout=10000&since={since}"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{answer}");
        since = answer["next_batch"].as_str().unwrap().to_string();
        let events = answer["rooms"]["join"][room]["timeline"]["events"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if events
            .iter()
            .any(|event| event["type"] == "m.room.message" && event["sender"] == from)
        {
            return since;
        }
        assert!(Instant::now() < deadline, "no Matrix reply within {WAIT:?}");
    }
}

fn report(name: &str, samples: &mut [f64], baseline: f64) {
    let value = median(samples);
    println!("| {name} | {value:.2} ms | {:.2}x |", value / baseline);
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let llm = ScriptedLlm::start().await.unwrap();
        llm.set_fallback(Reply::text("ok"));
        let synapse = Synapse::shared();
        let platforms = Platforms {
            llm,
            telegram: ScriptedTelegram::start(TELEGRAM_TOKEN).await.unwrap(),
            slack: ScriptedSlack::start(SLACK_BOT_TOKEN, SLACK_APP_TOKEN).await.unwrap(),
            // Discord's own interval: a short one would make heartbeats the idle cost.
            discord: ScriptedDiscord::start(DISCORD_TOKEN, Duration::from_millis(41_250))
                .await
                .unwrap(),
            synapse,
            bot: synapse.register("bench-bot").await,
            ana: synapse.register("bench-ana").await,
        };

        // Idle memory, alternating so drift in the machine affects both alike.
        let (mut http_only, mut all_four) = (Vec::new(), Vec::new());
        let rounds = std::env::var(MEMORY_ROUNDS_ENV).ok().and_then(|n| n.parse().ok()).unwrap_or(MEMORY_ROUNDS);
        for round in 0..rounds {
            for connected in [false, true] {
                let directory = tempfile::tempdir().unwrap();
                let (polls, sockets) = (
                    platforms.telegram.requests_of("getUpdates").len(),
                    platforms.slack.connections(),
                );
                let agent = spawn_agent(directory.path(), &platforms, connected);
                if connected {
                    wait_connected(&agent, &platforms, polls, sockets).await;
                }
                tokio::time::sleep(SETTLE).await;
                let rss = agent.rss_kib() as f64 / 1024.0;
                eprintln!("round {round}: connected={connected}: RSS {rss:.2} MiB");
                if connected { &mut all_four } else { &mut http_only }.push(rss);
                drop(agent);
                // Discord notices the closed socket before the next round connects.
                platforms
                    .discord
                    .wait_until(WAIT, |discord| !discord.connected())
                    .await;
            }
        }
        let (idle_http, idle_all) = (median(&mut http_only), median(&mut all_four));
        println!("## Idle memory (median of {MEMORY_ROUNDS} rounds, RSS after {SETTLE:?} settled)\n");
        println!("| Agent | RSS |\n| --- | --- |");
        println!("| HTTP channel only | {idle_http:.2} MiB |");
        println!("| + Telegram, Slack, Discord, Matrix connected | {idle_all:.2} MiB |");
        println!(
            "| difference (all four) | {:.2} MiB ({:.2} MiB per channel) |\n",
            idle_all - idle_http,
            (idle_all - idle_http) / 4.0
        );

        // Message → first reply byte, one agent serving everything.
        let directory = tempfile::tempdir().unwrap();
        let (polls, sockets) = (
            platforms.telegram.requests_of("getUpdates").len(),
            platforms.slack.connections(),
        );
        let agent = spawn_agent(directory.path(), &platforms, true);
        wait_connected(&agent, &platforms, polls, sockets).await;
        let client = reqwest::Client::new();
        let room = platforms
            .ana
            .create_room(json!({"is_direct": true, "invite": [platforms.bot.id],
                                "preset": "trusted_private_chat"}))
            .await;
        let deadline = Instant::now() + WAIT;
        while platforms.ana.membership(&room, &platforms.bot.id).await.as_deref() != Some("join") {
            assert!(Instant::now() < deadline, "the bot did not join Ana's room");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Synapse's own share: Ana's message until her own `/sync` returns it (the bot's
        // path has two such hops: her message to the bot, its reply to her).
        let alone = platforms.ana.create_room(json!({"preset": "private_chat"})).await;
        let mut echo_ms = Vec::new();
        let mut echo_since = sync_token(&platforms.ana).await;
        for _ in 0..LATENCY_RUNS {
            let started = Instant::now();
            platforms.ana.say(&alone, "note to self").await;
            echo_since =
                wait_for_matrix_reply(&platforms.ana, &alone, &platforms.ana.id, echo_since).await;
            echo_ms.push(ms(started.elapsed()));
        }
        let mut http = Vec::new();
        let (mut telegram_ms, mut slack_ms, mut discord_ms, mut matrix_ms) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let ivan = telegram::Person::new(333_333_333, "Ivan");
        let mut since = sync_token(&platforms.ana).await;
        for run in 0..LATENCY_RUNS {
            http.push(ms(http_first_delta(&client, &agent, &format!("{}", 100 + run)).await));

            let sent = platforms.telegram.sent().len() as u64;
            let started = Instant::now();
            platforms.telegram.push_message(telegram::private_text(&ivan, "hello"));
            assert!(platforms.telegram.wait_for_sent(sent + 1, WAIT).await, "telegram reply");
            telegram_ms.push(ms(started.elapsed()));

            let posted = platforms.slack.posted().len();
            let started = Instant::now();
            platforms.slack.push_event(slack::message_event(
                "D0BENCH",
                "im",
                "U024BK3",
                &format!("1700000000.{run:06}"),
                "hello",
            ));
            assert!(platforms.slack.wait_for_posted(posted + 1, WAIT).await, "slack reply");
            slack_ms.push(ms(started.elapsed()));

            let posted = platforms.discord.posted().len();
            let started = Instant::now();
            let dispatched = platforms.discord.dispatch_message(discord::direct_message(
                &format!("{}", 1_300_000_000_000_000_000u64 + run as u64),
                "1200000000000000001",
                DISCORD_IVAN,
                "hello",
            ));
            assert!(
                platforms.discord.wait_for_posted(posted + 1, WAIT).await,
                "no Discord reply to run {run} (dispatched as {dispatched:?}); gateway saw {:?}; REST saw {:?}",
                platforms.discord.gateway_log(),
                platforms.discord.requests()
            );
            discord_ms.push(ms(started.elapsed()));

            let started = Instant::now();
            platforms.ana.say(&room, "hello").await;
            since = wait_for_matrix_reply(&platforms.ana, &room, &platforms.bot.id, since).await;
            matrix_ms.push(ms(started.elapsed()));
        }
        let baseline = median(&mut http);
        println!("## Message → first reply byte (median of {LATENCY_RUNS}, instant scripted model)\n");
        println!("| Channel | median | vs HTTP |\n| --- | --- | --- |");
        println!("| HTTP (baseline, first streamed delta) | {baseline:.2} ms | 1.00x |");
        report("Telegram (update queued → sendMessage received)", &mut telegram_ms, baseline);
        report("Slack (envelope pushed → chat.postMessage received)", &mut slack_ms, baseline);
        report("Discord (MESSAGE_CREATE dispatched → message posted)", &mut discord_ms, baseline);
        report("Matrix (sent to Synapse → the reply in the sender's /sync)", &mut matrix_ms, baseline);
        println!(
            "\nSynapse alone (a message until the sender's own /sync returns it, median of \
             {LATENCY_RUNS}): {:.2} ms; the Matrix path crosses Synapse twice.",
            median(&mut echo_ms)
        );
    });
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
