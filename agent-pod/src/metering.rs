//! Metering: one `logs/usage.jsonl` line per tool call, Prometheus metrics, token usage →
//! cost through the config's price table, and budget periods.
//!
//! Writes only `logs/usage.jsonl` under the workspace. Nothing here is ever shown to the
//! model: the bot does not know what it costs or what it runs on.

use std::{
    fs::{File, OpenOptions},
    io::Write,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use parking_lot::Mutex;
use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};
use saint_config::{Budget, BudgetPeriod, ModelConfig};
use saint_llm::Usage;
use serde_json::{Map, Value, json};

/// Why metering could not start.
#[derive(Debug, thiserror::Error)]
pub enum MeteringError {
    #[error("failed to open usage log {path}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Input fields whose content is replaced by its length in the usage log (file bodies,
/// patches): the log is for billing and audit, not a second copy of the workspace.
const BULKY_FIELDS: &[&str] = &[
    "content",
    "patch",
    "new_string",
    "old_string",
    "newText",
    "oldText",
    "text",
    "input",
];
const MAX_FIELD_CHARS: usize = 200;

/// A compact, bounded summary of tool input for the usage log.
pub fn summarise_parameters(input: &Value) -> Value {
    match input {
        Value::Object(fields) => {
            let mut summary = Map::new();
            for (key, value) in fields {
                let entry = match value {
                    Value::String(text) if BULKY_FIELDS.contains(&key.as_str()) => {
                        json!(format!("<{} chars>", text.chars().count()))
                    }
                    Value::String(text) if text.chars().count() > MAX_FIELD_CHARS => {
                        json!(format!(
                            "{}…",
                            text.chars().take(MAX_FIELD_CHARS).collect::<String>()
                        ))
                    }
                    Value::Array(items) => json!(format!("<{} items>", items.len())),
                    Value::Object(_) => json!("<object>"),
                    other => other.clone(),
                };
                summary.insert(key.clone(), entry);
            }
            Value::Object(summary)
        }
        other => json!(format!(
            "<{}>",
            if other.is_null() {
                "none"
            } else {
                "non-object"
            }
        )),
    }
}

/// One tool call as logged.
#[derive(Clone, Debug)]
pub struct ToolCallRecord<'a> {
    /// Contact slug.
    pub user: &'a str,
    /// Role name.
    pub role: &'a str,
    /// Tool name.
    pub tool: &'a str,
    /// Tool input (summarised before writing).
    pub input: &'a Value,
    /// Wall time of the call.
    pub duration: Duration,
    /// `ok` or the error's outcome label.
    pub outcome: &'a str,
    /// Extra facts from the tool (`{"porter": true}`).
    pub extra: &'a Map<String, Value>,
    /// What started the turn ([`saint_tools::Trigger::label`]).
    pub trigger: &'a str,
}

/// One finished turn as logged: who it is metered to, what started it, what it cost.
#[derive(Clone, Debug)]
pub struct TurnRecord<'a> {
    /// Contact slug (the bot's own slug for the heartbeat).
    pub user: &'a str,
    /// Role name.
    pub role: &'a str,
    /// What started the turn.
    pub trigger: &'a str,
    /// How it ended (`answered`, `over_budget`, …).
    pub outcome: &'a str,
    /// Model calls made.
    pub model_calls: u32,
    /// Tokens used.
    pub usage: Usage,
    /// Spend in USD.
    pub cost_usd: f64,
}

/// The usage log line for a finished turn (a `turn` field where tool lines have `tool`).
pub fn turn_line(record: &TurnRecord<'_>, timestamp: jiff::Timestamp) -> String {
    let mut text = json!({
        "ts": timestamp.to_string(),
        "user": record.user,
        "role": record.role,
        "trigger": record.trigger,
        "turn": record.outcome,
        "modelCalls": record.model_calls,
        "inputTokens": record.usage.input_tokens,
        "outputTokens": record.usage.output_tokens,
        "costUsd": record.cost_usd,
    })
    .to_string();
    text.push('\n');
    text
}

