//! Message → reply per channel, with the loop and ordering guards on (as every bot runs)
//! and off (only here: `ChannelHub::set_guards_for_benchmarks`), medians of one run.
//!
//! The agent runs in this process, wired as `saint-agent run` wires it (the channel
//! hub, the dispatcher and senders, the HTTP server), against an instant scripted
//! model and the scripted platforms — Telegram (long polling), Slack (Socket Mode),
//! Discord (the Gateway and REST), WhatsApp (signed webhooks, Graph API) — and, when
//! Debian's Dovecot and OpenSMTPD are there and no other OpenSMTPD runs, a real mail
//! server. The guards:
//!
//! - ordering: one turn at a time per lane (`queue::due_inbound`: each lane's oldest
//!   row only) and each conversation's replies in order (`queue::due_outbound`);
//! - loop: each correspondent's answers per window, on channels that cap them
//!   (e-mail's `replyLimitPerHour`, set high here so it counts but never refuses).
//!
//! The HTTP channel has neither; its line compares it with and without its outcome
//! rows (`HttpOutcomes`, group-committed before the response), the other cost the ordering guards added.
//!
//! Every message comes from a sender of its own (a stranger, so the default role): each
//! turn is the first of a fresh session, so the latency does not grow with one
//! session's history as the run goes on, and no sender nears the per-sender rate limit.
//! The two settings alternate message by message (and which goes first, round by
//! round), so drift in a shared machine falls on both alike; besides each setting's
//! median, the table gives the median of the differences within each pair. Latency:
//! the message handed to the platform (webhook POST, update queued, event pushed, mail
//! handed to the MTA; HTTP: the request sent) until the platform received the bot's
//! reply (HTTP: the whole JSON answer; e-mail: the reply's outbox row marked sent after
//! SMTP submission).
//!
//! A mail server's OpenSMTPD keeps its control socket and queue at fixed paths; on a
//! machine where another one runs, give the bench its own:
//! `unshare -m sh -c 'mount --make-rprivate / && mount -t tmpfs tmpfs /run && mount -t
//! tmpfs -o mode=711 tmpfs /var/spool/smtpd && exec <bench executable> --bench'`.
//!
//! cargo bench -p saint-agent --bench channel_guards

#[path = "../tests/mail_server/mod.rs"]
mod mail_server;

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use saint_agent::{
    channel::{
        http::{AppState, app},
        hub::ChannelHub,
        workers::start_workers,
    },
    config_watch::ConfigStore,
    metering::Metering,
    runtime::{EnvLookup, ModelAccess, Outlets, Runtime, RuntimeOptions},
    session::SessionStore,
};
use saint_scripted::llm::{Reply, ScriptedLlm};
use saint_scripted::{
    self as scripted_whatsapp, ScriptedGraph,
    discord::{self, ScriptedDiscord},
    slack::{self, ScriptedSlack},
    telegram::{self, ScriptedTelegram},
};
use saint_tools::toolset::ToolSet;
use serde_json::{Value, json};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

const HTTP_TOKEN: &str = "bench-http-token";
const TELEGRAM_TOKEN: &str = "123456:bench-telegram-token";
const SLACK_BOT_TOKEN: &str = "xoxb-bench";
const SLACK_APP_TOKEN: &str = "xapp-bench";
const DISCORD_TOKEN: &str = "bench-discord-token";
const PHONE_NUMBER_ID: &str = "100000000000001";
const WHATSAPP_TOKEN: &str = "bench-access-token";
const WHATSAPP_SECRET: &str = "bench-app-secret";
const ROUNDS: usize = 20;
const RUNS: usize = 20;
const EMAIL_RUNS: usize = 4;
/// Overrides [`ROUNDS`].
const ROUNDS_ENV: &str = "SAINT_BENCH_ROUNDS";
/// Set: the guards stay on for both settings (an A/A run, to see the noise floor).
const SAME_ENV: &str = "SAINT_BENCH_GUARDS_ALWAYS_ON";
const WAIT: Duration = Duration::from_secs(60);

struct Platforms {
    llm: ScriptedLlm,
    telegram: ScriptedTelegram,
    slack: ScriptedSlack,
    discord: ScriptedDiscord,
    whatsapp: ScriptedGraph,
    mail: Option<Mail>,
}

