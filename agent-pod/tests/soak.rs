//! The chaos soak: one bot serving six channels at once — the HTTP
//! API, WhatsApp, Telegram and Slack against the scripted platform servers, Matrix
//! against a real Synapse and e-mail against a real Dovecot and OpenSMTPD — takes
//! messages from people of every role (Ana the owner, Marko the manager, Ivan the
//! employee, strangers under the default role) while the soak `kill -9`s the agent and,
//! in between, Porter, and cuts the agent's connections to the platform servers. At the
//! end it waits (polling the platforms' records and the inbox, with a deadline) until
//! every message has its outcome and reports, per channel: sent, answered once,
//! duplicated, lost, wrong role, outcome rows, and the message → reply latency.
//!
//! The size and pace come from the environment (docs/testing.md):
//!
//! | variable | default | |
//! | --- | --- | --- |
//! | `SAINT_SOAK_MESSAGES` | 600 | messages in all, spread over the six channels |
//! | `SAINT_SOAK_RATE` | 10 | messages sent per second |
//! | `SAINT_SOAK_KILL_EVERY_SECONDS` | 30, or 12 for the default (short) run | `kill -9` of the agent this often, and of Porter halfway between |
//! | `SAINT_SOAK_DROP_EVERY_SECONDS` | a third of the kill interval | every connection to the platform servers cut this often |
//! | `SAINT_SOAK_SEED` | the clock | the moments of the kills and cuts (printed, to repeat a run) |
//! | `SAINT_SOAK_EXEC_EVERY` | 10 | every that many messages of a channel, a role with `exec` runs a command in its sandbox first, with a Porter key (0: never) |
//!
//! The model (`soak/model.rs`) answers each turn with the marker of the message it
//! answers and the role it was given, read from the system prompt and, separately,
//! from the tools offered; so every reply says by itself which message it answers and
//! under which role. A reply under any role but the sender's is a wrong role.
//!
//! "Duplicated" counts what a person would see twice. A platform whose send takes an
//! idempotency key (Matrix's transaction id; e-mail's Message-ID, which the recipient's
//! client shows once) must show none. WhatsApp, Telegram and Slack take none: a reply
//! the platform accepted just before a kill or a cut connection, and before the outbox
//! recorded it, is sent again — each such duplicate must follow a kill or a cut within
//! a few seconds. The HTTP API has no message id either: a client whose request died
//! with the agent sends it again, and it is then stored (and answered) a second time.
//!
//! The report is printed as a table and written as JSON under the target directory
//! (`target/tmp/soak/`).
//!
//! The two tests at the end reproduce, deterministically and in seconds, the two bugs
//! the soak found, and fail without their fixes.

mod common;
mod mail_server;
#[path = "soak/model.rs"]
mod model;
#[path = "soak/proxy.rs"]
mod proxy;
mod synapse;

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use common::{add_identity, environment, seed_workspace, test_config, write_config};
use futures::TryStreamExt;
use mail_server::{ANA, ANA_PASSWORD, BOT, BOT_PASSWORD, DkimKey, Dns, MailServer};
use model::{EchoModel, parse_answer};
use proxy::ChaosProxy;
use saint_scripted::{
    self as whatsapp, ScriptedGraph,
    slack::{self, ScriptedSlack},
    telegram::{self, Person, ScriptedTelegram},
};
use serde_json::{Value, json};
use synapse::{Synapse, User};
use tokio::sync::watch;

const PHONE_NUMBER_ID: &str = "100000000000009";
const WA_ACCESS_TOKEN: &str = "EAAG-soak-access-token";
const WA_APP_SECRET: &str = "soak-app-secret";
const TG_BOT_TOKEN: &str = "7700000009:AAF-soak-test-token";
const SLACK_BOT_TOKEN: &str = "xoxb-1111-2222-soak";
const SLACK_APP_TOKEN: &str = "xapp-1-A0SAINT-3333-soak";
const SLACK_GENERAL: &str = "C0GENERAL";
const MATRIX_STRANGERS: usize = 4;
/// Messages each stranger identity sends: under the per-sender limit for people who
/// are not Contacts (a burst of 10), so no stranger is ever refused for their rate.
const PER_STRANGER: u64 = 5;

// ---------------------------------------------------------------------------
// Settings

struct Settings {
    messages: u64,
    rate: f64,
    kill_every: Duration,
    drop_every: Duration,
    exec_every: u64,
    seed: u64,
}

/// A small deterministic generator (xorshift64*), seeded from `SAINT_SOAK_SEED` so a
/// run's chaos can be repeated.
struct Random(u64);

impl Random {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `mean`, give or take `spread` of it.
    fn around(&mut self, mean: Duration, spread: f64) -> Duration {
        mean.mul_f64(1.0 - spread + 2.0 * spread * self.next())
    }
}

fn variable<T: std::str::FromStr>(name: &str) -> Option<T> {
    let text = std::env::var(name).ok()?;
    Some(
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a number")),
    )
}

impl Settings {
    fn from_environment() -> Self {
        let messages: Option<u64> = variable("SAINT_SOAK_MESSAGES");
        let short = messages.is_none();
        let kill_every = Duration::from_secs_f64(
            variable("SAINT_SOAK_KILL_EVERY_SECONDS").unwrap_or(if short { 12.0 } else { 30.0 }),
        );
        let drop_every = variable("SAINT_SOAK_DROP_EVERY_SECONDS")
            .map(Duration::from_secs_f64)
            .unwrap_or(kill_every / 3);
        let settings = Self {
            messages: messages.unwrap_or(600),
            rate: variable("SAINT_SOAK_RATE").unwrap_or(10.0),
            kill_every,
            drop_every,
            exec_every: variable("SAINT_SOAK_EXEC_EVERY").unwrap_or(10),
            seed: variable("SAINT_SOAK_SEED").unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
                    | 1
            }),
        };
        assert!(settings.messages > 0 && settings.rate > 0.0);
        assert!(settings.kill_every >= Duration::from_secs(2));
        assert!(settings.drop_every >= Duration::from_millis(500));
        settings
    }
}

// ---------------------------------------------------------------------------
// Who writes where

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Channel {
    Http,
    Whatsapp,
    Telegram,
    Slack,
    Matrix,
    Email,
}

impl Channel {
    const ALL: [Channel; 6] = [
        Channel::Http,
        Channel::Whatsapp,
        Channel::Telegram,
        Channel::Slack,
        Channel::Matrix,
        Channel::Email,
    ];