/// One attempt of a model call as logged: which chain entry and model, how it ended.
#[derive(Clone, Debug)]
pub struct ModelAttemptRecord<'a> {
    /// Contact slug.
    pub user: &'a str,
    /// Role name.
    pub role: &'a str,
    /// What started the turn.
    pub trigger: &'a str,
    /// Model name called.
    pub model: &'a str,
    /// Chain entry (`primary`, `fallback-1`, …).
    pub entry: &'a str,
    /// Attempt number within the model call (1 for the first).
    pub attempt: u32,
    /// `ok` or what went wrong (`rate_limited`, `overloaded`, `unauthorized`, …).
    pub outcome: &'a str,
    /// Wall time of the attempt.
    pub duration: Duration,
    /// Tokens the provider reported (zero for a failed attempt).
    pub usage: Usage,
    /// Spend in USD.
    pub cost_usd: f64,
}

/// The usage log line for a model attempt (an `attempt` field where tool lines have
/// `tool` and turn lines `turn`).
pub fn attempt_line(record: &ModelAttemptRecord<'_>, timestamp: jiff::Timestamp) -> String {
    let mut text = json!({
        "ts": timestamp.to_string(),
        "user": record.user,
        "role": record.role,
        "trigger": record.trigger,
        "model": record.model,
        "entry": record.entry,
        "attempt": record.attempt,
        "outcome": record.outcome,
        "durationMs": record.duration.as_millis() as u64,
        "inputTokens": record.usage.input_tokens,
        "outputTokens": record.usage.output_tokens,
        "costUsd": record.cost_usd,
    })
    .to_string();
    text.push('\n');
    text
}

/// One request to a media service (a transcription) as logged and counted.
#[derive(Clone, Debug)]
pub struct MediaRecord<'a> {
    /// `transcription`.
    pub service: &'a str,
    /// Contact slug.
    pub user: &'a str,
    /// See [`person_label`].
    pub person: &'a str,
    /// Role name.
    pub role: &'a str,
    /// What started the turn.
    pub trigger: &'a str,
    /// The service's model.
    pub model: &'a str,
    /// `ok` or why not (`too_long`, `too_large`, `failed`, `timeout`, `over_budget`, …).
    pub outcome: &'a str,
    /// Seconds of audio sent (0 when nothing was sent).
    pub audio_seconds: f64,
    /// Bytes of audio sent (0 when nothing was sent).
    pub audio_bytes: u64,
    /// Wall time of the request.
    pub duration: Duration,
    /// Spend in USD.
    pub cost_usd: f64,
}

/// The usage log line of a media request (a field named by its service, holding the
/// outcome, where tool lines have `tool`).
pub fn media_line(record: &MediaRecord<'_>, timestamp: jiff::Timestamp) -> String {
    let mut line = Map::new();
    line.insert("ts".into(), json!(timestamp.to_string()));
    line.insert("user".into(), json!(record.user));
    line.insert("role".into(), json!(record.role));
    line.insert("trigger".into(), json!(record.trigger));
    line.insert(record.service.into(), json!(record.outcome));
    line.insert("model".into(), json!(record.model));
    line.insert("audioSeconds".into(), json!(record.audio_seconds));
    line.insert("audioBytes".into(), json!(record.audio_bytes));
    line.insert(
        "durationMs".into(),
        json!(record.duration.as_millis() as u64),
    );
    line.insert("costUsd".into(), json!(record.cost_usd));
    let mut text = Value::Object(line).to_string();
    text.push('\n');
    text
}

/// The usage log line for a record.
pub fn usage_line(record: &ToolCallRecord<'_>, timestamp: jiff::Timestamp) -> String {
    let mut line = Map::new();
    line.insert("ts".into(), json!(timestamp.to_string()));
    line.insert("user".into(), json!(record.user));
    line.insert("role".into(), json!(record.role));
    line.insert("tool".into(), json!(record.tool));
    line.insert("params".into(), summarise_parameters(record.input));
    line.insert(
        "durationMs".into(),
        json!(record.duration.as_millis() as u64),
    );
    line.insert("outcome".into(), json!(record.outcome));
    line.insert("trigger".into(), json!(record.trigger));
    for (key, value) in record.extra {
        line.entry(key.clone()).or_insert_with(|| value.clone());
    }
    let mut text = Value::Object(line).to_string();
    text.push('\n');
    text
}