struct Mail {
    server: mail_server::MailServer,
    dns: mail_server::Dns,
    dkim: mail_server::DkimKey,
}

struct Agent {
    hub: Arc<ChannelHub>,
    state: AppState,
    http: String,
    database: std::path::PathBuf,
    _stop: tokio_util::sync::DropGuard,
}

fn config(directory: &Path, platforms: &Platforms) -> std::path::PathBuf {
    let mut config: Value = serde_json::from_str(include_str!(
        "../config/tests/fixtures/acme-bot-config.json"
    ))
    .unwrap();
    config["model"]["baseUrl"] = json!(platforms.llm.base_url());
    config["memory"]["enabled"] = json!(false);
    let mut channels = vec![
        json!({"name": "api", "kind": "http", "secretEnv": {"token": "HTTP_TOKEN"}}),
        json!({"name": "telegram", "kind": "telegram",
               "settings": {"apiBaseUrl": platforms.telegram.base_url()},
               "secretEnv": {"botToken": "TG_TOKEN"}}),
        json!({"name": "slack", "kind": "slack",
               "settings": {"apiBaseUrl": platforms.slack.api_url()},
               "secretEnv": {"botToken": "SLACK_BOT", "appToken": "SLACK_APP"}}),
        json!({"name": "discord", "kind": "discord",
               "settings": {"apiBaseUrl": platforms.discord.api_base_url()},
               "secretEnv": {"botToken": "DISCORD_TOKEN"}}),
        json!({"name": "whatsapp", "kind": "whatsapp",
               "settings": {"phoneNumberId": PHONE_NUMBER_ID, "apiBaseUrl": platforms.whatsapp.base_url()},
               "secretEnv": {"accessToken": "WA_TOKEN", "appSecret": "WA_SECRET", "verifyToken": "WA_VERIFY"}}),
    ];
    if let Some(mail) = &platforms.mail {
        channels.push(json!({"name": "email", "kind": "email",
            "settings": {"address": mail_server::BOT, "imapHost": "127.0.0.1",
                         "imapPort": mail.server.imap.to_string(), "imapSecurity": "none",
                         "smtpHost": "127.0.0.1", "smtpPort": mail.server.submission.to_string(),
                         "smtpSecurity": "none", "dnsServer": mail.dns.address.to_string(),
                         // Counted on every message, never reached.
                         "replyLimitPerHour": "10000"},
            "secretEnv": {"password": "MAIL_PASSWORD"}}));
    }
    config["channels"] = Value::Array(channels);
    let path = directory.join("bot-config.json");
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

/// The agent, wired as `saint-agent run` wires it (less the sandbox and the scheduler).
async fn start_agent(directory: &Path, platforms: &Platforms) -> Agent {
    let workspace = directory.join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(
        workspace.join("SOUL.md"),
        "You are Acme's helpful colleague.",
    )
    .unwrap();
    let workspace = workspace.canonicalize().unwrap();
    let variables: HashMap<&str, &str> = HashMap::from([
        ("SAINT_MODEL_API_KEY", "sk-bench"),
        ("HTTP_TOKEN", HTTP_TOKEN),
        ("TG_TOKEN", TELEGRAM_TOKEN),
        ("SLACK_BOT", SLACK_BOT_TOKEN),
        ("SLACK_APP", SLACK_APP_TOKEN),
        ("DISCORD_TOKEN", DISCORD_TOKEN),
        ("WA_TOKEN", WHATSAPP_TOKEN),
        ("WA_SECRET", WHATSAPP_SECRET),
        ("WA_VERIFY", "verify"),
        ("MAIL_PASSWORD", mail_server::BOT_PASSWORD),
    ]);
    let env: EnvLookup = Arc::new(move |name| variables.get(name).map(|value| value.to_string()));
    let config = Arc::new(ConfigStore::load(config(directory, platforms)).unwrap());
    let database = workspace.join("sessions/transcripts.sqlite3");
    let store = Arc::new(SessionStore::open(&database).unwrap());
    let metering = Arc::new(Metering::open(&workspace).unwrap());
    let lookup = env.clone();
    let hub = Arc::new(ChannelHub::from_config(
        &config.last_good(),
        Some(config.clone()),
        &move |name: &str| lookup(name),
        store.clone(),
        metering.clone(),
        &workspace,
    ));
    let declared = config.last_good();
    for channel in declared
        .channels
        .iter()
        .filter(|channel| channel.name != "api")
    {
        assert!(
            hub.channel(&channel.name).is_some(),
            "channel {} is not served: {:?}",
            channel.name,
            saint_agent::channel::startup::channel_problems(&declared, |name| env(name))
        );
    }
    let options = RuntimeOptions::default();
    let model = ModelAccess::new(None, env.clone(), options.client.clone());
    let tools = ToolSet::builtin(&workspace, store.clone(), env.clone());
    let runtime = Arc::new(Runtime::new(
        config, store, model, tools, metering, workspace, options,
    ));
    let (ready_hub, send_hub) = (hub.clone(), hub.clone());
    runtime.set_outlets(Outlets {
        ready: Arc::new(move |name: &str| {
            if let Some(channel) = ready_hub.channel(name) {
                channel.outbox_ready.notify_one();
            }
        }),
        can_send: Arc::new(move |name: &str| send_hub.channel(name).is_some()),
    });
    let state = AppState::new(runtime.clone(), env).with_channels(hub.clone());
    let stop = CancellationToken::new();
    start_workers(
        &hub,
        runtime,
        TaskTracker::new(),
        stop.clone(),
        stop.clone(),
        stop.clone(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = format!("http://{}", listener.local_addr().unwrap());
    let router = app(state.clone());
    let server_stop = stop.clone();
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(server_stop.cancelled_owned())
        .await
    });
    Agent {
        hub,
        state,
        http,
        database,
        _stop: stop.drop_guard(),
    }
}

/// Until each platform saw the bot connect and, with a mail server, IMAP is open.
async fn wait_connected(agent: &Agent, platforms: &Platforms) {
    let deadline = Instant::now() + WAIT;
    loop {
        let mail_ready = platforms.mail.is_none()
            || count(
                &agent.database,
                "SELECT COUNT(*) FROM channel_cursor WHERE channel = 'email'",
            ) == 1;
        if !platforms.telegram.requests_of("getUpdates").is_empty()
            && platforms.slack.connections() > 0
            && platforms.discord.connected()
            && mail_ready
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the channels did not connect: telegram polled {}, slack sockets {}, discord {}, \
             e-mail {mail_ready}; {:?}",
            platforms.telegram.requests_of("getUpdates").len(),
            platforms.slack.connections(),
            platforms.discord.connected(),
            agent.hub.health_lines()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn count(database: &Path, sql: &str) -> i64 {
    rusqlite::Connection::open(database)
        .and_then(|connection| connection.query_row(sql, [], |row| row.get(0)))
        .unwrap_or(0)
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Channel {
    Http,
    Telegram,
    Slack,
    Discord,
    WhatsApp,
    Email,
}

impl Channel {
    fn label(self) -> &'static str {
        match self {
            Channel::Http => "HTTP (request → JSON reply)",
            Channel::Telegram => "Telegram (update queued → sendMessage received)",
            Channel::Slack => "Slack (event pushed → chat.postMessage received)",
            Channel::Discord => "Discord (MESSAGE_CREATE → message posted)",
            Channel::WhatsApp => "WhatsApp (signed webhook → Graph API send received)",
            Channel::Email => "e-mail (mail to the MTA → reply submitted over SMTP)",
        }
    }
}

/// Sends one message through `channel` and waits for the reply; the latency.
async fn one_message(
    agent: &Agent,
    platforms: &Platforms,
    client: &reqwest::Client,
    channel: Channel,
    serial: u64,
) -> Duration {
    match channel {
        Channel::Http => {
            let started = Instant::now();
            let answer: Value = client
                .post(format!("{}/v1/messages", agent.http))
                .bearer_auth(HTTP_TOKEN)
                .json(&json!({"channel": "telegram", "peer": format!("{}", 500_000_000 + serial), "text": "hello"}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(answer["reply"], "ok", "{answer}");
            started.elapsed()
        }
        Channel::Telegram => {
            let sent = platforms.telegram.sent().len() as u64;
            let started = Instant::now();
            platforms.telegram.push_message(telegram::private_text(
                &telegram::Person::new(500_000_000 + serial as i64, "Bench"),
                "hello",
            ));
            assert!(
                platforms.telegram.wait_for_sent(sent + 1, WAIT).await,
                "telegram reply"
            );
            started.elapsed()
        }
        Channel::Slack => {
            let posted = platforms.slack.posted().len();
            let started = Instant::now();
            platforms.slack.push_event(slack::message_event(
                &format!("DB{serial:07}"),
                "im",
                &format!("UB{serial:07}"),
                &format!("1700000000.{serial:06}"),
                "hello",
            ));
            assert!(
                platforms.slack.wait_for_posted(posted + 1, WAIT).await,
                "slack reply"
            );
            started.elapsed()
        }
        Channel::Discord => {
            let posted = platforms.discord.posted().len();
            let started = Instant::now();
            platforms.discord.dispatch_message(discord::direct_message(
                &format!("{}", 1_300_000_000_000_000_000u64 + serial),
                &format!("{}", 1_200_000_000_000_000_000u64 + serial),
                &format!("{}", 1_400_000_000_000_000_000u64 + serial),
                "hello",
            ));
            assert!(
                platforms.discord.wait_for_posted(posted + 1, WAIT).await,
                "discord reply"
            );
            started.elapsed()
        }
        Channel::WhatsApp => {
            let sent = platforms
                .whatsapp
                .requests()
                .iter()
                .filter(|request| request.body["delivered"] == true)
                .count() as u64;
            let body = serde_json::to_vec(&scripted_whatsapp::text_delivery(
                PHONE_NUMBER_ID,
                &format!("3859{serial:08}"),
                &format!("wamid.bench{serial}"),
                "hello",
            ))
            .unwrap();
            let signature = scripted_whatsapp::signature(WHATSAPP_SECRET, &body);
            let started = Instant::now();
            let status = client
                .post(format!("{}/channels/whatsapp/webhook", agent.http))
                .header("content-type", "application/json")
                .header("x-hub-signature-256", signature)
                .body(body)
                .send()
                .await
                .unwrap()
                .status();
            assert_eq!(status, 200);
            assert!(
                platforms.whatsapp.wait_for_sent(sent + 1, WAIT).await,
                "whatsapp reply"
            );
            started.elapsed()
        }
        Channel::Email => {
            let mail = platforms.mail.as_ref().expect("a mail server");
            let sql = "SELECT COUNT(*) FROM outbox WHERE channel = 'email' AND state = 'sent'";
            let sent = count(&agent.database, sql);
            let from = format!("bench{serial}@acme.example");
            let signed = mail.dkim.sign(&mail_server::mail(
                &from,
                "Bench",
                &format!("bench{serial}@acme.example"),
                "hello",
                "",
            ));
            let started = Instant::now();
            mail.server.deliver(&from, mail_server::BOT, &signed).await;
            while count(&agent.database, sql) <= sent {
                assert!(started.elapsed() < WAIT, "no e-mail reply");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            started.elapsed()
        }
    }
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(|a, b| a.total_cmp(b));
    let middle = samples.len() / 2;
    if samples.len().is_multiple_of(2) {
        f64::midpoint(samples[middle - 1], samples[middle])
    } else {
        samples[middle]
    }
}

/// Whether a mail server can run here: Debian's binaries, and no OpenSMTPD holding the
/// control socket it needs.
fn mail_server_available() -> Result<(), &'static str> {
    if !["/usr/sbin/dovecot", "/usr/sbin/smtpd"]
        .iter()
        .all(|binary| Path::new(binary).exists())
    {
        return Err("Dovecot or OpenSMTPD is not installed");
    }
    if std::os::unix::net::UnixStream::connect("/var/run/smtpd.sock").is_ok() {
        return Err("another OpenSMTPD holds /var/run/smtpd.sock");
    }
    Ok(())
}

fn main() {
    // The agent's log, when asked for (`RUST_LOG=warn`).
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let llm = ScriptedLlm::start().await.unwrap();
        llm.set_fallback(Reply::text("ok"));
        let mail = match mail_server_available() {
            Ok(()) => {
                let server = mail_server::MailServer::start();
                let dns = mail_server::Dns::start();
                let dkim = mail_server::DkimKey::publish(&dns, "acme.example", "sel", 7);
                Some(Mail { server, dns, dkim })
            }
            Err(why) => {
                eprintln!("e-mail left out: {why}");
                None
            }
        };
        let platforms = Platforms {
            llm,
            telegram: ScriptedTelegram::start(TELEGRAM_TOKEN).await.unwrap(),
            slack: ScriptedSlack::start(SLACK_BOT_TOKEN, SLACK_APP_TOKEN)
                .await
                .unwrap(),
            discord: ScriptedDiscord::start(DISCORD_TOKEN, Duration::from_millis(41_250))
                .await
                .unwrap(),
            whatsapp: ScriptedGraph::start(WHATSAPP_TOKEN).await.unwrap(),
            mail,
        };
        let directory = tempfile::tempdir().unwrap();
        let agent = start_agent(directory.path(), &platforms).await;
        wait_connected(&agent, &platforms).await;
        let client = reqwest::Client::new();
        let mut channels = vec![
            Channel::Http,
            Channel::Telegram,
            Channel::Slack,
            Channel::Discord,
            Channel::WhatsApp,
        ];
        if platforms.mail.is_some() {
            channels.push(Channel::Email);
        }
        // Warm up every path once with the guards on.
        let mut serial = 0;
        for &channel in &channels {
            serial += 1;
            one_message(&agent, &platforms, &client, channel, serial).await;
        }
        let mut samples: HashMap<(Channel, bool), Vec<f64>> = HashMap::new();
        // On minus off, per pair of messages sent one after the other.
        let mut paired: HashMap<Channel, Vec<f64>> = HashMap::new();
        // An A/A run: both settings keep the guards on, so the table shows the noise.
        let same = std::env::var_os(SAME_ENV).is_some();
        let rounds = std::env::var(ROUNDS_ENV)
            .ok()
            .and_then(|rounds| rounds.parse().ok())
            .unwrap_or(ROUNDS);
        for round in 0..rounds {
            for &channel in &channels {
                let runs = if channel == Channel::Email { EMAIL_RUNS } else { RUNS };
                // On and off alternate message by message (and which comes first, round
                // by round): drift in a shared machine falls on both alike.
                for _ in 0..runs {
                    let mut pair = [0.0; 2];
                    for step in 0..2 {
                        let guarded = (step + round) % 2 == 0;
                        agent.hub.set_guards_for_benchmarks(guarded || same);
                        agent
                            .state
                            .outcomes
                            .set_recording_for_benchmarks(guarded || same);
                        serial += 1;
                        let latency = one_message(&agent, &platforms, &client, channel, serial)
                            .await
                            .as_secs_f64()
                            * 1000.0;
                        samples.entry((channel, guarded)).or_default().push(latency);
                        pair[usize::from(!guarded)] = latency;
                    }
                    paired.entry(channel).or_default().push(pair[0] - pair[1]);
                }
            }
            eprintln!("round {} of {rounds} done", round + 1);
        }
        agent.hub.set_guards_for_benchmarks(true);
        agent.state.outcomes.set_recording_for_benchmarks(true);
        println!(
            "## Message → reply, guards on and off (medians of one run: {rounds} rounds of \
             {RUNS} messages per channel and setting, {EMAIL_RUNS} for e-mail, on and off \
             alternating message by message; instant scripted model, agent in process)\n"
        );
        println!(
            "| Channel | guards on | guards off | on / off | on − off, median of pairs |\n\
             | --- | --- | --- | --- | --- |"
        );
        for &channel in &channels {
            let on = median(samples.get_mut(&(channel, true)).unwrap());
            let off = median(samples.get_mut(&(channel, false)).unwrap());
            let difference = median(paired.get_mut(&channel).unwrap());
            let name = match channel {
                Channel::Http => format!("{} — outcome rows on / off", channel.label()),
                Channel::Email => format!("{} — loop and ordering guards", channel.label()),
                _ => format!("{} — ordering guard", channel.label()),
            };
            println!(
                "| {name} | {on:.2} ms | {off:.2} ms | {:.3} ({:+.1} %) | {difference:+.3} ms ({:+.1} %) |",
                on / off,
                (on / off - 1.0) * 100.0,
                difference / off * 100.0
            );
        }
        if platforms.mail.is_none() {
            println!("\ne-mail left out (no mail server could start here).");
        }
    });
}
