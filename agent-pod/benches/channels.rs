//! Channels measured against the HTTP channel in the same run, with an instant
//! scripted model and a scripted Graph API (the real agent binary in between):
//!
//! - webhook → durable: a signed WhatsApp delivery until its 200 (sent only after the
//!   inbox commit), p50/p99;
//! - message → first reply byte: WhatsApp (webhook until the Graph API receives the
//!   reply) and e-mail (a DKIM-signed mail handed to the MTA until the bot's SMTP
//!   submission of the reply completed) against HTTP (request until the first streamed
//!   `delta`);
//! - sustained throughput with 100 peers sending 5 messages each at once: messages per
//!   second, and every reply counted (none lost, none duplicated).
//!
//! Needs Debian's dovecot-imapd, dovecot-lmtpd, dovecot-submissiond and opensmtpd
//! (`./test.sh prerequisites` installs them) and root, like the e-mail tests.
//!
//! cargo bench -p saint-agent --bench channels

use std::{
    collections::HashMap,
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

#[path = "../tests/mail_server/mod.rs"]
mod mail_server;

use futures::{StreamExt, future::join_all};
use mail_server::{ANA, BOT, BOT_PASSWORD, DkimKey, Dns, MailServer, mail};
use saint_scripted::llm::{Reply, ScriptedLlm};
use saint_scripted::{self as scripted, ScriptedGraph};
use serde_json::{Value, json};

const PHONE_NUMBER_ID: &str = "100000000000001";
const ACCESS_TOKEN: &str = "bench-access-token";
const APP_SECRET: &str = "bench-app-secret";
const HTTP_TOKEN: &str = "bench-http-token";
const LATENCY_RUNS: usize = 200;
const PEERS: usize = 100;
const PER_PEER: usize = 5;
const EMAIL_RUNS: usize = 20;

struct Agent {
    child: Child,
    http: String,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_agent(
    directory: &Path,
    llm: &ScriptedLlm,
    graph: &ScriptedGraph,
    mail: &MailServer,
    dns: &Dns,
) -> Agent {
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
    config["model"]["baseUrl"] = json!(llm.base_url());
    config["memory"]["enabled"] = json!(false);
    config["channels"] = json!([
        {"name": "api", "kind": "http", "secretEnv": {"token": "HTTP_TOKEN"}},
        {"name": "whatsapp", "kind": "whatsapp",
         "settings": {"phoneNumberId": PHONE_NUMBER_ID, "apiBaseUrl": graph.base_url()},
         "secretEnv": {"accessToken": "WA_TOKEN", "appSecret": "WA_SECRET", "verifyToken": "WA_VERIFY"}},
        {"name": "email", "kind": "email",
         "settings": {"address": BOT, "imapHost": "127.0.0.1", "imapPort": mail.imap.to_string(),
                      "imapSecurity": "none", "smtpHost": "127.0.0.1",
                      "smtpPort": mail.submission.to_string(), "smtpSecurity": "none",
                      "dnsServer": dns.address.to_string()},
         "secretEnv": {"password": "MAIL_PASSWORD"}},
    ]);
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
        .env("WA_TOKEN", ACCESS_TOKEN)
        .env("WA_SECRET", APP_SECRET)
        .env("WA_VERIFY", "verify")
        .env("MAIL_PASSWORD", BOT_PASSWORD)
        .env("SAINT_SANDBOX_STATE", directory.join("sandbox-state"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("saint-agent starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let http = line
        .split_whitespace()
        .find_map(|part| part.strip_prefix("http="))
        .unwrap_or_else(|| panic!("saint-agent did not report its address: {line:?}"))
        .to_string();
    Agent {
        child,
        http: format!("http://{http}"),
    }
}

fn percentile(samples: &mut [Duration], share: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * share).round() as usize]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

async fn post_webhook(client: &reqwest::Client, url: &str, from: &str, id: &str) -> u16 {
    let body =
        serde_json::to_vec(&scripted::text_delivery(PHONE_NUMBER_ID, from, id, "hello")).unwrap();
    let signature = scripted::signature(APP_SECRET, &body);
    client
        .post(url)
        .header("content-type", "application/json")
        .header("x-hub-signature-256", signature)
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn http_first_delta(client: &reqwest::Client, url: &str, peer: &str) -> Duration {
    let started = Instant::now();
    let response = client
        .post(url)
        .bearer_auth(HTTP_TOKEN)
        .json(&json!({"channel": "whatsapp", "peer": peer, "text": "hello", "stream": true}))
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

async fn http_reply(client: &reqwest::Client, url: &str, peer: &str) -> bool {
    let response = client
        .post(url)
        .bearer_auth(HTTP_TOKEN)
        .json(&json!({"channel": "whatsapp", "peer": peer, "text": "hello"}))
        .send()
        .await
        .unwrap();
    response.status() == 200 && response.json::<Value>().await.unwrap()["reply"] == "ok"
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
        let graph = ScriptedGraph::start(ACCESS_TOKEN).await.unwrap();
        let directory = tempfile::tempdir().unwrap();
        let mail_server = MailServer::start();
        let dns = Dns::start();
        let dkim = DkimKey::publish(&dns, "acme.example", "sel", 7);
        let agent = spawn_agent(directory.path(), &llm, &graph, &mail_server, &dns);
        let database = directory.path().join("workspace/sessions/transcripts.sqlite3");
        let count = |sql: &str| -> i64 {
            rusqlite::Connection::open(&database)
                .and_then(|connection| connection.query_row(sql, [], |row| row.get(0)))
                .unwrap_or(0)
        };
        let client = reqwest::Client::new();
        let webhook = format!("{}/channels/whatsapp/webhook", agent.http);
        let messages = format!("{}/v1/messages", agent.http);
        let wait = Duration::from_secs(120);

        // 1. Webhook → durable, each from its own sender (no per-sender limit applies).
        let mut durable = Vec::with_capacity(LATENCY_RUNS);
        for index in 0..LATENCY_RUNS {
            let started = Instant::now();
            assert_eq!(post_webhook(&client, &webhook, &format!("3859100{index:05}"), &format!("wamid.D{index}")).await, 200);
            durable.push(started.elapsed());
        }
        assert!(graph.wait_for_sent(LATENCY_RUNS as u64, wait).await, "replies to phase 1");

        // 2. First reply byte: WhatsApp against HTTP.
        let mut whatsapp = Vec::with_capacity(LATENCY_RUNS);
        for index in 0..LATENCY_RUNS {
            let id = format!("wamid.F{index}");
            let started = Instant::now();
            assert_eq!(post_webhook(&client, &webhook, &format!("3859200{index:05}"), &id).await, 200);
            assert!(graph.wait_for_sent((LATENCY_RUNS + index + 1) as u64, wait).await);
            let sent_at = graph
                .requests()
                .iter()
                .rev()
                .find(|request| request.body["context"]["message_id"] == id.as_str() && request.body["delivered"] == true)
                .map(|request| request.at)
                .unwrap();
            whatsapp.push(sent_at - started);
        }
        let mut http = Vec::with_capacity(LATENCY_RUNS);
        for index in 0..LATENCY_RUNS {
            http.push(http_first_delta(&client, &messages, &format!("+3859300{index:05}")).await);
        }

        let mut email = Vec::with_capacity(EMAIL_RUNS);
        let connected = Instant::now();
        while count("SELECT COUNT(*) FROM channel_cursor WHERE channel = 'email'") == 0 {
            assert!(connected.elapsed() < wait, "the e-mail channel never connected");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for index in 0..EMAIL_RUNS {
            let signed = dkim.sign(&mail(ANA, "Bench", &format!("b{index}@acme.example"), "hello", ""));
            let started = Instant::now();
            mail_server.deliver(ANA, BOT, &signed).await;
            while count("SELECT COUNT(*) FROM outbox WHERE channel = 'email' AND state = 'sent'") <= index as i64 {
                assert!(started.elapsed() < wait, "no e-mail reply");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            email.push(started.elapsed());
        }

        // 3. Throughput: 100 peers, 5 messages each, all at once.
        let before = graph.requests().iter().filter(|request| request.body["delivered"] == true).count() as u64;
        let started = Instant::now();
        join_all((0..PEERS).map(|peer| {
            let (client, webhook) = (client.clone(), webhook.clone());
            async move {
                for message in 0..PER_PEER {
                    let status = post_webhook(&client, &webhook, &format!("3859400{peer:05}"), &format!("wamid.T{peer}.{message}")).await;
                    assert_eq!(status, 200);
                }
            }
        }))
        .await;
        assert!(graph.wait_for_sent(before + (PEERS * PER_PEER) as u64, wait).await, "throughput replies");
        let whatsapp_elapsed = started.elapsed();
        let mut replies: HashMap<String, usize> = HashMap::new();
        for request in graph.requests() {
            if request.body["delivered"] == true
                && let Some(id) = request.body["context"]["message_id"].as_str()
                && id.starts_with("wamid.T")
            {
                *replies.entry(id.to_string()).or_default() += 1;
            }
        }
        let whatsapp_lost = PEERS * PER_PEER - replies.len();
        let whatsapp_duplicated = replies.values().filter(|count| **count > 1).count();

        let started = Instant::now();
        let answered: Vec<usize> = join_all((0..PEERS).map(|peer| {
            let (client, messages) = (client.clone(), messages.clone());
            async move {
                let mut answered = 0;
                for _ in 0..PER_PEER {
                    answered += usize::from(http_reply(&client, &messages, &format!("+3859500{peer:05}")).await);
                }
                answered
            }
        }))
        .await;
        let http_elapsed = started.elapsed();
        let http_answered: usize = answered.iter().sum();

        let total = (PEERS * PER_PEER) as f64;
        println!("channels bench ({LATENCY_RUNS} runs per latency, {PEERS} peers x {PER_PEER} messages; instant scripted model)");
        println!(
            "webhook -> durable (200 after the inbox commit): p50 {:.2} ms, p99 {:.2} ms",
            ms(percentile(&mut durable, 0.5)),
            ms(percentile(&mut durable, 0.99))
        );
        let (whatsapp_p50, http_p50) = (percentile(&mut whatsapp, 0.5), percentile(&mut http, 0.5));
        println!(
            "message -> first reply byte: whatsapp p50 {:.2} ms p99 {:.2} ms | http (baseline) p50 {:.2} ms p99 {:.2} ms | ratio {:.2}x",
            ms(whatsapp_p50),
            ms(percentile(&mut whatsapp, 0.99)),
            ms(http_p50),
            ms(percentile(&mut http, 0.99)),
            whatsapp_p50.as_secs_f64() / http_p50.as_secs_f64()
        );
        println!(
            "message -> reply submitted: e-mail p50 {:.2} ms p99 {:.2} ms ({EMAIL_RUNS} runs; MTA, LMTP, IMAP IDLE, DKIM check, SMTP submission included)",
            ms(percentile(&mut email, 0.5)),
            ms(percentile(&mut email, 0.99))
        );
        println!(
            "throughput: whatsapp {:.0} messages/s ({} lost, {} duplicated) | http (baseline) {:.0} messages/s ({} of {} answered) | ratio {:.2}x",
            total / whatsapp_elapsed.as_secs_f64(),
            whatsapp_lost,
            whatsapp_duplicated,
            total / http_elapsed.as_secs_f64(),
            http_answered,
            PEERS * PER_PEER,
            (total / whatsapp_elapsed.as_secs_f64()) / (total / http_elapsed.as_secs_f64())
        );
        assert_eq!((whatsapp_lost, whatsapp_duplicated), (0, 0));
        drop(agent);
        drop(mail_server);
    });
}