/// Cost in USD of `usage` on `model`, or `None` if the price table has no entry.
pub fn cost_usd(model_config: &ModelConfig, model: &str, usage: Usage) -> Option<f64> {
    let price = model_config.prices.get(model)?;
    Some(
        usage.input_tokens as f64 * price.input_per_mtok / 1_000_000.0
            + usage.output_tokens as f64 * price.output_per_mtok / 1_000_000.0,
    )
}

/// Today's date in UTC (`2026-11-22`): spend is stored per day, so a role whose budget
/// period changes (day → month) still sees the right total.
pub fn spend_day(now: jiff::Timestamp) -> String {
    now.to_zoned(jiff::tz::TimeZone::UTC)
        .date()
        .strftime("%Y-%m-%d")
        .to_string()
}

/// First and last day (inclusive, `YYYY-MM-DD`) of the budget period containing `now`
/// (UTC calendar day, ISO week, calendar month).
pub fn period_days(period: BudgetPeriod, now: jiff::Timestamp) -> (String, String) {
    let date = now.to_zoned(jiff::tz::TimeZone::UTC).date();
    let (first, last) = match period {
        BudgetPeriod::Day => (date, date),
        BudgetPeriod::Week => {
            let back = i64::from(date.weekday().to_monday_zero_offset());
            let monday = date.saturating_sub(jiff::Span::new().days(back));
            (monday, monday.saturating_add(jiff::Span::new().days(6)))
        }
        BudgetPeriod::Month => (date.first_of_month(), date.last_of_month()),
    };
    let format = |day: jiff::civil::Date| day.strftime("%Y-%m-%d").to_string();
    (format(first), format(last))
}