    fn name(self) -> &'static str {
        match self {
            Channel::Http => "http",
            Channel::Whatsapp => "whatsapp",
            Channel::Telegram => "telegram",
            Channel::Slack => "slack",
            Channel::Matrix => "matrix",
            Channel::Email => "email",
        }
    }

    /// Whether a resend reaches the person once anyway (and how).
    fn idempotency(self) -> Option<&'static str> {
        match self {
            Channel::Matrix => Some("transaction id"),
            Channel::Email => Some("Message-ID"),
            _ => None,
        }
    }

    /// Everything but the HTTP API goes through the durable inbox (the HTTP channel
    /// answers in the request and only records its outcome there).
    fn has_inbox(self) -> bool {
        self != Channel::Http
    }

    /// The channel's name in the bot file (the inbox's `channel`).
    fn config_name(self) -> &'static str {
        match self {
            Channel::Http => "api",
            other => other.name(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Who {
    Ana,
    Marko,
    Ivan,
    Stranger,
}

impl Who {
    fn role(self) -> &'static str {
        match self {
            Who::Ana => "owner",
            Who::Marko => "manager",
            Who::Ivan => "employee",
            Who::Stranger => "external",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Who::Ana => "Ana",
            Who::Marko => "Marko",
            Who::Ivan => "Ivan",
            Who::Stranger => "a stranger",
        }
    }
}

/// One message of the plan: deterministic from its number.
#[derive(Clone, Copy, Debug)]
struct Planned {
    id: u64,
    channel: Channel,
    who: Who,
    /// In a group conversation (a Slack channel, a Matrix room) rather than a direct one.
    group: bool,
    /// Which stranger (each sends at most [`PER_STRANGER`] messages).
    stranger: u64,
}

fn plan(id: u64) -> Planned {
    use Who::*;
    let channel = Channel::ALL[(id % 6) as usize];
    let turn = id / 6;
    let slots: &[(Who, bool)] = match channel {
        Channel::Matrix => &[
            (Ana, false),
            (Marko, false),
            (Ivan, false),
            (Ana, true),
            (Marko, true),
            (Ivan, true),
            (Stranger, true),
        ],
        Channel::Slack => &[
            (Ana, false),
            (Marko, false),
            (Ivan, false),
            (Stranger, false),
            (Ana, true),
            (Ivan, true),
            (Stranger, true),
        ],
        Channel::Email => &[(Ana, false), (Stranger, false)],
        _ => &[
            (Ana, false),
            (Marko, false),
            (Ivan, false),
            (Stranger, false),
        ],
    };
    let (who, group) = slots[(turn % slots.len() as u64) as usize];
    Planned {
        id,
        channel,
        who,
        group,
        stranger: turn / slots.len() as u64 / PER_STRANGER,
    }
}

fn text_of(planned: &Planned) -> String {
    format!(
        "soak-{:06} from {} on {}: how many anvils are in stock today?",
        planned.id,
        planned.who.name(),
        planned.channel.name()
    )
}

// The people's addresses on each platform.
const HTTP_PEERS: [&str; 3] = ["ana#1234", "200000000000000002", "300000000000000003"];
const WHATSAPP_NUMBERS: [&str; 3] = ["385991234567", "385991234568", "385991234569"];
const TELEGRAM_IDS: [i64; 3] = [111111111, 222222222, 333333333];
const SLACK_USERS: [&str; 3] = ["U0ANA0001", "U0MARKO01", "U024BK3"];

fn index_of(who: Who) -> usize {
    match who {
        Who::Ana => 0,
        Who::Marko => 1,
        Who::Ivan => 2,
        Who::Stranger => unreachable!("strangers have no fixed address"),
    }
}

// ---------------------------------------------------------------------------
// The agent and Porter, killed and restarted

struct Agent {
    config_path: PathBuf,
    workspace: PathBuf,
    state: PathBuf,
    log: PathBuf,
    extra_env: Vec<(String, String)>,
    child: Option<Child>,
    url: watch::Sender<Option<String>>,
    kills: u32,
    restarts: Vec<Duration>,
    unexpected_exits: Vec<String>,
}

fn spawn_agent_process(
    config_path: &Path,
    workspace: &Path,
    state: &Path,
    log: &Path,
    extra_env: &[(String, String)],
) -> (Child, String) {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_saint-agent"));
    command
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .arg("--config")
        .arg(config_path)
        .arg("--workspace")
        .arg(workspace)
        .env_clear()
        .env("RUST_LOG", "warn")
        .env("SAINT_SANDBOX_STATE", state)
        .stdout(Stdio::piped())
        .stderr(log_file);
    for (name, value) in environment() {
        command.env(name, value);
    }
    for (name, value) in extra_env {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("failed to start saint-agent");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let http = line
        .split_whitespace()
        .find_map(|part| part.strip_prefix("http="))
        .map(str::to_string);
    match http {
        Some(http) => (child, format!("http://{http}")),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "saint-agent did not report its address ({line:?}); its log:\n{}",
                tail(log, 40)
            );
        }
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl Agent {
    async fn start(&mut self) {
        let started = Instant::now();
        let (config_path, workspace, state, log, extra_env) = (
            self.config_path.clone(),
            self.workspace.clone(),
            self.state.clone(),
            self.log.clone(),
            self.extra_env.clone(),
        );
        let (child, url) = tokio::task::spawn_blocking(move || {
            spawn_agent_process(&config_path, &workspace, &state, &log, &extra_env)
        })
        .await
        .unwrap();
        self.child = Some(child);
        self.url.send_replace(Some(url));
        self.restarts.push(started.elapsed());
    }

    fn kill(&mut self) {
        self.url.send_replace(None);
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
            self.kills += 1;
        }
    }

    /// Restarts an agent that exited by itself (recorded: none should).
    async fn check(&mut self) {
        let exited = self
            .child
            .as_mut()
            .and_then(|child| child.try_wait().unwrap());
        if let Some(status) = exited {
            self.unexpected_exits
                .push(format!("{status}; log:\n{}", tail(&self.log, 30)));
            self.child = None;
            self.url.send_replace(None);
            self.start().await;
        }
    }

    fn porter_pid_file(&self) -> PathBuf {
        self.state.join("porter-control/porter.pid")
    }

    /// The pid of the Porter this agent runs, if it is up (its control socket answers).
    fn porter(&self) -> Option<i32> {
        let pid: i32 = std::fs::read_to_string(self.porter_pid_file())
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let command_line = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let control = self.state.join("porter-control/control.sock");
        let needle = control.as_os_str().as_encoded_bytes();
        let is_porter = command_line
            .windows(needle.len())
            .any(|window| window == needle);
        (is_porter && std::os::unix::net::UnixStream::connect(&control).is_ok()).then_some(pid)
    }

    fn kill_porter(&self) -> Option<i32> {
        let pid = self.porter()?;
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid)?,
            rustix::process::Signal::KILL,
        )
        .ok()?;
        Some(pid)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

// ---------------------------------------------------------------------------
// What was sent and what came back

#[derive(Default)]
struct Record {
    sent_at: OnceLock<Instant>,
    /// The platform (or, for HTTP, the agent) took the message.
    delivered: OnceLock<Instant>,
    attempts: AtomicU32,
    /// HTTP only: (reply text, `outcome`, when the response came).
    http_reply: Mutex<Option<(String, String, Instant)>>,
    gave_up: Mutex<Option<String>>,
}

#[derive(Clone, Debug)]
struct ReplyCopy {
    channel: Channel,
    marker: u64,
    prompt_role: String,
    tool_role: String,
    at: Instant,
    /// Copies with the same key are one message to the person (a resend the platform's
    /// idempotency folds: the same e-mail Message-ID); else unique per copy.
    key: String,
}

/// Converts a platform's Unix-millisecond timestamp to this process's clock.
struct Clock {
    instant: Instant,
    unix_ms: i64,
}

impl Clock {
    fn now() -> Self {
        Self {
            instant: Instant::now(),
            unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis() as i64,
        }
    }

    fn instant(&self, unix_ms: i64) -> Instant {
        let offset = unix_ms - self.unix_ms;
        if offset >= 0 {
            self.instant + Duration::from_millis(offset as u64)
        } else {
            self.instant
                .checked_sub(Duration::from_millis((-offset) as u64))
                .unwrap()
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum ChaosKind {
    AgentKill,
    PorterKill,
    Drop,
}

// ---------------------------------------------------------------------------
// The platforms

struct MatrixSide {
    bot: User,
    people: [User; 3],
    strangers: Vec<User>,
    direct: [String; 3],
    groups: Vec<String>,
}

struct Platforms {
    graph: ScriptedGraph,
    telegram: ScriptedTelegram,
    slack: ScriptedSlack,
    matrix: MatrixSide,
    dkim: DkimKey,
    mta: u16,
    imap: u16,
    url: watch::Receiver<Option<String>>,
    client: reqwest::Client,
}

impl Platforms {
    /// The agent's address once it is up.
    async fn agent_url(&self) -> String {
        let mut url = self.url.clone();
        loop {
            if let Some(url) = url.borrow_and_update().clone() {
                return url;
            }
            let _ = url.changed().await;
        }
    }

    /// After a failed attempt: waits for a new agent, or a moment.
    async fn backoff(&self) {
        let mut url = self.url.clone();
        url.mark_unchanged();
        let _ = tokio::time::timeout(Duration::from_millis(200), url.changed()).await;
    }

    /// Sends one message the way its platform delivers it; returns once the platform
    /// holds it (or, for HTTP, once the agent answered).
    async fn send(&self, planned: Planned, record: &Record) {
        let text = text_of(&planned);
        let _ = record.sent_at.set(Instant::now());
        match planned.channel {
            Channel::Http => self.send_http(&planned, &text, record).await,
            Channel::Whatsapp => self.send_whatsapp(&planned, &text, record).await,
            Channel::Telegram => {
                let person = match planned.who {
                    Who::Stranger => Person::new(5_000_000 + planned.stranger as i64, "Stranger"),
                    who => Person::new(TELEGRAM_IDS[index_of(who)], who.name()),
                };
                record.attempts.fetch_add(1, Ordering::Relaxed);
                self.telegram
                    .push_message(telegram::private_text(&person, &text));
                let _ = record.delivered.set(Instant::now());
            }
            Channel::Slack => {
                let user = match planned.who {
                    Who::Stranger => format!("U0STR{:05}", planned.stranger),
                    who => SLACK_USERS[index_of(who)].to_string(),
                };
                let ts = format!("1800000000.{:06}", planned.id);
                record.attempts.fetch_add(1, Ordering::Relaxed);
                if planned.group {
                    // Slack sends a mention as the message and as an app_mention.
                    let text = format!("<@{}> {text}", slack::BOT_USER_ID);
                    self.slack.push_event(slack::message_event(
                        SLACK_GENERAL,
                        "channel",
                        &user,
                        &ts,
                        &text,
                    ));
                    self.slack.push_event(slack::app_mention_event(
                        SLACK_GENERAL,
                        &user,
                        &ts,
                        &text,
                    ));
                } else {
                    let direct = format!("D{}", &user[1..]);
                    self.slack
                        .push_event(slack::message_event(&direct, "im", &user, &ts, &text));
                }
                let _ = record.delivered.set(Instant::now());
            }
            Channel::Matrix => {
                let matrix = &self.matrix;
                let (user, room) = match (planned.who, planned.group) {
                    (Who::Stranger, _) => (
                        &matrix.strangers[planned.stranger as usize % matrix.strangers.len()],
                        &matrix.groups[planned.id as usize % matrix.groups.len()],
                    ),
                    (who, false) => (&matrix.people[index_of(who)], &matrix.direct[index_of(who)]),
                    (who, true) => (
                        &matrix.people[index_of(who)],
                        &matrix.groups[planned.id as usize % matrix.groups.len()],
                    ),
                };
                record.attempts.fetch_add(1, Ordering::Relaxed);
                if planned.group {
                    user.say_to(room, &matrix.bot, &text).await;
                } else {
                    user.say(room, &text).await;
                }
                let _ = record.delivered.set(Instant::now());
            }
            Channel::Email => self.send_email(&planned, &text, record).await,
        }
    }

    async fn send_http(&self, planned: &Planned, text: &str, record: &Record) {
        let peer = match planned.who {
            Who::Stranger => format!("9{:017}", planned.stranger),
            who => HTTP_PEERS[index_of(who)].to_string(),
        };
        loop {
            let url = self.agent_url().await;
            let attempt = record.attempts.fetch_add(1, Ordering::Relaxed) + 1;
            if attempt > 500 {
                *record.gave_up.lock().unwrap() = Some("500 attempts".to_string());
                return;
            }
            let response = self
                .client
                .post(format!("{url}/v1/messages"))
                .bearer_auth(common::TOKEN)
                .timeout(Duration::from_secs(120))
                .json(&json!({"channel": "discord", "peer": peer, "text": text}))
                .send()
                .await;
            let Ok(response) = response else {
                self.backoff().await;
                continue;
            };
            let status = response.status().as_u16();
            let Ok(body) = response.json::<Value>().await else {
                self.backoff().await;
                continue;
            };
            if status == 200 {
                let now = Instant::now();
                let _ = record.delivered.set(now);
                *record.http_reply.lock().unwrap() = Some((
                    body["reply"].as_str().unwrap_or_default().to_string(),
                    body["outcome"].as_str().unwrap_or_default().to_string(),
                    now,
                ));
                return;
            }
            if status < 500 {
                // A refusal the sender cannot fix by waiting: recorded, not retried.
                *record.gave_up.lock().unwrap() = Some(format!("HTTP {status}: {body}"));
                return;
            }
            self.backoff().await;
        }
    }

    async fn send_whatsapp(&self, planned: &Planned, text: &str, record: &Record) {
        let from = match planned.who {
            Who::Stranger => format!("3859100{:05}", planned.stranger),
            who => WHATSAPP_NUMBERS[index_of(who)].to_string(),
        };
        let id = format!("wamid.SOAK{:06}", planned.id);
        let body = serde_json::to_vec(&whatsapp::text_delivery(PHONE_NUMBER_ID, &from, &id, text))
            .unwrap();
        let signature = whatsapp::signature(WA_APP_SECRET, &body);
        // Meta retries a delivery until it is acknowledged, and sometimes delivers one
        // again after it was: every 20th message comes twice.
        let deliveries = if planned.id % 20 == 7 { 2 } else { 1 };
        for _ in 0..deliveries {
            loop {
                let url = self.agent_url().await;
                record.attempts.fetch_add(1, Ordering::Relaxed);
                let status = self
                    .client
                    .post(format!("{url}/channels/whatsapp/webhook"))
                    .header("content-type", "application/json")
                    .header("x-hub-signature-256", &signature)
                    .timeout(Duration::from_secs(30))
                    .body(body.clone())
                    .send()
                    .await
                    .map(|response| response.status().as_u16());
                if status.is_ok_and(|status| status == 200) {
                    let _ = record.delivered.set(Instant::now());
                    break;
                }
                self.backoff().await;
            }
        }
    }

    async fn send_email(&self, planned: &Planned, text: &str, record: &Record) {
        use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor, address::Envelope};
        let (from, raw) = match planned.who {
            // Ana's mail is signed by acme.example: she is the owner.
            Who::Ana => {
                let message_id = format!("soak-{:06}@acme.example", planned.id);
                let raw =
                    mail_server::mail(ANA, &format!("Stock {}", planned.id), &message_id, text, "");
                (ANA.to_string(), self.dkim.sign(&raw))
            }
            // An unsigned mail from another address: a stranger (the default role).
            // The address is Ana's with a detail, so the reply lands in her mailbox,
            // the one the soak reads.
            _ => {
                let from = format!("ana+s{}@acme.example", planned.stranger);
                let message_id = format!("soak-{:06}@elsewhere.example", planned.id);
                let raw = mail_server::mail(
                    &from,
                    &format!("Stock {}", planned.id),
                    &message_id,
                    text,
                    "",
                );
                (from, raw.into_bytes())
            }
        };
        let envelope =
            Envelope::new(Some(from.parse().unwrap()), vec![BOT.parse().unwrap()]).unwrap();
        loop {
            record.attempts.fetch_add(1, Ordering::Relaxed);
            let mta = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1")
                .port(self.mta)
                .build();
            if mta.send_raw(&envelope, &raw).await.is_ok() {
                let _ = record.delivered.set(Instant::now());
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Reads back what the bot sent on every platform: each copy once, with the time the
/// platform recorded it (WhatsApp, Telegram: arrival at the scripted server; Matrix:
/// the event's `origin_server_ts`) or, where the platform keeps none (Slack's posts,
/// e-mail in the mailbox), the time the collector first saw it.
struct Collector {
    copies: HashMap<String, ReplyCopy>,
    matrix_seen: HashMap<String, HashSet<String>>,
    next_uid: u32,
    slack_read: usize,
    clock: Clock,
    unparsed: Vec<String>,
}

impl Collector {
    fn add(
        &mut self,
        key: String,
        channel: Channel,
        text: &str,
        at: Instant,
        fold: Option<String>,
    ) {
        if self.copies.contains_key(&key) {
            return;
        }
        match parse_answer(text) {
            Some((marker, prompt_role, tool_role)) => {
                let copy = ReplyCopy {
                    channel,
                    marker,
                    prompt_role,
                    tool_role,
                    at,
                    key: fold.unwrap_or_else(|| key.clone()),
                };
                self.copies.insert(key, copy);
            }
            None => {
                self.unparsed.push(format!(
                    "{}: {}",
                    channel.name(),
                    text.chars().take(200).collect::<String>()
                ));
                self.copies.insert(
                    key.clone(),
                    ReplyCopy {
                        channel,
                        marker: u64::MAX,
                        prompt_role: String::new(),
                        tool_role: String::new(),
                        at,
                        key,
                    },
                );
            }
        }
    }

    /// Slack's posts carry no time: read often, so the first sight is close to it.
    fn collect_slack(&mut self, platforms: &Platforms) {
        let now = Instant::now();
        for posted in platforms.slack.posted().iter().skip(self.slack_read) {
            self.add(
                format!("slack-{}", posted.ts),
                Channel::Slack,
                &posted.text,
                now,
                None,
            );
            self.slack_read += 1;
        }
    }

    async fn collect(&mut self, platforms: &Platforms) {
        for (index, request) in platforms.graph.requests().iter().enumerate() {
            if request.body["delivered"] == true
                && let Some(text) = request.sent_text()
            {
                self.add(
                    format!("wa-{index}"),
                    Channel::Whatsapp,
                    text,
                    request.at,
                    None,
                );
            }
        }
        for (index, request) in platforms
            .telegram
            .requests_of("sendMessage")
            .iter()
            .enumerate()
        {
            if request.status == 200 {
                let text = request.body["text"].as_str().unwrap_or_default();
                self.add(
                    format!("tg-{index}"),
                    Channel::Telegram,
                    text,
                    request.at,
                    None,
                );
            }
        }
        self.collect_slack(platforms);
        self.collect_matrix(platforms).await;
        self.collect_mail(platforms).await;
    }

    async fn collect_matrix(&mut self, platforms: &Platforms) {
        let matrix = &platforms.matrix;
        let rooms: Vec<(&User, &String)> = matrix
            .people
            .iter()
            .zip(matrix.direct.iter())
            .chain(matrix.groups.iter().map(|room| (&matrix.people[0], room)))
            .collect();
        for (reader, room) in rooms {
            let seen = self.matrix_seen.entry(room.clone()).or_default();
            let mut fresh = Vec::new();
            let mut from: Option<String> = None;
            'pages: loop {
                let mut path = format!("rooms/{room}/messages?dir=b&limit=200");
                if let Some(from) = &from {
                    path.push_str(&format!("&from={from}"));
                }
                let (status, answer) = reader.call(reqwest::Method::GET, &path, None).await;
                if status != 200 {
                    break;
                }
                let chunk = answer["chunk"].as_array().cloned().unwrap_or_default();
                for event in &chunk {
                    let id = event["event_id"].as_str().unwrap_or_default().to_string();
                    if !seen.insert(id.clone()) {
                        break 'pages;
                    }
                    if event["type"] == "m.room.message"
                        && event["sender"] == matrix.bot.id.as_str()
                    {
                        fresh.push(event.clone());
                    }
                }
                match answer["end"].as_str() {
                    Some(end) if !chunk.is_empty() => from = Some(end.to_string()),
                    _ => break,
                }
            }
            for event in fresh {
                let at = self
                    .clock
                    .instant(event["origin_server_ts"].as_i64().unwrap_or_default());
                let text = event["content"]["body"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let key = format!("mx-{}", event["event_id"].as_str().unwrap_or_default());
                self.add(key, Channel::Matrix, &text, at, None);
            }
        }
    }

    async fn collect_mail(&mut self, platforms: &Platforms) {
        let Ok(fetched) = fetch_mail(platforms.imap, self.next_uid).await else {
            return;
        };
        let now = Instant::now();
        for (uid, raw) in fetched {
            self.next_uid = self.next_uid.max(uid + 1);
            let Some(message) = mail_parser::MessageParser::default().parse(&raw) else {
                continue;
            };
            let text = message.body_text(0).unwrap_or_default().to_string();
            let message_id = message.message_id().unwrap_or_default().to_string();
            self.add(
                format!("mail-{uid}"),
                Channel::Email,
                &text,
                now,
                Some(format!("mail-{message_id}")),
            );
        }
    }
}

/// Ana's mail from UID `next` on.
async fn fetch_mail(imap: u16, next: u32) -> anyhow::Result<Vec<(u32, Vec<u8>)>> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", imap)).await?;
    let mut client = async_imap::Client::new(tcp);
    client.read_response().await?;
    let mut session = client
        .login(ANA, ANA_PASSWORD)
        .await
        .map_err(|(error, _)| error)?;
    let mailbox = session.select("INBOX").await?;
    let mut messages = Vec::new();
    if mailbox.exists > 0 {
        let fetched: Vec<_> = session
            .uid_fetch(format!("{next}:*"), "(UID BODY.PEEK[])")
            .await?
            .try_collect()
            .await?;
        for fetch in fetched {
            if let (Some(uid), Some(body)) = (fetch.uid, fetch.body())
                && uid >= next
            {
                messages.push((uid, body.to_vec()));
            }
        }
    }
    let _ = session.logout().await;
    Ok(messages)
}

// ---------------------------------------------------------------------------
// The database, read alongside the running agent

fn database(workspace: &Path) -> Option<rusqlite::Connection> {
    rusqlite::Connection::open_with_flags(
        workspace.join("sessions/transcripts.sqlite3"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .ok()
}

fn count(workspace: &Path, sql: &str) -> i64 {
    database(workspace)
        .and_then(|database| database.query_row(sql, [], |row| row.get(0)).ok())
        .unwrap_or(-1)
}

/// Work the agent still has: inbox rows not finished, replies not sent.
fn unfinished(workspace: &Path) -> i64 {
    let waiting = count(
        workspace,
        "SELECT COUNT(*) FROM inbox WHERE state IN ('received', 'accepted')",
    );
    let queued = count(
        workspace,
        "SELECT COUNT(*) FROM outbox WHERE state = 'queued'",
    );
    if waiting < 0 || queued < 0 {
        return i64::MAX;
    }
    waiting + queued
}

/// The `exec` calls in the usage log: how many, how many ran without a Porter key
/// (Porter was down when the command started), and their outcomes.
fn exec_usage(workspace: &Path) -> (u64, u64, BTreeMap<String, u64>) {
    let text = std::fs::read_to_string(workspace.join("logs/usage.jsonl")).unwrap_or_default();
    let (mut calls, mut without_key, mut outcomes) = (0, 0, BTreeMap::new());
    for line in text.lines() {
        let Ok(line) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if line["tool"] == "exec" {
            calls += 1;
            without_key += u64::from(line["porterTokenError"] == true);
            *outcomes
                .entry(line["outcome"].as_str().unwrap_or("?").to_string())
                .or_insert(0) += 1;
        }
    }
    (calls, without_key, outcomes)
}

/// The person's words in a stored message: its text blocks (a tool result is stored
/// as a user message too, and an `exec` result echoes the marker).
fn person_text(content: &str) -> String {
    match serde_json::from_str::<Value>(content) {
        Ok(Value::Array(blocks)) => blocks
            .iter()
            .filter(|block| block["type"] == "text")
            .filter_map(|block| block["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        Ok(Value::String(text)) => text,
        _ => content.to_string(),
    }
}

/// Each message's user rows in the transcript, by marker.
fn stored_messages(workspace: &Path) -> HashMap<u64, u32> {
    let database = database(workspace).unwrap();
    let mut statement = database
        .prepare("SELECT content FROM messages WHERE role = 'user'")
        .unwrap();
    let mut stored: HashMap<u64, u32> = HashMap::new();
    for content in statement
        .query_map([], |row| row.get::<_, String>(0))
        .unwrap()
    {
        if let Some(marker) = model::last_marker(&person_text(&content.unwrap())) {
            *stored.entry(marker).or_default() += 1;
        }
    }
    stored
}

/// `saint-agent outcomes`, every line, joined to the marker in each inbox row.
fn outcome_rows(workspace: &Path) -> Vec<(u64, String, String)> {
    // The marker is in the row's body, or (the HTTP channel's rows hold no text) in
    // the person's stored message the row points at.
    let markers: HashMap<i64, u64> = {
        let database = database(workspace).unwrap();
        let mut statement = database
            .prepare(
                "SELECT inbox.id, inbox.body, messages.content FROM inbox
                 LEFT JOIN messages ON messages.id = inbox.message_id",
            )
            .unwrap();
        statement
            .query_map([], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, Option<String>>(2)?,
                ))
            })
            .unwrap()
            .filter_map(|row| {
                let (id, body, content) = row.unwrap();
                model::last_marker(&body)
                    .or_else(|| {
                        content
                            .as_deref()
                            .and_then(|content| model::last_marker(&person_text(content)))
                    })
                    .map(|marker| (id, marker))
            })
            .collect()
    };
    let mut rows = Vec::new();
    let mut after = 0;
    loop {
        let output = Command::new(env!("CARGO_BIN_EXE_saint-agent"))
            .args(["outcomes", "--limit", "2000", "--after", &after.to_string()])
            .arg("--workspace")
            .arg(workspace)
            .env_clear()
            .output()
            .unwrap();
        assert!(output.status.success(), "saint-agent outcomes: {output:?}");
        let lines: Vec<Value> = String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        if lines.is_empty() {
            break;
        }
        for line in &lines {
            let id = line["id"].as_i64().unwrap();
            after = after.max(id);
            let marker = markers.get(&id).copied().unwrap_or(u64::MAX);
            if marker == u64::MAX {
                eprintln!("  outcome row of no message sent: {line}");
            }
            rows.push((
                marker,
                line["channel"].as_str().unwrap_or_default().to_string(),
                line["outcome"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    rows
}

// ---------------------------------------------------------------------------
// The report

#[derive(Default, Clone, serde::Serialize)]
struct ChannelReport {
    channel: String,
    idempotency: String,
    sent: u64,
    answered_once: u64,
    duplicated: u64,
    duplicates_after_chaos: u64,
    resent_folded: u64,
    lost: u64,
    wrong_role: u64,
    /// Replies that carried this channel's message's answer on another channel.
    answer_sent_elsewhere: u64,
    outcome_rows: u64,
    without_outcome_row: u64,
    outcomes_not_answered: u64,
    stored_more_than_once: u64,
    model_requests: u64,
    p50_ms: u64,
    p99_ms: u64,
    max_ms: u64,
}

fn percentile(sorted: &[u64], percent: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (sorted.len() * percent).div_ceil(100).max(1);
    sorted[rank - 1]
}

fn table(rows: &[ChannelReport]) -> String {
    // (heading, second line, width, value)
    type Column = (
        &'static str,
        &'static str,
        usize,
        fn(&ChannelReport) -> String,
    );
    let columns: [Column; 13] = [
        ("channel", "", 9, |row| row.channel.clone()),
        ("sent", "", 6, |row| row.sent.to_string()),
        ("answered", "once", 8, |row| row.answered_once.to_string()),
        ("dup", "", 4, |row| row.duplicated.to_string()),
        ("lost", "", 4, |row| row.lost.to_string()),
        ("wrong", "role", 5, |row| row.wrong_role.to_string()),
        ("answer", "elsewhere", 9, |row| {
            row.answer_sent_elsewhere.to_string()
        }),
        ("outcome", "rows", 7, |row| row.outcome_rows.to_string()),
        ("stored", "twice", 6, |row| {
            row.stored_more_than_once.to_string()
        }),
        ("p50", "ms", 6, |row| row.p50_ms.to_string()),
        ("p99", "ms", 6, |row| row.p99_ms.to_string()),
        ("max", "ms", 6, |row| row.max_ms.to_string()),
        ("idempotency", "", 0, |row| row.idempotency.clone()),
    ];
    let line = |cells: Vec<String>| {
        let mut out = String::new();
        for ((_, _, width, _), cell) in columns.iter().zip(cells) {
            if *width == 9 && out.is_empty() {
                out.push_str(&format!("{cell:<9}"));
            } else {
                out.push_str(&format!(" {cell:>width$}"));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(columns.iter().map(|column| column.0.to_string()).collect());
    out.push_str(&line(
        columns.iter().map(|column| column.1.to_string()).collect(),
    ));
    for row in rows {
        out.push_str(&line(
            columns.iter().map(|column| (column.3)(row)).collect(),
        ));
    }
    out
}

// ---------------------------------------------------------------------------
// The soak

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_soak_every_message_is_answered_once_in_its_senders_role() {
    let settings = Settings::from_environment();
    let run_started = Instant::now();
    eprintln!(
        "soak: {} messages at {}/s, kill -9 every {:?} (agent) and halfway between (Porter), connections cut every {:?}, seed {}",
        settings.messages, settings.rate, settings.kill_every, settings.drop_every, settings.seed
    );

    // The platforms, and a relay in front of each server the agent connects to.
    let model = EchoModel::start(settings.exec_every).await;
    let graph = ScriptedGraph::start(WA_ACCESS_TOKEN).await.unwrap();
    let telegram = ScriptedTelegram::start(TG_BOT_TOKEN).await.unwrap();
    let slack = ScriptedSlack::start(SLACK_BOT_TOKEN, SLACK_APP_TOKEN)
        .await
        .unwrap();
    let mail = MailServer::start();
    let dns = Dns::start();
    let dkim = DkimKey::publish(&dns, "acme.example", "sel", 7);
    let synapse = Synapse::shared();
    let tag = format!("soak{}", std::process::id());
    let matrix_bot = synapse.register(&format!("{tag}-bot")).await;
    let matrix_people = [
        synapse.register(&format!("{tag}-ana")).await,
        synapse.register(&format!("{tag}-marko")).await,
        synapse.register(&format!("{tag}-ivan")).await,
    ];
    let mut matrix_strangers = Vec::new();
    for index in 0..MATRIX_STRANGERS {
        matrix_strangers.push(synapse.register(&format!("{tag}-stranger{index}")).await);
    }
    let address = |url: &str| -> std::net::SocketAddr {
        let url = reqwest::Url::parse(url).unwrap();
        format!("{}:{}", url.host_str().unwrap(), url.port().unwrap())
            .parse()
            .unwrap()
    };
    let proxies = [
        (
            "whatsapp",
            ChaosProxy::start(address(&graph.base_url())).await,
        ),
        (
            "telegram",
            ChaosProxy::start(address(&telegram.base_url())).await,
        ),
        ("slack", ChaosProxy::start(address(&slack.api_url())).await),
        (
            "matrix",
            ChaosProxy::start(address(&synapse.base_url)).await,
        ),
        (
            "imap",
            ChaosProxy::start(([127, 0, 0, 1], mail.imap).into()).await,
        ),
        (
            "submission",
            ChaosProxy::start(([127, 0, 0, 1], mail.submission).into()).await,
        ),
    ];
    let proxy = |name: &str| &proxies.iter().find(|(each, _)| *each == name).unwrap().1;

    // The bot: the example company, everyone reachable on every channel.
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    seed_workspace(&workspace);
    let config_path = directory.path().join("bot-config.json");
    let mut config = test_config(&model.base_url());
    for (slug, identities) in [
        (
            "ana",
            vec![
                "telegram:111111111".to_string(),
                format!("slack:{}", SLACK_USERS[0]),
                format!("matrix:{}", matrix_people[0].id),
            ],
        ),
        (
            "marko",
            vec![
                format!("discord:{}", HTTP_PEERS[1]),
                format!("slack:{}", SLACK_USERS[1]),
                format!("matrix:{}", matrix_people[1].id),
            ],
        ),
        (
            "ivan",
            vec![
                format!("discord:{}", HTTP_PEERS[2]),
                format!("whatsapp:+{}", WHATSAPP_NUMBERS[2]),
                format!("matrix:{}", matrix_people[2].id),
            ],
        ),
    ] {
        for identity in identities {
            add_identity(&mut config, slug, &identity);
        }
    }
    config["channels"] = json!([
        {"name": "api", "kind": "http", "secretEnv": {"token": "SAINT_CHANNEL_API_TOKEN"}},
        {"name": "whatsapp", "kind": "whatsapp",
         "settings": {"phoneNumberId": PHONE_NUMBER_ID,
                      "apiBaseUrl": format!("{}/{}", proxy("whatsapp").url(), whatsapp::API_VERSION)},
         "secretEnv": {"accessToken": "WA_ACCESS_TOKEN", "appSecret": "WA_APP_SECRET",
                       "verifyToken": "WA_VERIFY_TOKEN"}},
        {"name": "telegram", "kind": "telegram",
         "settings": {"apiBaseUrl": proxy("telegram").url()},
         "secretEnv": {"botToken": "TG_BOT_TOKEN"}},
        {"name": "slack", "kind": "slack",
         "settings": {"apiBaseUrl": format!("{}/api", proxy("slack").url())},
         "secretEnv": {"botToken": "SLACK_BOT_TOKEN", "appToken": "SLACK_APP_TOKEN"}},
        {"name": "matrix", "kind": "matrix",
         "settings": {"homeserverUrl": proxy("matrix").url(), "userId": matrix_bot.id},
         "secretEnv": {"accessToken": "MATRIX_ACCESS_TOKEN"}},
        {"name": "email", "kind": "email",
         "settings": {"address": BOT, "imapHost": "127.0.0.1",
                      "imapPort": proxy("imap").port().to_string(), "imapSecurity": "none",
                      "smtpHost": "127.0.0.1", "smtpPort": proxy("submission").port().to_string(),
                      "smtpSecurity": "none", "dnsServer": dns.address.to_string(),
                      "replyLimitPerHour": "10000"},
         "secretEnv": {"password": "MAIL_PASSWORD"}},
    ]);
    write_config(&config_path, &config);
    let (url_sender, url) = watch::channel(None);
    let mut agent = Agent {
        config_path: config_path.clone(),
        workspace: workspace.clone(),
        state: directory.path().join("sandbox-state"),
        log: directory.path().join("agent.log"),
        extra_env: [
            ("WA_ACCESS_TOKEN", WA_ACCESS_TOKEN),
            ("WA_APP_SECRET", WA_APP_SECRET),
            ("WA_VERIFY_TOKEN", "soak-verify-token"),
            ("TG_BOT_TOKEN", TG_BOT_TOKEN),
            ("SLACK_BOT_TOKEN", SLACK_BOT_TOKEN),
            ("SLACK_APP_TOKEN", SLACK_APP_TOKEN),
            ("MATRIX_ACCESS_TOKEN", &matrix_bot.token),
            ("MAIL_PASSWORD", BOT_PASSWORD),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect(),
        child: None,
        url: url_sender,
        kills: 0,
        restarts: Vec::new(),
        unexpected_exits: Vec::new(),
    };
    agent.start().await;

    // Every channel connected: Slack's socket, Telegram's long poll, the IMAP and sync
    // positions, Porter listening.
    let ready = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(
                Instant::now() < deadline,
                "soak setup: timed out waiting for {what}; agent log:\n{}",
                tail(&agent.log, 40)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    ready("Slack's socket", &|| slack.connections() >= 1);
    ready("Telegram's long poll", &|| {
        !telegram.requests_of("getUpdates").is_empty()
    });
    for channel in ["email", "matrix"] {
        ready(&format!("the {channel} position"), &|| {
            count(
                &workspace,
                &format!("SELECT COUNT(*) FROM channel_cursor WHERE channel = '{channel}'"),
            ) == 1
        });
    }
    ready("Porter", &|| agent.porter().is_some());

    // Matrix rooms: a direct room per person, and two rooms everyone writes in.
    let wait_joined = |room: String, user: User, bot: String| async move {
        let deadline = Instant::now() + Duration::from_secs(60);
        while user.membership(&room, &bot).await.as_deref() != Some("join") {
            assert!(Instant::now() < deadline, "the bot never joined {room}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        room
    };
    let mut direct = Vec::new();
    for person in &matrix_people {
        let room = person
            .create_room(json!({"is_direct": true, "invite": [matrix_bot.id],
                                "preset": "trusted_private_chat"}))
            .await;
        direct.push(wait_joined(room, person.clone(), matrix_bot.id.clone()).await);
    }
    let mut groups = Vec::new();
    for index in 0..2 {
        let mut invite: Vec<String> = matrix_people[1..]
            .iter()
            .map(|user| user.id.clone())
            .collect();
        invite.extend(matrix_strangers.iter().map(|user| user.id.clone()));
        invite.push(matrix_bot.id.clone());
        let room = matrix_people[0]
            .create_room(
                json!({"name": format!("Acme floor {index}"), "preset": "private_chat",
                                "invite": invite}),
            )
            .await;
        for user in matrix_people[1..].iter().chain(matrix_strangers.iter()) {
            user.join(&room).await;
        }
        groups.push(wait_joined(room, matrix_people[0].clone(), matrix_bot.id.clone()).await);
    }
    let platforms = Arc::new(Platforms {
        graph,
        telegram,
        slack,
        matrix: MatrixSide {
            bot: matrix_bot,
            people: matrix_people,
            strangers: matrix_strangers,
            direct: direct.try_into().unwrap(),
            groups,
        },
        dkim,
        mta: mail.mta,
        imap: mail.imap,
        url,
        client: reqwest::Client::new(),
    });
    let setup = run_started.elapsed();
    eprintln!("soak: setup took {setup:?}; sending");

    // Send, kill, cut and read back, all at once.
    let records: Arc<Vec<Record>> =
        Arc::new((0..settings.messages).map(|_| Record::default()).collect());
    let sending = Arc::new(AtomicBool::new(true));
    let mut collector = Collector {
        copies: HashMap::new(),
        matrix_seen: HashMap::new(),
        next_uid: 1,
        slack_read: 0,
        clock: Clock::now(),
        unparsed: Vec::new(),
    };
    let mut chaos_log: Vec<(Instant, ChaosKind)> = Vec::new();
    let mut porter_kills = 0u32;
    let mut porter_back: Vec<Duration> = Vec::new();
    let mut porter_pending: Option<(i32, Instant)> = None;
    let mut drops = 0u32;
    let mut kicks = 0u32;
    let mut connections_cut = 0usize;
    let send_started = Instant::now();
    let senders = {
        let records = records.clone();
        let platforms = platforms.clone();
        let sending = sending.clone();
        let rate = settings.rate;
        tokio::spawn(async move {
            let mut tasks = Vec::new();
            for id in 0..records.len() as u64 {
                let due = send_started + Duration::from_secs_f64(id as f64 / rate);
                tokio::time::sleep_until(due.into()).await;
                let records = records.clone();
                let platforms = platforms.clone();
                tasks.push(tokio::spawn(async move {
                    platforms.send(plan(id), &records[id as usize]).await;
                }));
            }
            sending.store(false, Ordering::SeqCst);
            for task in tasks {
                task.await.unwrap();
            }
        })
    };
    // Each interval drawn around its mean (±25 % for kills, ±50 % for cuts), so kills do
    // not fall on the same moment of the sending schedule every time.
    let mut random = Random(settings.seed);
    let mut next_kill = send_started + random.around(settings.kill_every, 0.25);
    let mut next_porter_kill = send_started + random.around(settings.kill_every / 2, 0.25);
    let mut next_drop = send_started + random.around(settings.drop_every, 0.5);
    let mut next_collect = Instant::now();
    let mut next_progress = send_started + Duration::from_secs(60);
    while sending.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = Instant::now();
        agent.check().await;
        if now >= next_kill {
            next_kill += random.around(settings.kill_every, 0.25);
            // Porter's next kill: somewhere in the middle of the agent's next run.
            let run = next_kill.saturating_duration_since(now);
            next_porter_kill = now + run.mul_f64(0.35 + 0.3 * random.next());
            chaos_log.push((Instant::now(), ChaosKind::AgentKill));
            agent.kill();
            agent.start().await;
        }
        if now >= next_porter_kill {
            if let Some(pid) = agent.kill_porter() {
                chaos_log.push((Instant::now(), ChaosKind::PorterKill));
                porter_kills += 1;
                porter_pending = Some((pid, Instant::now()));
                // Set again by the next agent kill.
                next_porter_kill = next_kill + settings.kill_every * 10;
            } else {
                // Porter is (re)starting: try again in a moment.
                next_porter_kill = now + Duration::from_millis(200);
            }
        }
        if let Some((old, killed)) = porter_pending
            && agent.porter().is_some_and(|pid| pid != old)
        {
            porter_back.push(killed.elapsed());
            porter_pending = None;
        }
        if now >= next_drop {
            next_drop += random.around(settings.drop_every, 0.5);
            chaos_log.push((Instant::now(), ChaosKind::Drop));
            drops += 1;
            // Every other time, Dovecot first closes the bot's IMAP session itself (a
            // server's BYE rather than a cut), when a logged-in one is there to close.
            if drops.is_multiple_of(2) && proxy("imap").open_for(Duration::from_secs(2)) > 0 {
                let kicked =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| mail.kick(BOT)));
                kicks += u32::from(kicked.is_ok());
            }
            connections_cut += proxies
                .iter()
                .map(|(_, proxy)| proxy.drop_all())
                .sum::<usize>();
            platforms.slack.drop_sockets();
        }
        if now >= next_collect {
            collector.collect(&platforms).await;
            next_collect = Instant::now() + Duration::from_millis(500);
            if now >= next_progress {
                next_progress += Duration::from_secs(60);
                let answered = collector
                    .copies
                    .values()
                    .map(|copy| copy.marker)
                    .collect::<HashSet<_>>()
                    .len()
                    + records
                        .iter()
                        .filter(|record| record.http_reply.lock().unwrap().is_some())
                        .count();
                eprintln!(
                    "soak: {:>5.0} s: {} of {} handed to the platforms, {answered} answered; {} agent kills, {porter_kills} Porter kills, {drops} cuts",
                    send_started.elapsed().as_secs_f64(),
                    records
                        .iter()
                        .filter(|record| record.delivered.get().is_some())
                        .count(),
                    settings.messages,
                    agent.kills
                );
            }
        } else {
            collector.collect_slack(&platforms);
        }
    }
    let send_phase = send_started.elapsed();
    eprintln!(
        "soak: every message handed to its platform after {send_phase:?}; {} agent kills, {porter_kills} Porter kills, {drops} cuts so far",
        agent.kills
    );

    // The last restart is done: wait (bounded) until every message is answered and the
    // agent has nothing left to send, reading the platforms as the answers come.
    let drain_started = Instant::now();
    let drain_deadline = drain_started
        + Duration::from_secs(120).max(Duration::from_secs_f64(settings.messages as f64 / 20.0));
    let mut http_done = false;
    loop {
        agent.check().await;
        if let Some((old, killed)) = porter_pending
            && agent.porter().is_some_and(|pid| pid != old)
        {
            porter_back.push(killed.elapsed());
            porter_pending = None;
        }
        collector.collect(&platforms).await;
        if !http_done && senders.is_finished() {
            http_done = true;
        }
        let answered: HashSet<u64> = collector
            .copies
            .values()
            .map(|copy| copy.marker)
            .chain(records.iter().enumerate().filter_map(|(id, record)| {
                record
                    .http_reply
                    .lock()
                    .unwrap()
                    .as_ref()
                    .map(|_| id as u64)
            }))
            .collect();
        let missing = (0..settings.messages)
            .filter(|id| !answered.contains(id))
            .count();
        if http_done && missing == 0 && unfinished(&workspace) == 0 && porter_pending.is_none() {
            break;
        }
        if Instant::now() > drain_deadline {
            eprintln!(
                "soak: drain deadline passed with {missing} messages unanswered, {} inbox/outbox rows unfinished",
                unfinished(&workspace)
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let drain = drain_started.elapsed();
    if !senders.is_finished() {
        senders.abort();
    }
    collector.collect(&platforms).await;

    // ---- The figures.
    let seen = model.seen();
    let stored = stored_messages(&workspace);
    let outcomes = outcome_rows(&workspace);
    let mut copies_by_marker: HashMap<u64, Vec<&ReplyCopy>> = HashMap::new();
    for copy in collector.copies.values() {
        copies_by_marker.entry(copy.marker).or_default().push(copy);
    }
    let mut outcomes_by_marker: HashMap<u64, Vec<&(u64, String, String)>> = HashMap::new();
    for row in &outcomes {
        outcomes_by_marker.entry(row.0).or_default().push(row);
    }
    let kill_or_cut: Vec<Instant> = chaos_log
        .iter()
        .filter(|(_, kind)| matches!(kind, ChaosKind::AgentKill | ChaosKind::Drop))
        .map(|(at, _)| *at)
        .collect();
    let mut rows: BTreeMap<Channel, ChannelReport> = BTreeMap::new();
    let mut latencies: BTreeMap<Channel, Vec<u64>> = BTreeMap::new();
    let mut problems: Vec<String> = Vec::new();
    let mut unexpected_outcome_rows = 0u64;
    for id in 0..settings.messages {
        let planned = plan(id);
        let record = &records[id as usize];
        let row = rows
            .entry(planned.channel)
            .or_insert_with(|| ChannelReport {
                channel: planned.channel.name().to_string(),
                idempotency: planned
                    .channel
                    .idempotency()
                    .unwrap_or(if planned.channel == Channel::Http {
                        "none (no message id)"
                    } else {
                        "none"
                    })
                    .to_string(),
                ..ChannelReport::default()
            });
        row.sent += 1;
        let expected = planned.who.role();
        let sent_at = record.sent_at.get().copied();
        // What the person received, and when the first of it came.
        let (distinct, folded, first, reply_roles) = if planned.channel == Channel::Http {
            match record.http_reply.lock().unwrap().clone() {
                Some((text, outcome, at)) => {
                    if outcome != "answered" {
                        row.outcomes_not_answered += 1;
                        problems.push(format!("soak-{id:06} (http): outcome {outcome}"));
                    }
                    let roles = parse_answer(&text)
                        .filter(|(marker, _, _)| *marker == id)
                        .map(|(_, prompt, tools)| vec![(prompt, tools)])
                        .unwrap_or_else(|| {
                            problems.push(format!("soak-{id:06} (http): reply {text:?}"));
                            vec![("none".to_string(), "none".to_string())]
                        });
                    // The API has no message id: a request that died with the agent
                    // is sent again, and then stored (and answered) twice.
                    let times_stored = u64::from(stored.get(&id).copied().unwrap_or(1).max(1));
                    if times_stored > 1 && record.attempts.load(Ordering::Relaxed) > 1 {
                        row.duplicates_after_chaos += 1;
                    }
                    (times_stored, 0, Some(at), roles)
                }
                None => (0, 0, None, Vec::new()),
            }
        } else {
            let all_copies = copies_by_marker.get(&id).cloned().unwrap_or_default();
            // A reply carrying this message's answer on another channel answered some
            // other message with it: counted (and reported) apart, not as a copy.
            let (copies, elsewhere): (Vec<&ReplyCopy>, Vec<&ReplyCopy>) = all_copies
                .into_iter()
                .partition(|copy| copy.channel == planned.channel);
            row.answer_sent_elsewhere += elsewhere.len() as u64;
            for copy in &elsewhere {
                problems.push(format!(
                    "soak-{id:06} ({}, {}): its answer was also sent on {}, as the reply to another message",
                    planned.channel.name(),
                    planned.who.name(),
                    copy.channel.name()
                ));
            }
            let keys: HashSet<&str> = copies.iter().map(|copy| copy.key.as_str()).collect();
            let mut times: Vec<Instant> = copies.iter().map(|copy| copy.at).collect();
            times.sort();
            if keys.len() > 1 {
                // A duplicate the person sees: was the first copy sent just before a
                // kill or a cut (the send the outbox could not record)?
                let first = times[0];
                if kill_or_cut.iter().any(|at| {
                    *at + Duration::from_secs(2) >= first && *at < first + Duration::from_secs(10)
                }) {
                    row.duplicates_after_chaos += 1;
                }
            }
            let roles = copies
                .iter()
                .chain(elsewhere.iter())
                .map(|copy| (copy.prompt_role.clone(), copy.tool_role.clone()))
                .collect();
            (
                keys.len() as u64,
                copies.len() as u64 - keys.len() as u64,
                times.first().copied(),
                roles,
            )
        };
        match distinct {
            0 => {
                row.lost += 1;
                problems.push(format!(
                    "soak-{id:06} ({}, {}): no reply (delivered to the platform: {}, attempts {}, gave up: {:?}, model requests {})",
                    planned.channel.name(),
                    planned.who.name(),
                    record.delivered.get().is_some(),
                    record.attempts.load(Ordering::Relaxed),
                    record.gave_up.lock().unwrap(),
                    seen.get(&id).map_or(0, |seen| seen.requests)
                ));
            }
            1 => row.answered_once += 1,
            _ => row.duplicated += 1,
        }
        row.resent_folded += folded;
        if let (Some(sent), Some(first)) = (sent_at, first) {
            latencies
                .entry(planned.channel)
                .or_default()
                .push(first.saturating_duration_since(sent).as_millis() as u64);
        }
        // The role: in every model request of the message's turns and in every reply.
        let model_roles = seen
            .get(&id)
            .map(|seen| {
                row.model_requests += u64::from(seen.requests);
                seen.prompt_roles
                    .iter()
                    .cloned()
                    .zip(seen.tool_roles.iter().cloned())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let wrong: Vec<_> = model_roles
            .iter()
            .chain(reply_roles.iter())
            .filter(|(prompt, tools)| prompt != expected || tools != expected)
            .collect();
        if !wrong.is_empty() {
            row.wrong_role += 1;
            problems.push(format!(
                "soak-{id:06} ({}, {} is {expected}): answered as {wrong:?}",
                planned.channel.name(),
                planned.who.name()
            ));
        }
        // The inbox: one outcome row per message (the HTTP channel: one per time the
        // message was stored), answered; the transcript: stored once.
        let rows_of = outcomes_by_marker.get(&id).cloned().unwrap_or_default();
        row.outcome_rows += rows_of.len() as u64;
        for (_, channel, outcome) in &rows_of {
            if outcome != "answered" || channel != planned.channel.config_name() {
                row.outcomes_not_answered += 1;
                problems.push(format!("soak-{id:06}: outcome row {channel} {outcome}"));
            }
        }
        let rows_expected = stored.get(&id).copied().unwrap_or(1).max(1) as usize;
        // Every channel commits a message's outcome row before its reply can be seen
        // (the HTTP channel: before the response), so no message the client got an
        // answer to is without one, kills or not.
        if rows_of.is_empty() {
            row.without_outcome_row += 1;
        }
        // Durable channels: exactly one row. HTTP: one per stored copy whose turn ended
        // (a copy whose request died with the agent may have none), at least one.
        let rows_fit = if planned.channel.has_inbox() {
            rows_of.len() == 1
        } else {
            rows_of.len() <= rows_expected && !rows_of.is_empty()
        };
        if !rows_fit {
            unexpected_outcome_rows += 1;
            problems.push(format!(
                "soak-{id:06} ({}, stored {} times): {} outcome rows",
                planned.channel.name(),
                stored.get(&id).copied().unwrap_or(0),
                rows_of.len()
            ));
        }
        if stored.get(&id).copied().unwrap_or(0) > 1 {
            row.stored_more_than_once += 1;
            if planned.channel.has_inbox() {
                problems.push(format!(
                    "soak-{id:06} ({}): stored {} times in the transcript",
                    planned.channel.name(),
                    stored[&id]
                ));
            }
        }
    }
    for (channel, values) in &mut latencies {
        values.sort_unstable();
        let row = rows.get_mut(channel).unwrap();
        row.p50_ms = percentile(values, 50);
        row.p99_ms = percentile(values, 99);
        row.max_ms = values.last().copied().unwrap_or(0);
    }
    let mut all: Vec<u64> = latencies.values().flatten().copied().collect();
    all.sort_unstable();
    let mut total = ChannelReport {
        channel: "all".to_string(),
        p50_ms: percentile(&all, 50),
        p99_ms: percentile(&all, 99),
        max_ms: all.last().copied().unwrap_or(0),
        ..ChannelReport::default()
    };
    for row in rows.values() {
        total.sent += row.sent;
        total.answered_once += row.answered_once;
        total.duplicated += row.duplicated;
        total.duplicates_after_chaos += row.duplicates_after_chaos;
        total.resent_folded += row.resent_folded;
        total.lost += row.lost;
        total.wrong_role += row.wrong_role;
        total.answer_sent_elsewhere += row.answer_sent_elsewhere;
        total.outcome_rows += row.outcome_rows;
        total.without_outcome_row += row.without_outcome_row;
        total.outcomes_not_answered += row.outcomes_not_answered;
        total.stored_more_than_once += row.stored_more_than_once;
        total.model_requests += row.model_requests;
    }
    let stray_outcomes = outcomes.iter().filter(|row| row.0 == u64::MAX).count();
    let (exec_asked, exec_ok, exec_error) = model.exec_calls();
    let (exec_lines, exec_without_key, exec_outcomes) = exec_usage(&workspace);
    let mut rows: Vec<ChannelReport> = rows.into_values().collect();
    rows.push(total.clone());
    let mut restarts: Vec<u64> = agent
        .restarts
        .iter()
        .map(|duration| duration.as_millis() as u64)
        .collect();
    restarts.sort_unstable();
    let mut porter_restarts: Vec<u64> = porter_back
        .iter()
        .map(|duration| duration.as_millis() as u64)
        .collect();
    porter_restarts.sort_unstable();
    let chaos = json!({
        "agentKills": agent.kills,
        "agentStartMs": {"p50": percentile(&restarts, 50), "max": restarts.last()},
        "agentUnexpectedExits": agent.unexpected_exits.len(),
        "porterKills": porter_kills,
        "porterRestarted": porter_back.len(),
        "porterRestartMs": {"p50": percentile(&porter_restarts, 50), "max": porter_restarts.last()},
        "connectionCuts": drops,
        "imapSessionsKicked": kicks,
        "connectionsCut": connections_cut,
        "connectionsAccepted": proxies.iter().map(|(name, proxy)| (name.to_string(), proxy.accepted())).collect::<BTreeMap<_, _>>(),
        "slackSocketConnections": platforms.slack.connections(),
    });
    let report = json!({
        "settings": {"messages": settings.messages, "rate": settings.rate,
                     "killEverySeconds": settings.kill_every.as_secs_f64(),
                     "dropEverySeconds": settings.drop_every.as_secs_f64(),
                     "execEvery": settings.exec_every, "seed": settings.seed},
        "seconds": {"setup": setup.as_secs_f64(), "send": send_phase.as_secs_f64(),
                    "drain": drain.as_secs_f64(), "total": run_started.elapsed().as_secs_f64()},
        "channels": rows,
        "chaos": chaos,
        "exec": {"asked": exec_asked, "resultsOk": exec_ok, "resultsError": exec_error,
                 "usageLines": exec_lines, "withoutPorterKey": exec_without_key,
                 "outcomes": exec_outcomes},
        "modelRequests": model.request_count(),
        "modelRequestsWithoutMarker": model.unmarked(),
        "outcomeRowsWithoutMarker": stray_outcomes,
        "repliesWithoutMarker": collector.unparsed.len(),
        "problems": problems.iter().take(200).collect::<Vec<_>>(),
    });
    let report_directory = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("soak");
    std::fs::create_dir_all(&report_directory).unwrap();
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let report_path = report_directory.join(format!("report-{stamp}-{}.json", settings.messages));
    let text = serde_json::to_string_pretty(&report).unwrap();
    std::fs::write(&report_path, &text).unwrap();
    std::fs::write(report_directory.join("report-latest.json"), &text).unwrap();
    // The agent's log of the whole run (every process), beside the report.
    let _ = std::fs::copy(
        &agent.log,
        report_directory.join(format!("agent-{stamp}-{}.log", settings.messages)),
    );
    eprintln!(
        "\nsoak report ({} messages in {:.0} s: setup {:.0} s, send {:.0} s, drain {:.0} s)\n\n{}",
        settings.messages,
        run_started.elapsed().as_secs_f64(),
        setup.as_secs_f64(),
        send_phase.as_secs_f64(),
        drain.as_secs_f64(),
        table(&rows)
    );
    eprintln!(
        "chaos: {}\nduplicates following a kill or cut within 10 s: {} of {}; resends folded by the platform (same Message-ID): {}\nmodel requests: {} ({} without a marker); outcome rows without a marker: {stray_outcomes}; replies without a marker: {}\nreport: {}",
        serde_json::to_string(&report["chaos"]).unwrap(),
        total.duplicates_after_chaos,
        total.duplicated,
        total.resent_folded,
        model.request_count(),
        model.unmarked(),
        collector.unparsed.len(),
        report_path.display()
    );
    for problem in problems.iter().take(40) {
        eprintln!("  problem: {problem}");
    }
    for exit in &agent.unexpected_exits {
        eprintln!("  the agent exited by itself: {exit}");
    }

    // ---- What must hold.
    assert!(
        agent.kills >= 2 && porter_kills >= 2 && drops >= 2,
        "too little chaos to prove anything: {} agent kills, {porter_kills} Porter kills, {drops} cuts",
        agent.kills
    );
    assert_eq!(
        porter_back.len() as u32,
        porter_kills,
        "the agent restarted Porter after every kill"
    );
    assert!(
        agent.unexpected_exits.is_empty(),
        "the agent exited by itself"
    );
    assert_eq!(total.lost, 0, "lost messages: {problems:#?}");
    assert_eq!(
        total.answer_sent_elsewhere, 0,
        "a message answered with another message's answer: {problems:#?}"
    );
    assert_eq!(
        total.wrong_role, 0,
        "answered under the wrong role: {problems:#?}"
    );
    assert_eq!(
        total.without_outcome_row, 0,
        "messages without an outcome row: {problems:#?}"
    );
    assert_eq!(
        unexpected_outcome_rows, 0,
        "one outcome row per message (per time it was stored, on HTTP): {problems:#?}"
    );
    assert_eq!(total.outcomes_not_answered, 0, "{problems:#?}");
    assert_eq!(stray_outcomes, 0, "inbox rows of no message sent");
    assert!(collector.unparsed.is_empty(), "{:#?}", collector.unparsed);
    for row in &rows[..rows.len() - 1] {
        let channel = Channel::ALL
            .into_iter()
            .find(|channel| channel.name() == row.channel)
            .unwrap();
        if channel.idempotency().is_some() {
            assert_eq!(
                row.duplicated, 0,
                "{}: the platform has idempotency, yet a reply was shown twice",
                row.channel
            );
        } else {
            assert_eq!(
                row.duplicates_after_chaos, row.duplicated,
                "{}: a duplicate that no kill or cut explains: {problems:#?}",
                row.channel
            );
        }
        if channel.has_inbox() {
            assert_eq!(
                row.stored_more_than_once, 0,
                "{}: a message stored twice in the transcript: {problems:#?}",
                row.channel
            );
        }
    }
}

/// What the soak found (a 10,000-message run lost one of Marko's Telegram messages and
/// sent his next Slack message's answer to Telegram instead), reduced to its cause: a
/// contact's turns on different channels share one session, and a turn that resumes an
/// accepted inbox row (retried after a failure, or resumed after a crash) sends the
/// model the session as it is now. Had a newer message of the same person been answered
/// meanwhile, the model would be asked to answer that one again. The fix makes the
/// session the dispatch lane: here the first model call of Marko's Telegram message
/// fails, his Slack message arrives during the retry delay and waits for the retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_turn_answers_its_own_message_not_a_newer_one_of_the_same_person() {
    use saint_scripted::llm::{Reply, ScriptedLlm};
    let llm = ScriptedLlm::start().await.unwrap();
    let telegram = ScriptedTelegram::start(TG_BOT_TOKEN).await.unwrap();
    let slack = ScriptedSlack::start(SLACK_BOT_TOKEN, SLACK_APP_TOKEN)
        .await
        .unwrap();
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    seed_workspace(&workspace);
    let config_path = directory.path().join("bot-config.json");
    let mut config = test_config(&llm.base_url());
    add_identity(&mut config, "marko", &format!("slack:{}", SLACK_USERS[1]));
    config["channels"] = json!([
        {"name": "telegram", "kind": "telegram", "settings": {"apiBaseUrl": telegram.base_url()},
         "secretEnv": {"botToken": "TG_BOT_TOKEN"}},
        {"name": "slack", "kind": "slack", "settings": {"apiBaseUrl": slack.api_url()},
         "secretEnv": {"botToken": "SLACK_BOT_TOKEN", "appToken": "SLACK_APP_TOKEN"}},
    ]);
    write_config(&config_path, &config);
    let _agent = common::spawn_agent(
        &config_path,
        &workspace,
        &[
            ("TG_BOT_TOKEN", TG_BOT_TOKEN),
            ("SLACK_BOT_TOKEN", SLACK_BOT_TOKEN),
            ("SLACK_APP_TOKEN", SLACK_APP_TOKEN),
        ],
    );
    let wait = Duration::from_secs(30);
    assert!(slack.wait_for_connections(1, wait).await);
    // Marko's Telegram message: its first model call fails (the turn is retried in 2 s).
    llm.push(Reply::failure(
        400,
        None,
        "invalid_request_error",
        "scripted failure",
    ));
    llm.set_fallback(Reply::text("Here is your answer."));
    telegram.push_message(telegram::private_text(
        &Person::new(TELEGRAM_IDS[1], "Marko"),
        "question A, on Telegram",
    ));
    let deadline = Instant::now() + wait;
    while llm.request_count() == 0 {
        assert!(Instant::now() < deadline, "the model was never called");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Meanwhile Marko writes on Slack: it waits for the Telegram message's retry.
    slack.push_event(slack::message_event(
        "D0MARKO01",
        "im",
        SLACK_USERS[1],
        "1800000000.000001",
        "question B, on Slack",
    ));
    assert!(slack.wait_for_posted(1, wait).await, "Slack was answered");
    assert!(
        telegram.wait_for_sent(1, wait).await,
        "Telegram was answered"
    );
    let newest: Vec<String> = llm
        .requests()
        .iter()
        .map(|request| request.user_texts().last().cloned().unwrap_or_default())
        .collect();
    // The failed call, Telegram's retry (which must answer question A), then Slack's
    // turn. Without one lane per session, Slack's turn ran during the retry delay and
    // the retry asked the model to answer question B again.
    assert_eq!(newest.len(), 3, "{newest:#?}");
    assert!(newest[0].contains("question A"), "{newest:#?}");
    assert!(
        newest[1].contains("question A"),
        "the retried Telegram turn asked the model to answer {:?}, not Marko's Telegram message",
        newest[1]
    );
    assert!(newest[2].contains("question B"), "{newest:#?}");
}

/// What the soak's agent log showed after one of its cuts (an e-mail reply 15 s late,
/// and `channel: the platform refused the bot's credentials` logged as an error): a
/// connection lost while the bot logs in to IMAP is taken for refused credentials — the
/// channel reports `CredentialsRefused` (readiness, the SaintBot's Event) and waits a
/// minute before it tries again, instead of reconnecting at once as after any other
/// cut. Here a relay in front of Dovecot drops the bot's first connection when its
/// `LOGIN` arrives; the next connection would be let through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_lost_during_the_imap_login_is_not_refused_credentials() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = MailServer::start();
    let llm = saint_scripted::llm::ScriptedLlm::start().await.unwrap();
    // The relay: the first connection is dropped when the client sends LOGIN.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_port = listener.local_addr().unwrap().port();
    let imap = server.imap;
    let cut = Arc::new(AtomicBool::new(false));
    {
        let cut = cut.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(upstream) = tokio::net::TcpStream::connect(("127.0.0.1", imap)).await else {
                    continue;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = upstream.into_split();
                let downstream = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                });
                let cut = cut.clone();
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 16 * 1024];
                    loop {
                        let read = match client_read.read(&mut buffer).await {
                            Ok(0) | Err(_) => break,
                            Ok(read) => read,
                        };
                        let text = String::from_utf8_lossy(&buffer[..read]).to_uppercase();
                        if text.contains("LOGIN") && !cut.swap(true, Ordering::SeqCst) {
                            downstream.abort();
                            return; // both halves dropped: the connection is gone
                        }
                        if server_write.write_all(&buffer[..read]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
    }
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    seed_workspace(&workspace);
    let config_path = directory.path().join("bot-config.json");
    let mut config = test_config(&llm.base_url());
    config["channels"] = json!([
        {"name": "email", "kind": "email",
         "settings": {"address": BOT, "imapHost": "127.0.0.1", "imapPort": relay_port.to_string(),
                      "imapSecurity": "none", "smtpHost": "127.0.0.1",
                      "smtpPort": server.submission.to_string(), "smtpSecurity": "none"},
         "secretEnv": {"password": "MAIL_PASSWORD"}},
    ]);
    write_config(&config_path, &config);
    let agent = common::spawn_agent(&config_path, &workspace, &[("MAIL_PASSWORD", BOT_PASSWORD)]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cut.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the bot never sent LOGIN");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // As after any other cut, the channel connects again within a few seconds.
    let deadline = Instant::now() + Duration::from_secs(15);
    let readyz = format!("{}/readyz", agent.metrics);
    loop {
        if count(
            &workspace,
            "SELECT COUNT(*) FROM channel_cursor WHERE channel = 'email'",
        ) == 1
        {
            break;
        }
        let said = reqwest::get(&readyz).await.unwrap().text().await.unwrap();
        assert!(
            Instant::now() < deadline,
            "the e-mail channel did not reconnect within 15 s of a connection lost during LOGIN; /readyz says:\n{said}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