/// Whether a contact with `spent` USD in the current period may make another model call.
pub fn within_budget(budget: Option<&Budget>, spent: f64) -> bool {
    match budget {
        None => true,
        Some(budget) => spent < budget.usd,
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolNameLabels {
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolRoleLabels {
    tool: String,
    role: String,
}

/// The bytes of output a call's commands wrote, from the facts the tool reported:
/// `exec`'s `stdoutBytes` and `stderrBytes` (all it wrote, shown or not), or what a
/// `process` poll handed over plus what was dropped unread (`outputBytes`,
/// `droppedBytes`), so each byte of a background command counts once.
pub fn reported_output_bytes(extra: &Map<String, Value>) -> u64 {
    ["stdoutBytes", "stderrBytes", "outputBytes", "droppedBytes"]
        .iter()
        .filter_map(|field| extra.get(*field).and_then(Value::as_u64))
        .sum()
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TurnLabels {
    role: String,
    outcome: String,
    trigger: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    model: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    outcome: String,
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EntryLabels {
    entry: String,
    model: String,
}

/// Spend is labelled by who caused it: the contact's slug, or `stranger` for everyone
/// no Contact names (one series for all of them, so strangers cannot grow the series).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CostLabels {
    model: String,
    role: String,
    person: String,
    trigger: String,
}

/// The `person` label of a caller's spend.
pub fn person_label(known: bool, slug: &str) -> &str {
    if known { slug } else { "stranger" }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoleLabels {
    role: String,
}

/// A media service's work (`service`: `transcription`), by who caused it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MediaLabels {
    service: String,
    role: String,
    person: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MediaOutcomeLabels {
    service: String,
    outcome: String,
    role: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApprovalLabels {
    /// `requested`, `approved`, `rejected`, `expired`, `refused`.
    event: String,
    /// The requester's role.
    role: String,
}

fn duration_histogram() -> Histogram {
    Histogram::new([0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10.0, 30.0, 120.0])
}

/// Who a model call was for, as metrics label it.
#[derive(Clone, Copy, Debug)]
pub struct ModelCall<'a> {
    pub model: &'a str,
    pub role: &'a str,
    /// See [`person_label`].
    pub person: &'a str,
    /// What started the turn ([`saint_tools::Trigger::label`]).
    pub trigger: &'a str,
}

/// Prometheus metrics of the runtime.
pub struct Metrics {
    registry: Registry,
    tool_calls: Family<ToolLabels, Counter>,
    tool_seconds: Family<ToolNameLabels, Histogram, fn() -> Histogram>,
    tool_output_bytes: Family<ToolRoleLabels, Counter>,
    tool_characters: Family<ToolRoleLabels, Counter>,
    tool_audio_bytes: Family<ToolRoleLabels, Counter>,
    turns: Family<TurnLabels, Counter>,
    tokens: Family<TokenLabels, Counter>,
    cost: Family<CostLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    budget_refusals: Family<RoleLabels, Counter>,
    model_seconds: Family<ModelLabels, Histogram, fn() -> Histogram>,
    channel_up: Family<ChannelLabels, Gauge>,
    channel_messages: Family<ChannelMessageLabels, Counter>,
    delivery_failures: Family<DeliveryFailureLabels, Counter>,
    dead_letters: Family<DeadLetterLabels, Counter>,
    llm_attempts: Family<AttemptLabels, Counter>,
    llm_entry_healthy: Family<EntryLabels, Gauge>,
    approvals: Family<ApprovalLabels, Counter>,
    media_requests: Family<MediaOutcomeLabels, Counter>,
    media_audio_seconds: Family<MediaLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    media_audio_bytes: Family<MediaLabels, Counter>,
    approvals_pending: Gauge,
    browser_egress: Family<BrowserEgressLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BrowserEgressLabels {
    /// `allowed` or `refused` by the browser's egress guard.
    outcome: String,
    role: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeadLetterLabels {
    channel: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelLabels {
    channel: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelMessageLabels {
    channel: String,
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeliveryFailureLabels {
    channel: String,
    reason: String,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("saint");
        let tool_calls = Family::<ToolLabels, Counter>::default();
        registry.register(
            "tool_calls",
            "Tool calls by tool and outcome",
            tool_calls.clone(),
        );
        let tool_seconds =
            Family::<ToolNameLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                duration_histogram,
            );
        registry.register(
            "tool_call_duration_seconds",
            "Tool call wall time",
            tool_seconds.clone(),
        );
        let tool_output_bytes = Family::<ToolRoleLabels, Counter>::default();
        registry.register(
            "tool_output_bytes",
            "Output bytes commands wrote (exec, process) and the browser returned, by tool and the caller's role",
            tool_output_bytes.clone(),
        );
        let turns = Family::<TurnLabels, Counter>::default();
        let tool_characters = Family::<ToolRoleLabels, Counter>::default();
        registry.register(
            "tool_characters",
            "Characters a tool spoke (tts) by tool and the caller's role",
            tool_characters.clone(),
        );
        let tool_audio_bytes = Family::<ToolRoleLabels, Counter>::default();
        registry.register(
            "tool_audio_bytes",
            "Bytes of audio a tool made (tts) by tool and the caller's role",
            tool_audio_bytes.clone(),
        );
        registry.register("turns", "Turns by role and outcome", turns.clone());
        let tokens = Family::<TokenLabels, Counter>::default();
        registry.register(
            "llm_tokens",
            "Model tokens by model and kind (input, output)",
            tokens.clone(),
        );
        let cost = Family::<CostLabels, Counter<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "llm_cost_usd",
            "Model spend in USD by model, role and person",
            cost.clone(),
        );
        let budget_refusals = Family::<RoleLabels, Counter>::default();
        registry.register(
            "budget_refusals",
            "Messages refused because the contact is over budget",
            budget_refusals.clone(),
        );
        let model_seconds =
            Family::<ModelLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                duration_histogram,
            );
        registry.register(
            "llm_call_duration_seconds",
            "Model call wall time",
            model_seconds.clone(),
        );
        let channel_up = Family::<ChannelLabels, Gauge>::default();
        registry.register(
            "channel_up",
            "1 while a channel serves; 0 while the platform refuses its credentials",
            channel_up.clone(),
        );
        let channel_messages = Family::<ChannelMessageLabels, Counter>::default();
        registry.register(
            "channel_messages",
            "Channel messages by channel and direction (in: stored in the inbox; out: sent)",
            channel_messages.clone(),
        );
        let delivery_failures = Family::<DeliveryFailureLabels, Counter>::default();
        registry.register(
            "channel_delivery_failures",
            "Failed send attempts by channel and reason (retry, rejected, credentials, window)",
            delivery_failures.clone(),
        );
        let dead_letters = Family::<DeadLetterLabels, Counter>::default();
        registry.register(
            "channel_dead_letters",
            "Messages given up on for good (refused by the platform, or retried past the cap), by channel",
            dead_letters.clone(),
        );
        let llm_attempts = Family::<AttemptLabels, Counter>::default();
        registry.register(
            "llm_attempts",
            "Model call attempts by outcome and model (every retry and failover counted)",
            llm_attempts.clone(),
        );
        let llm_entry_healthy = Family::<EntryLabels, Gauge>::default();
        registry.register(
            "llm_entry_healthy",
            "1 while a failover chain entry is used; 0 while it cools down after refusing a call",
            llm_entry_healthy.clone(),
        );
        let approvals = Family::<ApprovalLabels, Counter>::default();
        registry.register(
            "approvals",
            "Approval events by event (requested, approved, rejected, expired, refused) and the requester's role",
            approvals.clone(),
        );
        let approvals_pending = Gauge::default();
        registry.register(
            "approvals_pending",
            "Approval requests waiting for a decision (read from their store after every change)",
            approvals_pending.clone(),
        );
        let media_requests = Family::<MediaOutcomeLabels, Counter>::default();
        registry.register(
            "media_requests",
            "Media service requests (transcription) by service, outcome and the caller's role",
            media_requests.clone(),
        );
        let media_audio_seconds =
            Family::<MediaLabels, Counter<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "media_audio_seconds",
            "Seconds of audio sent to a media service, by service, role and person",
            media_audio_seconds.clone(),
        );
        let media_audio_bytes = Family::<MediaLabels, Counter>::default();
        registry.register(
            "media_audio_bytes",
            "Bytes of audio sent to a media service, by service, role and person",
            media_audio_bytes.clone(),
        );
        let browser_egress = Family::<BrowserEgressLabels, Counter>::default();
        registry.register(
            "browser_egress_requests",
            "Requests the browser tool's pages made, by the egress guard's outcome and the caller's role",
            browser_egress.clone(),
        );
        Self {
            registry,
            tool_calls,
            tool_seconds,
            tool_output_bytes,
            tool_characters,
            tool_audio_bytes,
            turns,
            tokens,
            cost,
            budget_refusals,
            model_seconds,
            channel_up,
            channel_messages,
            delivery_failures,
            dead_letters,
            llm_attempts,
            llm_entry_healthy,
            approvals,
            media_requests,
            media_audio_seconds,
            media_audio_bytes,
            approvals_pending,
            browser_egress,
        }
    }
}

impl Metrics {
    /// Sets `saint_channel_up` for a channel.
    pub fn channel_up(&self, channel: &str, kind: &str, up: bool) {
        self.channel_up
            .get_or_create(&ChannelLabels {
                channel: channel.to_string(),
                kind: kind.to_string(),
            })
            .set(i64::from(up));
    }

    /// Counts a message in (`in`) or out (`out`) of a channel.
    pub fn channel_message(&self, channel: &str, direction: &str) {
        self.channel_messages
            .get_or_create(&ChannelMessageLabels {
                channel: channel.to_string(),
                direction: direction.to_string(),
            })
            .inc();
    }

    /// Counts a failed send attempt.
    pub fn delivery_failure(&self, channel: &str, reason: &str) {
        self.delivery_failures
            .get_or_create(&DeliveryFailureLabels {
                channel: channel.to_string(),
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Counts an approval event.
    pub fn approval(&self, event: &str, role: &str) {
        self.approvals
            .get_or_create(&ApprovalLabels {
                event: event.to_string(),
                role: role.to_string(),
            })
            .inc();
    }

    /// Sets how many approval requests wait.
    pub fn approvals_pending(&self, pending: usize) {
        self.approvals_pending
            .set(i64::try_from(pending).unwrap_or(i64::MAX));
    }

    /// Counts a message moved to the dead letters.
    pub fn dead_letter(&self, channel: &str) {
        self.dead_letters
            .get_or_create(&DeadLetterLabels {
                channel: channel.to_string(),
            })
            .inc();
    }

    /// Counts a tool call.
    pub fn tool_call(&self, tool: &str, outcome: &str, duration: Duration) {
        self.tool_calls
            .get_or_create(&ToolLabels {
                tool: tool.into(),
                outcome: outcome.into(),
            })
            .inc();
        self.tool_seconds
            .get_or_create(&ToolNameLabels { tool: tool.into() })
            .observe(duration.as_secs_f64());
    }

    /// Counts output bytes a tool's commands wrote for a caller of `role`.
    /// Counts the browser's egress requests of one call (`egressAllowed`,
    /// `egressRefused` in its metering).
    pub fn browser_egress(&self, role: &str, extra: &Map<String, Value>) {
        for (field, outcome) in [("egressAllowed", "allowed"), ("egressRefused", "refused")] {
            if let Some(count) = extra.get(field).and_then(Value::as_u64) {
                self.browser_egress
                    .get_or_create(&BrowserEgressLabels {
                        outcome: outcome.into(),
                        role: role.into(),
                    })
                    .inc_by(count);
            }
        }
    }

    pub fn tool_output(&self, tool: &str, role: &str, bytes: u64) {
        self.tool_output_bytes
            .get_or_create(&ToolRoleLabels {
                tool: tool.into(),
                role: role.into(),
            })
            .inc_by(bytes);
    }

    /// Counts what a speaking tool made for a caller of `role`: characters and audio
    /// bytes.
    pub fn tool_speech(&self, tool: &str, role: &str, characters: u64, audio_bytes: u64) {
        let labels = ToolRoleLabels {
            tool: tool.into(),
            role: role.into(),
        };
        self.tool_characters
            .get_or_create(&labels)
            .inc_by(characters);
        self.tool_audio_bytes
            .get_or_create(&labels)
            .inc_by(audio_bytes);
    }

    /// Counts a finished turn.
    pub fn turn(&self, role: &str, outcome: &str, trigger: &str) {
        self.turns
            .get_or_create(&TurnLabels {
                role: role.into(),
                outcome: outcome.into(),
                trigger: trigger.into(),
            })
            .inc();
    }

    /// Counts a model call's tokens, cost and time.
    pub fn model_call(&self, call: ModelCall<'_>, usage: Usage, cost_usd: f64, duration: Duration) {
        let ModelCall {
            model,
            role,
            person,
            trigger,
        } = call;
        let labels = |kind: &str| TokenLabels {
            model: model.into(),
            kind: kind.into(),
        };
        self.tokens
            .get_or_create(&labels("input"))
            .inc_by(usage.input_tokens);
        self.tokens
            .get_or_create(&labels("output"))
            .inc_by(usage.output_tokens);
        self.cost
            .get_or_create(&CostLabels {
                model: model.into(),
                role: role.into(),
                person: person.into(),
                trigger: trigger.into(),
            })
            .inc_by(cost_usd);
        self.model_seconds
            .get_or_create(&ModelLabels {
                model: model.into(),
            })
            .observe(duration.as_secs_f64());
    }

    /// Counts one model attempt.
    pub fn llm_attempt(&self, model: &str, outcome: &str) {
        self.llm_attempts
            .get_or_create(&AttemptLabels {
                outcome: outcome.into(),
                model: model.into(),
            })
            .inc();
    }

    /// Sets `saint_llm_entry_healthy` for a chain entry.
    pub fn llm_entry_health(&self, entry: &str, model: &str, healthy: bool) {
        self.llm_entry_healthy
            .get_or_create(&EntryLabels {
                entry: entry.into(),
                model: model.into(),
            })
            .set(i64::from(healthy));
    }

    /// Counts one media service request and, when audio was sent, its seconds, bytes
    /// and cost (the cost under `llm_cost_usd`, by the service's model).
    pub fn media_request(&self, record: &MediaRecord<'_>) {
        self.media_requests
            .get_or_create(&MediaOutcomeLabels {
                service: record.service.into(),
                outcome: record.outcome.into(),
                role: record.role.into(),
            })
            .inc();
        if record.audio_bytes == 0 {
            return;
        }
        let labels = MediaLabels {
            service: record.service.into(),
            role: record.role.into(),
            person: record.person.into(),
        };
        self.media_audio_seconds
            .get_or_create(&labels)
            .inc_by(record.audio_seconds);
        self.media_audio_bytes
            .get_or_create(&labels)
            .inc_by(record.audio_bytes);
        self.cost
            .get_or_create(&CostLabels {
                model: record.model.into(),
                role: record.role.into(),
                person: record.person.into(),
                trigger: record.trigger.into(),
            })
            .inc_by(record.cost_usd);
    }

    /// Counts a budget refusal.
    pub fn budget_refusal(&self, role: &str) {
        self.budget_refusals
            .get_or_create(&RoleLabels { role: role.into() })
            .inc();
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        text
    }
}

/// The usage log plus metrics.
pub struct Metering {
    usage_log: Arc<Mutex<File>>,
    usage_path: PathBuf,
    /// Prometheus metrics.
    pub metrics: Metrics,
}

impl Metering {
    /// Opens `<workspace>/logs/usage.jsonl` for appending.
    pub fn open(workspace: &Path) -> Result<Self, MeteringError> {
        let path = workspace.join("logs").join("usage.jsonl");
        let open = || -> std::io::Result<File> {
            std::fs::create_dir_all(path.parent().expect("has a parent"))?;
            OpenOptions::new().create(true).append(true).open(&path)
        };
        let file = open().map_err(|source| MeteringError::Open {
            path: path.clone(),
            source,
        })?;
        Ok(Self {
            usage_log: Arc::new(Mutex::new(file)),
            usage_path: path,
            metrics: Metrics::default(),
        })
    }

    /// The usage log path.
    pub fn usage_path(&self) -> &Path {
        &self.usage_path
    }

    /// Logs and counts one tool call; returns once the line is written. The write runs
    /// off the async workers. A failed write is reported, never fatal: the call
    /// already happened.
    pub async fn record_tool_call(&self, record: &ToolCallRecord<'_>) {
        self.metrics
            .tool_call(record.tool, record.outcome, record.duration);
        let output_bytes = reported_output_bytes(record.extra);
        if output_bytes > 0 {
            self.metrics
                .tool_output(record.tool, record.role, output_bytes);
        }
        if let Some(characters) = record.extra.get("characters").and_then(Value::as_u64) {
            let audio_bytes = record
                .extra
                .get("audioBytes")
                .and_then(Value::as_u64)
                .unwrap_or_default();
            self.metrics
                .tool_speech(record.tool, record.role, characters, audio_bytes);
        }
        if record.tool == "browser" {
            self.metrics.browser_egress(record.role, record.extra);
        }
        let line = usage_line(record, jiff::Timestamp::now());
        self.append(line).await;
    }

    /// Logs and counts one media service request.
    pub async fn record_media(&self, record: &MediaRecord<'_>) {
        self.metrics.media_request(record);
        self.append(media_line(record, jiff::Timestamp::now()))
            .await;
    }

    /// Counts a finished turn and logs it to the usage log.
    pub async fn record_turn(&self, record: &TurnRecord<'_>) {
        self.record_turn_after("", record).await;
    }

    /// Counts a finished turn and logs `lines` (its model attempts' lines, see
    /// [`attempt_line`]) and then its own line, in one write.
    pub async fn record_turn_after(&self, lines: &str, record: &TurnRecord<'_>) {
        self.metrics
            .turn(record.role, record.outcome, record.trigger);
        let mut text = lines.to_string();
        text.push_str(&turn_line(record, jiff::Timestamp::now()));
        self.append(text).await;
    }

    async fn append(&self, line: String) {
        let log = self.usage_log.clone();
        let written =
            tokio::task::spawn_blocking(move || log.lock().write_all(line.as_bytes())).await;
        match written {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::error!(%error, "failed to append to the usage log"),
            Err(_) => tracing::error!("the usage log write panicked"),
        }
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn usage_line_has_the_seed_fields_and_hides_bulky_input() {
        let input =
            json!({"path": "memory/users/ana/notes.md", "content": "secret plans ".repeat(100)});
        let extra = Map::from_iter([("porter".to_string(), json!(true))]);
        let record = ToolCallRecord {
            user: "ana",
            role: "owner",
            tool: "write",
            input: &input,
            duration: Duration::from_millis(12),
            outcome: "ok",
            extra: &extra,
            trigger: "cron",
        };
        let line: Value = serde_json::from_str(&usage_line(
            &record,
            "2026-02-10T14:00:00Z".parse().unwrap(),
        ))
        .unwrap();
        assert_eq!(
            line,
            json!({
                "ts": "2026-02-10T14:00:00Z", "user": "ana", "role": "owner", "tool": "write",
                "params": {"path": "memory/users/ana/notes.md", "content": "<1300 chars>"},
                "durationMs": 12, "outcome": "ok", "trigger": "cron", "porter": true,
            })
        );
    }

    #[test]
    fn cost_uses_the_per_model_price_table() {
        let config = saint_config::BotConfig::from_json(include_str!(
            "../config/tests/fixtures/acme-bot-config.json"
        ))
        .unwrap();
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 100_000,
        };
        assert_eq!(
            cost_usd(&config.model, "claude-haiku-4-5", usage),
            Some(1.0 + 0.5)
        );
        assert_eq!(cost_usd(&config.model, "unpriced", usage), None);
    }

    #[test]
    fn periods_follow_utc_calendar_boundaries() {
        let now: jiff::Timestamp = "2026-11-22T23:30:00-02:00".parse().unwrap(); // Monday 01:30 on the 23rd UTC
        let days = |first: &str, last: &str| (first.to_string(), last.to_string());
        assert_eq!(spend_day(now), "2026-11-23");
        assert_eq!(
            period_days(BudgetPeriod::Day, now),
            days("2026-11-23", "2026-11-23")
        );
        assert_eq!(
            period_days(BudgetPeriod::Week, now),
            days("2026-11-23", "2026-11-29")
        );
        assert_eq!(
            period_days(BudgetPeriod::Month, now),
            days("2026-11-01", "2026-11-30")
        );
        let sunday: jiff::Timestamp = "2026-11-22T12:00:00Z".parse().unwrap();
        assert_eq!(
            period_days(BudgetPeriod::Week, sunday),
            days("2026-11-16", "2026-11-22")
        );
    }

    #[test]
    fn budget_is_exhausted_at_the_cap() {
        let budget = Budget {
            usd: 0.5,
            period: BudgetPeriod::Month,
        };
        assert!(within_budget(Some(&budget), 0.49));
        assert!(!within_budget(Some(&budget), 0.5));
        assert!(within_budget(None, 1e9));
    }

    #[test]
    fn metrics_encode_tool_and_token_counters() {
        let metrics = Metrics::default();
        metrics.tool_call("web_fetch", "denied", Duration::from_millis(3));
        metrics.model_call(
            ModelCall {
                model: "m",
                role: "owner",
                person: person_label(true, "ana"),
                trigger: "subagent",
            },
            Usage {
                input_tokens: 5,
                output_tokens: 2,
            },
            0.01,
            Duration::from_millis(1),
        );
        let text = metrics.encode();
        assert!(
            text.contains("saint_tool_calls_total{tool=\"web_fetch\",outcome=\"denied\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("saint_llm_tokens_total{model=\"m\",kind=\"input\"} 5"),
            "{text}"
        );
        assert!(
            text.contains(
                "saint_llm_cost_usd_total{model=\"m\",role=\"owner\",person=\"ana\",trigger=\"subagent\"} 0.01"
            ),
            "{text}"
        );
        assert_eq!(person_label(false, "http-someone"), "stranger");
    }

    #[test]
    fn command_output_counts_once_per_byte_by_tool_and_role() {
        let exec = Map::from_iter([
            ("stdoutBytes".to_string(), json!(40_000)),
            ("stderrBytes".to_string(), json!(2)),
            ("exitCode".to_string(), json!(0)),
        ]);
        assert_eq!(reported_output_bytes(&exec), 40_002);
        let poll = Map::from_iter([
            ("outputBytes".to_string(), json!(1024)),
            ("droppedBytes".to_string(), json!(8976)),
        ]);
        assert_eq!(reported_output_bytes(&poll), 10_000);
        assert_eq!(reported_output_bytes(&Map::new()), 0);
        let metrics = Metrics::default();
        metrics.browser_egress(
            "owner",
            &Map::from_iter([
                ("egressAllowed".to_string(), json!(7)),
                ("egressRefused".to_string(), json!(2)),
            ]),
        );
        let text = metrics.encode();
        assert!(
            text.contains(
                "saint_browser_egress_requests_total{outcome=\"refused\",role=\"owner\"} 2"
            ),
            "{text}"
        );
        metrics.tool_output("process", "owner", 10_000);
        metrics.tool_output("process", "owner", 5);
        let text = metrics.encode();
        assert!(
            text.contains("saint_tool_output_bytes_total{tool=\"process\",role=\"owner\"} 10005"),
            "{text}"
        );
    }
}
