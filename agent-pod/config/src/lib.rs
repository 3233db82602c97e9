//! The rendered bot config: the one document the operator writes and the agent reads.
//!
//! Pure data: no I/O beyond parsing. The operator fills it from a `SaintBot`, its
//! `Contact`s and `Role`s; `saint-agent` loads it, validates it and hot-reloads it.
//! Secret *values* never appear here — only the names of environment variables or
//! files through which the right container receives them.
//!
//! Field names are camelCase on the wire, like Kubernetes objects, and every map is a
//! `BTreeMap` so the same inputs always serialise to byte-identical JSON (a changed
//! byte would change the config hash and restart pods needlessly).

pub mod bot_file;
pub mod channel_settings;
mod error_chain;
mod identity;
pub mod mcp;
pub mod media;
pub mod sandbox_contract;
pub mod uids;
mod validate;

use std::{collections::BTreeMap, str::FromStr};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::{
    error_chain::ErrorChain,
    identity::{ChannelIdentity, ContactSlug, IdentityError, SessionKey, normalise_peer},
    mcp::{McpConfig, McpCredential, McpServerConfig, McpTransport},
    media::{
        MediaConfig, SpeechConfig, SpeechEngine, TRANSCRIPTION_API_KEY_ENV, TranscriptionConfig,
    },
    sandbox_contract::{
        SANDBOX_RUN_MOUNT_PATH, SANDBOX_RUN_SUBPATH_PLACEHOLDER, SANDBOX_RUN_SUBPATH_PREFIX,
        SANDBOX_VIEW_MOUNT_PATH, SANDBOX_VIEW_SUBPATH_PLACEHOLDER,
    },
    validate::{
        ConfigError, MIN_HEARTBEAT_SECONDS, MIN_JOB_INTERVAL_SECONDS, clock_minutes, is_https_url,
        is_known_timezone, is_known_tool_pattern, is_workspace_relative, memory_scope_message,
        validate,
    },
};

/// The schema version this crate reads and writes. Bumped on any breaking change.
pub const SCHEMA_VERSION: &str = "saint.work/bot-config/v1alpha1";

/// The file name of the rendered config inside its ConfigMap / on disk.
pub const CONFIG_FILE_NAME: &str = "bot-config.json";

/// The agent container's variable holding its SaintBot's uid (set by the operator), so
/// the agent can put Events on the SaintBot (`kubectl describe sbot` shows them).
pub const BOT_UID_ENV: &str = "SAINT_BOT_UID";

/// Tool names the runtime knows. Roles may name these, `group:<name>` or globs.
pub const KNOWN_TOOLS: &[&str] = &[
    "read",
    "write",
    "edit",
    "apply_patch",
    "exec",
    "process",
    "web_search",
    "web_fetch",
    "browser",
    "message",
    "memory_search",
    "memory_get",
    "sessions_list",
    "sessions_history",
    "sessions_send",
    "sessions_spawn",
    "cron",
    "skill",
    "tts",
    "image",
    TOP_UP_TOOL,
];

/// The tool that raises a person's budget for the period once someone their role's
/// `approvals` name says yes (never offered without such a rule and a budget).
pub const TOP_UP_TOOL: &str = "budget_top_up";

/// Tool groups (`group:<name>`) and the tools each one expands to.
pub const TOOL_GROUPS: &[(&str, &[&str])] = &[
    ("fs", &["read", "write", "edit", "apply_patch"]),
    ("runtime", &["exec", "process"]),
    ("web", &["web_search", "web_fetch"]),
    ("ui", &["browser"]),
    ("memory", &["memory_search", "memory_get"]),
    (
        "sessions",
        &[
            "sessions_list",
            "sessions_history",
            "sessions_send",
            "sessions_spawn",
        ],
    ),
    ("messaging", &["message"]),
    ("automation", &["cron"]),
    ("skills", &["skill"]),
    ("media", &["tts", "image"]),
];

/// Bootstrap files the runtime knows how to load into a system prompt, in prompt order.
pub const BOOTSTRAP_FILES: &[&str] = &[
    "SOUL.md",
    "IDENTITY.md",
    "AGENTS.md",
    "TOOLS.md",
    "USER.md",
    "HEARTBEAT.md",
];

/// Files no role may ever write through the agent's tools (the first of the three
/// write tiers: platform-protected, owner files, the asker's own folder).
pub const DEFAULT_PLATFORM_PROTECTED: &[&str] = &[
    "SOUL.md",
    "IDENTITY.md",
    "AGENTS.md",
    // The heartbeat's instructions: a turn that runs on its own and notifies people
    // follows them, so no role's tools may rewrite them.
    "HEARTBEAT.md",
    "config/**",
    "skills/**",
    "logs/**",
    "sessions/**",
];

/// The whole rendered config.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BotConfig {
    /// The JSON Schema an editor validates this file with (`$schema`; the local bot
    /// file names [`bot_file::SCHEMA_FILE_NAME`] beside it). Ignored by the agent.
    #[serde(rename = "$schema", default, skip_serializing_if = "Option::is_none")]
    pub schema_link: Option<String>,
    /// Always [`SCHEMA_VERSION`]; the agent refuses other versions.
    pub schema_version: String,
    /// Which bot this is.
    pub bot: BotIdentity,
    /// The default model; roles may override the model name.
    pub model: ModelConfig,
    /// Chat channels the bot serves. No secrets: only env var names.
    #[serde(default)]
    pub channels: Vec<ChannelConfig>,
    /// Role given to senders that match no contact.
    pub default_role: String,
    /// Roles by name.
    pub roles: BTreeMap<String, RoleConfig>,
    /// Known people, sorted by slug.
    #[serde(default)]
    pub contacts: Vec<ContactConfig>,
    /// Canonical slug → normalised channel identities (`whatsapp:+385…`), generated from contacts.
    #[serde(default)]
    pub identity_links: BTreeMap<ContactSlug, Vec<ChannelIdentity>>,
    /// How session keys are derived.
    #[serde(default)]
    pub sessions: SessionsConfig,
    /// File-access tiers shared by all roles.
    #[serde(default)]
    pub file_access: FileAccessConfig,
    /// Web tools settings.
    #[serde(default)]
    pub web: WebConfig,
    /// Where and how `exec` runs.
    pub sandbox: SandboxConfig,
    /// The Porter broker as the agent sees it (never the credentials).
    #[serde(default)]
    pub porter: PorterConfig,
    /// Memory index settings.
    #[serde(default)]
    pub memory: MemoryConfig,
    /// Where persona files are read from besides the workspace; absent in local mode,
    /// where the workspace is the only source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persona: Option<PersonaConfig>,
    /// The periodic turn that reads `HEARTBEAT.md`; absent: no heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<HeartbeatConfig>,
    /// Scheduled jobs (`cron`) bot-wide: default time zone and missed-run policy.
    #[serde(default, skip_serializing_if = "ScheduleConfig::is_default")]
    pub schedule: ScheduleConfig,
    /// Where skills are read from besides the workspace's `skills/`.
    #[serde(default, skip_serializing_if = "SkillsConfig::is_empty")]
    pub skills: SkillsConfig,
    /// Bot-wide budget settings (the caps are per role: `roles.<name>.budget`).
    #[serde(default, skip_serializing_if = "BudgetConfig::is_default")]
    pub budget: BudgetConfig,
    /// Tool servers over the Model Context Protocol; roles name their tools
    /// `<server>.<tool>`.
    #[serde(default, skip_serializing_if = "McpConfig::is_empty")]
    pub mcp: McpConfig,
    /// Where traces go; absent: nowhere (no exporter runs).
    #[serde(default, skip_serializing_if = "TelemetryConfig::is_empty")]
    pub telemetry: TelemetryConfig,
    /// Media services: voice notes transcribed (`media.transcription`) and spoken
    /// replies (`media.speech`, the `tts` tool); absent: none.
    #[serde(default, skip_serializing_if = "MediaConfig::is_empty")]
    pub media: MediaConfig,
}

/// Traces of turns, model calls and tool calls (OpenTelemetry GenAI conventions):
/// attributes name the bot, the person's slug and role, models and tools, never
/// message text or secrets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TelemetryConfig {
    /// An OTLP/HTTP collector; absent: traces are not exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp: Option<OtlpConfig>,
}

impl TelemetryConfig {
    fn is_empty(&self) -> bool {
        self.otlp.is_none()
    }
}

/// An OTLP/HTTP collector (protobuf, `POST <endpoint>/v1/traces`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OtlpConfig {
    /// Base URL of the collector's OTLP/HTTP receiver (`http://otel-collector:4318`).
    pub endpoint: String,
    /// Request headers whose values are read from the agent's environment, by header
    /// name (`{"Authorization": "SAINT_OTLP_AUTHORIZATION"}`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers_env: BTreeMap<String, String>,
    /// Milliseconds spans wait to be sent in a batch.
    #[serde(default = "default_otlp_batch_millis")]
    pub batch_delay_millis: u64,
}

/// Milliseconds spans wait to be sent in a batch when the config does not say.
pub const DEFAULT_OTLP_BATCH_DELAY_MILLIS: u64 = 5_000;

fn default_otlp_batch_millis() -> u64 {
    DEFAULT_OTLP_BATCH_DELAY_MILLIS
}

/// How budgets treat models and tools: every model call reserves its worst case against
/// the person's budget at the price in `model.prices`, so a model without a price there
/// cannot be counted; a priced tool reserves its price per call the same way.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetConfig {
    /// What a call to a model `model.prices` does not price does: `refuse` (the
    /// default) fails it with a message naming `model.prices`; `allow` makes it, counted
    /// as free, so no budget stops it (`/readyz` and the SaintBot status warn).
    #[serde(default)]
    pub unpriced_models: UnpricedModels,
    /// USD per call of tools that cost money (`web_search`, a paid media or embedding
    /// endpoint): reserved before the call, charged when it succeeds. Tools not listed
    /// cost nothing.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tool_prices: BTreeMap<String, f64>,
}

impl BudgetConfig {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// What a call to a model without a price does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum UnpricedModels {
    /// Refuse it: its spend could not be counted against any budget.
    #[default]
    Refuse,
    /// Make it, counted as free: budgets do not stop it.
    Allow,
}

/// The heartbeat: a turn every `everySeconds` that reads `HEARTBEAT.md` and does what it
/// says, with the bot's own heartbeat role. An empty or comment-only file costs no
/// model call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeartbeatConfig {
    /// Seconds between heartbeats (≥ 60).
    pub every_seconds: u64,
    /// Only within these hours; absent: any time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_hours: Option<ActiveHours>,
    /// The role the heartbeat turn runs with (what it may do).
    pub role: String,
    /// Contacts (slugs) the heartbeat may notify: its answer goes to them, and its
    /// `message` tool reaches no one else. Empty: it notifies nobody.
    #[serde(default)]
    pub notify: Vec<ContactSlug>,
    /// What the heartbeat watches: when set, a beat makes a model call only if
    /// `HEARTBEAT.md`, the heartbeat settings or one of these inputs changed since the
    /// last beat that ran, so an idle bot costs nothing. Absent: every beat with tasks
    /// runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<HeartbeatWatch>,
}

/// Inputs a heartbeat watches for change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeartbeatWatch {
    /// Workspace files (relative paths) whose contents count.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// `https://` URLs whose `ETag`/`Last-Modified` (or body, when neither is sent)
    /// count.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub urls: Vec<String>,
}

/// A daily window, `start` inclusive to `end` exclusive, in a time zone. A window whose
/// end is before its start runs over midnight (`22:00`–`06:00`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActiveHours {
    /// `HH:MM`, 24-hour.
    pub start: String,
    /// `HH:MM`, 24-hour.
    pub end: String,
    /// IANA time zone (`Europe/Zagreb`); default: the schedule's time zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

/// Bot-wide scheduling settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScheduleConfig {
    /// IANA time zone of cron expressions that name none, and of active hours.
    #[serde(default = "default_timezone")]
    pub timezone: String,
    /// A run missed while the bot was down is made up once on start if it was due no
    /// longer than this many seconds ago; older ones are skipped (never a burst).
    #[serde(default = "default_missed_run_grace")]
    pub missed_run_grace_seconds: u64,
}

/// Time zone of schedules that name none.
pub const DEFAULT_TIMEZONE: &str = "UTC";

/// Seconds within which a missed run is made up on start.
pub const DEFAULT_MISSED_RUN_GRACE_SECONDS: u64 = 3_600;

fn default_timezone() -> String {
    DEFAULT_TIMEZONE.to_string()
}

fn default_missed_run_grace() -> u64 {
    DEFAULT_MISSED_RUN_GRACE_SECONDS
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        Self {
            timezone: default_timezone(),
            missed_run_grace_seconds: default_missed_run_grace(),
        }
    }
}

impl ScheduleConfig {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// Where the agent sees the skills its SaintBot declares (one folder per skill); the
/// operator mounts them here and names the directory in `skills.directories`.
pub const SKILLS_MOUNT_PATH: &str = "/etc/saint-skills";

/// Skill sources besides the workspace's `skills/<name>/SKILL.md`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SkillsConfig {
    /// Absolute directories holding `<name>/SKILL.md` folders (read-only). A skill
    /// declared here wins over a workspace folder of the same name.
    #[serde(default)]
    pub directories: Vec<String>,
}

impl SkillsConfig {
    fn is_empty(&self) -> bool {
        self.directories.is_empty()
    }
}

/// Where the agent container sees the SaintBot's persona ConfigMap (`<bot>-persona`):
/// the operator mounts it here and names it as `persona.directory` in the rendered
/// config, so the path is spelled once for both.
pub const PERSONA_MOUNT_PATH: &str = "/etc/saint-persona";

/// The persona directory: one file per persona file name (`SOUL.md`, …, `COMPANY.md`).
///
/// The rule, one for every persona file: a prompt file with a plain name (a
/// [`BOOTSTRAP_FILES`] entry or a role's `inject` entry without `/`) is read from this
/// directory when the directory holds it, and from the workspace only when it does not.
/// The directory is what the bot's owner declared (read-only, from the SaintBot); the
/// workspace is writable by the bot's own tools, so letting the declared file win means
/// nothing the bot writes replaces a persona its owner declared, while files the
/// SaintBot leaves out (an owner-edited `COMPANY.md`, say) still come from the
/// workspace. A file the directory holds but that is refused (a symlink leaving it,
/// oversized) is left out of the prompt, not replaced by the workspace's copy; a
/// directory that cannot be read at all (missing, or a `..data` link leaving it) is
/// logged and the workspace stands in, as without a directory. Which files a person's
/// prompt gets is decided by their role's `bootstrap` and `inject`, whichever source a
/// file comes from.
///
/// A Kubernetes ConfigMap volume (`..data` → a timestamped directory, each file a
/// symlink into `..data/`) and a plain directory are both read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PersonaConfig {
    /// Absolute path of the directory ([`PERSONA_MOUNT_PATH`] on Kubernetes).
    pub directory: String,
}

/// The bot's name and namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BotIdentity {
    /// `metadata.name` of the SaintBot.
    pub name: String,
    /// `metadata.namespace` of the SaintBot (empty in local mode).
    #[serde(default)]
    pub namespace: String,
}

/// Wire protocol of the LLM endpoint. The one provider enum: the SaintBot CRD, the
/// rendered config and the LLM client all use it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ModelProvider {
    /// Anthropic Messages API.
    #[default]
    Anthropic,
    /// OpenAI-compatible Chat Completions (also Ollama, vLLM, …).
    Openai,
}

impl ModelProvider {
    /// The provider's public endpoint, used when a bot names no base URL.
    pub fn default_base_url(self) -> &'static str {
        match self {
            ModelProvider::Anthropic => "https://api.anthropic.com",
            ModelProvider::Openai => "https://api.openai.com/v1",
        }
    }
}

/// The LLM the bot talks to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelConfig {
    /// Wire protocol.
    pub provider: ModelProvider,
    /// Default model name (roles may override).
    pub name: String,
    /// Base URL of the API, e.g. `https://api.anthropic.com`.
    pub base_url: String,
    /// Environment variable of the agent container holding the API key (absent: no key sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Context window in tokens; compaction starts before it is reached.
    #[serde(default = "default_context_window")]
    pub context_window: u32,
    /// Maximum output tokens per model call.
    #[serde(default = "default_max_output_tokens")]
    pub max_output_tokens: u32,
    /// Price table by model name, in USD per million tokens.
    #[serde(default)]
    pub prices: BTreeMap<String, ModelPrice>,
    /// Further API keys for this endpoint (environment variable names): calls rotate over
    /// `apiKeyEnv` and these, a rate-limited key resting until its `retry-after` passed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_api_key_envs: Vec<String>,
    /// Endpoints tried in order after this one (the primary) fails; roles override only
    /// the primary's model name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<ModelFallback>,
    /// How failed model calls are retried and failed over.
    #[serde(default, skip_serializing_if = "FailoverConfig::is_default")]
    pub failover: FailoverConfig,
}

/// One entry of the failover chain after the primary: its own endpoint, model and keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelFallback {
    /// Wire protocol.
    pub provider: ModelProvider,
    /// Model name called at this endpoint (priced in `model.prices` like the primary's).
    pub name: String,
    /// Base URL of the API.
    pub base_url: String,
    /// Environment variable of the agent container holding the API key (absent: no key sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Further keys for this endpoint, rotated with `apiKeyEnv`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_api_key_envs: Vec<String>,
}

/// Retries and failover of one model call: retryable failures (429, 529, 5xx, timeouts,
/// a stream cut) are retried with jittered backoff until `deadlineSeconds` after the
/// call began, then the next entry is tried; an entry refusing the request or its key
/// (400, 401, 403) is skipped for `coolDownSeconds`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FailoverConfig {
    /// How long one model call of a turn may retry and fail over before the person is told.
    #[serde(default = "default_failover_deadline_seconds")]
    pub deadline_seconds: u64,
    /// How long an entry that refused a request or its key is skipped.
    #[serde(default = "default_cool_down_seconds")]
    pub cool_down_seconds: u64,
}

/// Default of [`FailoverConfig::deadline_seconds`].
pub const DEFAULT_FAILOVER_DEADLINE_SECONDS: u64 = 120;

/// Default of [`FailoverConfig::cool_down_seconds`].
pub const DEFAULT_COOL_DOWN_SECONDS: u64 = 300;

fn default_failover_deadline_seconds() -> u64 {
    DEFAULT_FAILOVER_DEADLINE_SECONDS
}

fn default_cool_down_seconds() -> u64 {
    DEFAULT_COOL_DOWN_SECONDS
}

impl Default for FailoverConfig {
    fn default() -> Self {
        Self {
            deadline_seconds: DEFAULT_FAILOVER_DEADLINE_SECONDS,
            cool_down_seconds: DEFAULT_COOL_DOWN_SECONDS,
        }
    }
}

impl FailoverConfig {
    /// Whether every field has its default (then it is not written).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// The agent container's variable holding the primary model's (first) API key.
pub const MODEL_API_KEY_ENV: &str = "SAINT_MODEL_API_KEY";

/// The agent container's variable holding key `key` (0: the entry's `apiKeySecretRef`,
/// 1…: its `additionalApiKeySecretRefs`) of failover chain entry `entry` (0: the
/// primary, 1…: `fallbacks`). The operator sets them; the rendered config names them.
pub fn model_api_key_env(entry: usize, key: usize) -> String {
    match (entry, key) {
        (0, 0) => MODEL_API_KEY_ENV.to_string(),
        (0, key) => format!("{MODEL_API_KEY_ENV}_{key}"),
        (entry, 0) => format!("SAINT_MODEL_FALLBACK_{entry}_API_KEY"),
        (entry, key) => format!("SAINT_MODEL_FALLBACK_{entry}_API_KEY_{key}"),
    }
}

/// Context window assumed when none is configured, in tokens.
pub const DEFAULT_CONTEXT_WINDOW: u32 = 200_000;

/// Maximum output tokens per model call when none is configured.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 4_096;

fn default_context_window() -> u32 {
    DEFAULT_CONTEXT_WINDOW
}

fn default_max_output_tokens() -> u32 {
    DEFAULT_MAX_OUTPUT_TOKENS
}

/// USD per million tokens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelPrice {
    /// Input (prompt) tokens.
    pub input_per_mtok: f64,
    /// Output (completion) tokens.
    pub output_per_mtok: f64,
    /// A transcription model's price per minute of audio (`media.transcription.model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_audio_minute: Option<f64>,
    /// A speech model's price per million characters spoken (`media.speech.model`, or
    /// `espeak-ng` for the local engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_million_characters: Option<f64>,
}

/// Channel kinds. Each identity in `identityLinks` is prefixed by one of these.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum ChannelKind {
    /// The built-in authenticated HTTP API.
    Http,
    /// WhatsApp; peers are E.164 phone numbers.
    Whatsapp,
    /// Telegram; peers are numeric user ids.
    Telegram,
    /// Email; peers are lower-cased addresses.
    Email,
    /// Slack; peers are member ids (`U…`).
    Slack,
    /// Discord; peers are user ids or handles.
    Discord,
    /// Matrix; peers are user ids (`@ana:example.org`).
    Matrix,
}

impl ChannelKind {
    /// Every kind, in declaration order.
    pub const ALL: [ChannelKind; 7] = [
        ChannelKind::Http,
        ChannelKind::Whatsapp,
        ChannelKind::Telegram,
        ChannelKind::Email,
        ChannelKind::Slack,
        ChannelKind::Discord,
        ChannelKind::Matrix,
    ];

    /// The prefix used in identity strings (`whatsapp:+385…`).
    pub fn prefix(self) -> &'static str {
        match self {
            ChannelKind::Http => "http",
            ChannelKind::Whatsapp => "whatsapp",
            ChannelKind::Telegram => "telegram",
            ChannelKind::Email => "email",
            ChannelKind::Slack => "slack",
            ChannelKind::Discord => "discord",
            ChannelKind::Matrix => "matrix",
        }
    }
}

/// A channel name that is not one of [`ChannelKind::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown channel {0:?}")]
pub struct UnknownChannel(pub String);

impl FromStr for ChannelKind {
    type Err = UnknownChannel;

    /// Parses an identity prefix (`whatsapp`), ignoring case and surrounding spaces.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let wanted = text.trim();
        ChannelKind::ALL
            .into_iter()
            .find(|kind| kind.prefix().eq_ignore_ascii_case(wanted))
            .ok_or_else(|| UnknownChannel(text.to_string()))
    }
}

/// One chat channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChannelConfig {
    /// Unique name of the channel within the bot.
    pub name: String,
    /// Kind of channel.
    pub kind: ChannelKind,
    /// Non-secret settings (e.g. listen port, phone number id).
    #[serde(default)]
    pub settings: BTreeMap<String, String>,
    /// Secret settings: setting name → environment variable of the agent container.
    #[serde(default)]
    pub secret_env: BTreeMap<String, String>,
}

/// A role: what the bot may do for the people who have it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoleConfig {
    /// Human description.
    #[serde(default)]
    pub description: String,
    /// Tool allow/deny lists (names, `group:*`, globs). Deny always wins.
    #[serde(default)]
    pub tools: ToolPolicy,
    /// Model override for this role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Command globs refused by `exec`. Absent means the role has no exec at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_blocklist: Option<Vec<String>>,
    /// Memory scopes the role may search and read.
    #[serde(default)]
    pub memory_scope: Vec<MemoryScope>,
    /// Workspace path globs for file tools; `<self>` is the asker's slug.
    #[serde(default)]
    pub files: FileGlobs,
    /// Skills the role may use.
    #[serde(default)]
    pub skills: Skills,
    /// Spending cap; absent means unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// Bootstrap files included in the system prompt (subset of [`BOOTSTRAP_FILES`]),
    /// each read from the persona directory or the workspace as [`PersonaConfig`] says.
    #[serde(default)]
    pub bootstrap: Vec<String>,
    /// Extra files injected into the prompt (e.g. `COMPANY.md`): a plain name is read
    /// like a bootstrap file; a path (`memory/shared/x.md`) only from the workspace.
    #[serde(default)]
    pub inject: Vec<String>,
    /// Which sessions `sessions_list` / `sessions_history` may show.
    #[serde(default)]
    pub sessions_visibility: SessionsVisibility,
    /// Whether people with this role are treated as external (prompt warning, no internals).
    #[serde(default)]
    pub external: bool,
    /// Limits on the scheduled jobs a person with this role may keep.
    #[serde(default, skip_serializing_if = "CronLimits::is_default")]
    pub cron: CronLimits,
    /// Limits on the background sub-agents a person with this role may start.
    #[serde(default, skip_serializing_if = "SpawnLimits::is_default")]
    pub spawn: SpawnLimits,
    /// Limits on the background commands (`process` tool) a person with this role runs.
    #[serde(default, skip_serializing_if = "ProcessLimits::is_default")]
    pub process: ProcessLimits,
    /// How long the data of the people with this role is kept; absent: for good.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
    /// Tool calls of this role that wait for someone else's yes before they run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<ApprovalRule>,
}

/// A kind of tool call that needs approval, and who may give it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalRule {
    /// Tool names, `group:<name>` or globs (`message`, `exec`, `docs.*`). Empty only in
    /// a rule naming `porter` requests instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// Requests a command (`exec`, `process`) makes through Porter that wait for a yes:
    /// Porter refuses them while the command runs, the approver is asked, and on a yes
    /// the same command runs again with a one-time grant for exactly the requests held.
    /// A rule names either `tools` or `porter`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub porter: Option<PorterRequests>,
    /// Only calls whose arguments match: argument name → glob over its text
    /// (`{"command": "git push*"}`, `{"to": "marko"}`); a call lacking the argument does
    /// not match. Empty: every call of the tools.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub when: BTreeMap<String, String>,
    /// Who may say yes; never the person who asked.
    pub approvers: Approvers,
    /// Seconds a request waits for a decision; then it is refused.
    #[serde(default = "default_approval_timeout")]
    pub timeout_seconds: u64,
}

/// Requests through Porter, matched like the registry's request rules: a request
/// matches when its host is one of `hosts`, its method one of `methods` and its path one
/// of `paths`. Porter matches methods in any case and paths percent-decoded, without `;`
/// parameters or a trailing `/`, without regard to case. Only requests the role may
/// make at all (Porter's `requests` for the role) are held; others stay refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PorterRequests {
    /// Host names (`api.github.com`, `name:port`), or `*` for every host.
    pub hosts: Vec<String>,
    /// HTTP methods (`POST`, `PUT`), or `*` for any.
    pub methods: Vec<String>,
    /// Path globs as in Porter's request rules (`/repos/*/*/pulls/*/merge`): `*` within
    /// one segment, `**` any number of segments.
    pub paths: Vec<String>,
}

/// The people who may decide an approval: everyone of these roles and these contacts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Approvers {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contacts: Vec<ContactSlug>,
}

/// Longest an approval may wait: a week.
pub const MAX_APPROVAL_TIMEOUT_SECONDS: u64 = 7 * 24 * 3600;

/// How long an approval waits when its rule does not say: an hour.
pub const DEFAULT_APPROVAL_TIMEOUT_SECONDS: u64 = 3600;

fn default_approval_timeout() -> u64 {
    DEFAULT_APPROVAL_TIMEOUT_SECONDS
}

/// How many days each kind of a person's data is kept (the Role's `retention`). A kind
/// left out is kept for good. The agent's sweeper deletes what is older.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Retention {
    /// Transcript messages (their sessions, group messages they wrote, their jobs' and
    /// sub-agents' sessions), and their inbox and outbox rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcripts_days: Option<u32>,
    /// Files that came with their messages (`inbox/<channel>/<message>/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachments_days: Option<u32>,
    /// Their memory notes (`memory/users/<slug>/`), by last change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_days: Option<u32>,
    /// Their lines of `logs/usage.jsonl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_days: Option<u32>,
}

/// Limits on one person's scheduled jobs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CronLimits {
    /// Jobs one person may keep.
    #[serde(default = "default_max_jobs")]
    pub max_jobs: u32,
    /// Shortest time between two runs of a job, in seconds.
    #[serde(default = "default_min_interval")]
    pub min_interval_seconds: u64,
}

/// Jobs one person may keep when the role says nothing.
pub const DEFAULT_MAX_JOBS: u32 = 10;

/// Shortest interval between runs when the role says nothing, in seconds.
pub const DEFAULT_MIN_INTERVAL_SECONDS: u64 = 300;

fn default_max_jobs() -> u32 {
    DEFAULT_MAX_JOBS
}

fn default_min_interval() -> u64 {
    DEFAULT_MIN_INTERVAL_SECONDS
}

impl Default for CronLimits {
    fn default() -> Self {
        Self {
            max_jobs: DEFAULT_MAX_JOBS,
            min_interval_seconds: DEFAULT_MIN_INTERVAL_SECONDS,
        }
    }
}

impl CronLimits {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// Limits on one person's sub-agents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpawnLimits {
    /// How deep sub-agents may nest: 1 lets a person's turn spawn, but not its children.
    #[serde(default = "default_max_depth")]
    pub max_depth: u32,
    /// Sub-agents of one person running at once.
    #[serde(default = "default_max_concurrent")]
    pub max_concurrent: u32,
    /// Longest a sub-agent may run, in seconds; a spawn may ask for less, never more.
    #[serde(default = "default_spawn_timeout")]
    pub timeout_seconds: u64,
}

/// Nesting depth of sub-agents when the role says nothing.
pub const DEFAULT_SPAWN_DEPTH: u32 = 1;

/// Sub-agents of one person at once when the role says nothing.
pub const DEFAULT_SPAWN_CONCURRENCY: u32 = 2;

/// Longest sub-agent run when the role says nothing, in seconds.
pub const DEFAULT_SPAWN_TIMEOUT_SECONDS: u64 = 600;

fn default_max_depth() -> u32 {
    DEFAULT_SPAWN_DEPTH
}

fn default_max_concurrent() -> u32 {
    DEFAULT_SPAWN_CONCURRENCY
}

fn default_spawn_timeout() -> u64 {
    DEFAULT_SPAWN_TIMEOUT_SECONDS
}

impl Default for SpawnLimits {
    fn default() -> Self {
        Self {
            max_depth: DEFAULT_SPAWN_DEPTH,
            max_concurrent: DEFAULT_SPAWN_CONCURRENCY,
            timeout_seconds: DEFAULT_SPAWN_TIMEOUT_SECONDS,
        }
    }
}

impl SpawnLimits {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// Limits on one person's background commands (the `process` tool).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProcessLimits {
    /// Background commands of one person running at once in their sandbox: 1 to
    /// [`MAX_RUNNING_PROCESSES`] (deny `process` to forbid them).
    #[serde(default = "default_max_running")]
    pub max_running: u32,
}

/// Background commands of one person at once when the role says nothing.
pub const DEFAULT_MAX_RUNNING_PROCESSES: u32 = 4;

/// The most background commands a role may let one person run at once (a runner runs
/// at most 64, whoever owns them).
pub const MAX_RUNNING_PROCESSES: u32 = 32;

fn default_max_running() -> u32 {
    DEFAULT_MAX_RUNNING_PROCESSES
}

impl Default for ProcessLimits {
    fn default() -> Self {
        Self {
            max_running: DEFAULT_MAX_RUNNING_PROCESSES,
        }
    }
}

impl ProcessLimits {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// Tool allow and deny lists.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolPolicy {
    /// Tools the role may use: names, `group:<name>` or globs (`sessions_*`).
    #[serde(default)]
    pub allow: Vec<String>,
    /// Tools the role may never use; wins over `allow`.
    #[serde(default)]
    pub deny: Vec<String>,
}

/// Memory scopes.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum MemoryScope {
    /// `memory/shared/**`, `MEMORY.md`.
    Shared,
    /// `memory/private/**`, `COMPANY.md`, `TOOLS.md`.
    Private,
    /// `memory/daily/**`.
    Daily,
    /// `memory/users/<self>/**`.
    OwnUser,
    /// `memory/users/*/**`.
    AllUsers,
}

impl MemoryScope {
    /// Path globs (relative to the workspace, SQLite `GLOB` syntax) covered by this
    /// scope; `<self>` is replaced by the asker's slug by the caller.
    pub fn path_globs(self) -> &'static [&'static str] {
        match self {
            MemoryScope::Shared => &["memory/shared/*", "MEMORY.md"],
            MemoryScope::Private => &["memory/private/*", "COMPANY.md", "TOOLS.md"],
            MemoryScope::Daily => &["memory/daily/*"],
            MemoryScope::OwnUser => &["memory/users/<self>/*"],
            MemoryScope::AllUsers => &["memory/users/*"],
        }
    }
}

impl MemoryScope {
    /// The scope's name as a role writes it (`allUsers`).
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryScope::Shared => "shared",
            MemoryScope::Private => "private",
            MemoryScope::Daily => "daily",
            MemoryScope::OwnUser => "ownUser",
            MemoryScope::AllUsers => "allUsers",
        }
    }

    /// Files this scope reaches, one per kind of path it covers, for an asker with slug
    /// [`SAMPLE_SELF`]: what a role's read rules must allow too.
    fn sample_files(self) -> &'static [&'static str] {
        match self {
            MemoryScope::Shared => &["memory/shared/notes.md", "MEMORY.md"],
            MemoryScope::Private => &["memory/private/notes.md", "COMPANY.md", "TOOLS.md"],
            MemoryScope::Daily => &["memory/daily/2026-01-01.md"],
            MemoryScope::OwnUser => &["memory/users/sample-self/notes.md"],
            MemoryScope::AllUsers => &[
                "memory/users/sample-self/notes.md",
                "memory/users/someone-else/notes.md",
            ],
        }
    }
}

/// The asker's slug in [`RoleConfig::memory_beyond_read`]'s samples.
const SAMPLE_SELF: &str = "sample-self";

impl RoleConfig {
    /// The first memory scope that reaches a file this role's `files.read` does not
    /// allow, with that file: the memory tools and the file tools (and the sandbox's
    /// view) must follow one rule, so such a role is refused. Read globs follow the
    /// file tools' semantics (`globset`, `*` crossing `/`, `<self>` the asker).
    pub fn memory_beyond_read(&self) -> Option<(MemoryScope, &'static str)> {
        let mut builder = globset::GlobSetBuilder::new();
        for pattern in &self.files.read {
            if let Ok(glob) = globset::Glob::new(&pattern.replace("<self>", SAMPLE_SELF)) {
                builder.add(glob);
            }
        }
        let read = builder
            .build()
            .unwrap_or_else(|_| globset::GlobSet::empty());
        self.memory_scope.iter().find_map(|scope| {
            scope
                .sample_files()
                .iter()
                .find(|file| !read.is_match(file))
                .map(|file| (*scope, *file))
        })
    }
}

/// Read and write globs for the file tools.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileGlobs {
    /// Paths the role may read.
    #[serde(default)]
    pub read: Vec<String>,
    /// Paths the role may write (platform-protected files stay refused).
    #[serde(default)]
    pub write: Vec<String>,
    /// Paths the role may never write, on top of the platform-protected ones.
    #[serde(default)]
    pub deny_write: Vec<String>,
}

/// Skill exposure.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Skills {
    /// Every installed skill.
    All,
    /// Only these skills.
    Only(Vec<String>),
    /// No skills.
    #[default]
    None,
}

/// A spending cap per period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Budget {
    /// Maximum spend in USD per period (≥ 0).
    pub usd: f64,
    /// Period the cap applies to.
    pub period: BudgetPeriod,
}

/// Budget periods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum BudgetPeriod {
    /// Calendar day.
    Day,
    /// ISO week.
    Week,
    /// Calendar month.
    #[default]
    Month,
}

/// Which sessions a role may see, by name (the Role CRD's `sessionsVisibility`; the roles
/// of `ownAndRoles` are listed beside it there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SessionsVisibilityKind {
    /// Every session.
    All,
    /// Their own sessions plus those of people holding `sessionsVisibleRoles`.
    OwnAndRoles,
    /// Only their own sessions.
    Own,
    /// None at all.
    #[default]
    None,
}

impl SessionsVisibility {
    /// The visibility named `kind`; `roles` are used only by `ownAndRoles`.
    pub fn from_kind(kind: SessionsVisibilityKind, roles: &[String]) -> Self {
        match kind {
            SessionsVisibilityKind::All => SessionsVisibility::All,
            SessionsVisibilityKind::OwnAndRoles => SessionsVisibility::OwnAndRoles(roles.to_vec()),
            SessionsVisibilityKind::Own => SessionsVisibility::Own,
            SessionsVisibilityKind::None => SessionsVisibility::None,
        }
    }
}

/// Which sessions a role may see.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SessionsVisibility {
    /// Every session.
    All,
    /// Their own sessions plus those of people holding these roles.
    OwnAndRoles(Vec<String>),
    /// Only their own sessions.
    Own,
    /// None at all.
    #[default]
    None,
}

/// A known person.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContactConfig {
    /// Canonical slug (the Contact's name), used in paths (`memory/users/<slug>/`).
    pub slug: ContactSlug,
    /// Display name.
    pub name: String,
    /// Role name.
    pub role: String,
    /// Normalised identities (`whatsapp:+385…`), sorted.
    pub identities: Vec<ChannelIdentity>,
    /// Erase everything kept about this person (the Contact's `erase: true`): the agent
    /// does it when it loads a config saying so, as `saint-agent erase` would.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub erase: bool,
}

/// How session keys are derived.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionsConfig {
    /// Session scope for direct messages.
    #[serde(default)]
    pub dm_scope: DmScope,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        Self {
            dm_scope: DmScope::PerChannelPeer,
        }
    }
}

/// Session scope for direct messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DmScope {
    /// One session per person per channel; identity links merge a person's channels.
    #[default]
    PerChannelPeer,
    /// One session per person across channels.
    PerPeer,
}

/// File-access tiers shared by all roles.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileAccessConfig {
    /// Tier 1: globs no role may write.
    pub platform_protected: Vec<String>,
    /// Tier 2: globs only roles that list them in `files.write` may write (owner files).
    #[serde(default)]
    pub owner_files: Vec<String>,
    /// Tier 3: the per-person directory every internal role may write (`<self>` = slug).
    #[serde(default = "default_self_dir")]
    pub self_writable: String,
}

fn default_self_dir() -> String {
    "memory/users/<self>/**".to_string()
}

impl Default for FileAccessConfig {
    fn default() -> Self {
        Self {
            platform_protected: DEFAULT_PLATFORM_PROTECTED
                .iter()
                .map(|path| path.to_string())
                .collect(),
            owner_files: vec!["COMPANY.md".to_string(), "TOOLS.md".to_string()],
            self_writable: default_self_dir(),
        }
    }
}

/// Web tools settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebConfig {
    /// Extra URL/host globs `web_fetch` refuses, on top of the built-in SSRF guard.
    #[serde(default)]
    pub url_blocklist: Vec<String>,
    /// Web search provider; absent hides `web_search`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<WebSearchConfig>,
}

/// Brave Search settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebSearchConfig {
    /// Base URL of the Brave Search API.
    #[serde(default = "default_brave_url")]
    pub base_url: String,
    /// Environment variable of the agent container holding the API key.
    pub api_key_env: String,
}

/// Base URL of the Brave Search API.
pub const DEFAULT_BRAVE_SEARCH_URL: &str = "https://api.search.brave.com";

fn default_brave_url() -> String {
    DEFAULT_BRAVE_SEARCH_URL.to_string()
}

/// Where `exec` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SandboxBackend {
    /// Sandbox Jobs in the bot's namespace.
    Kubernetes,
    /// bubblewrap on the local machine.
    Local,
}

/// Sandbox lifetime scopes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SandboxScope {
    /// One sandbox per session.
    #[default]
    Session,
    /// One sandbox per bot.
    Agent,
    /// One sandbox shared by everything.
    Shared,
}

/// The sandbox as the operator decided it; the agent only fills names and labels.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SandboxConfig {
    /// Which backend runs sandboxes.
    pub backend: SandboxBackend,
    /// Sandbox lifetime scope.
    #[serde(default)]
    pub scope: SandboxScope,
    /// Seconds a sandbox may sit idle before it is reaped.
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout_seconds: u64,
    /// Default per-command timeout in seconds.
    #[serde(default = "default_exec_timeout")]
    pub exec_timeout_seconds: u64,
    /// Kubernetes only: the Job manifest the agent copies, fills `metadata.name` and
    /// scope labels into, and creates. Everything security-relevant is already set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_template: Option<serde_json::Value>,
}

/// Seconds a sandbox may sit idle before it is reaped, when none is configured.
pub const DEFAULT_SANDBOX_IDLE_TIMEOUT_SECONDS: u64 = 1_800;

/// Per-command `exec` timeout in seconds, when none is configured.
pub const DEFAULT_EXEC_TIMEOUT_SECONDS: u64 = 120;

fn default_idle_timeout() -> u64 {
    DEFAULT_SANDBOX_IDLE_TIMEOUT_SECONDS
}

fn default_exec_timeout() -> u64 {
    DEFAULT_EXEC_TIMEOUT_SECONDS
}

/// The Porter broker as the agent sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PorterConfig {
    /// Socket sandboxes connect to (inside the sandbox and the agent alike).
    pub socket_path: String,
    /// Control socket only the agent container reaches (token registration).
    pub control_socket_path: String,
    /// Names of the CLIs proxied through Porter (symlinks in the sandbox), sorted.
    #[serde(default)]
    pub clis: Vec<String>,
}

impl Default for PorterConfig {
    fn default() -> Self {
        Self {
            socket_path: sandbox_contract::PORTER_SOCKET_PATH.to_string(),
            control_socket_path: sandbox_contract::PORTER_CONTROL_SOCKET_PATH.to_string(),
            clis: Vec::new(),
        }
    }
}

/// Memory index settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryConfig {
    /// Whether the bot has memory at all. When true (the default) and the embedding
    /// model cannot be loaded, the agent refuses to start: memory never silently
    /// degrades. False is an explicit choice: no index, no memory tools.
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    pub enabled: bool,
    /// Embedding backend.
    #[serde(default)]
    pub embeddings: EmbeddingsConfig,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            embeddings: EmbeddingsConfig::default(),
        }
    }
}

fn default_true() -> bool {
    true
}

// Omitting the default keeps rendered configs byte-identical to those rendered before
// the field existed, so adding it restarted no pod.
fn is_true(value: &bool) -> bool {
    *value
}

/// Embedding backend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    tag = "kind",
    deny_unknown_fields
)]
pub enum EmbeddingsConfig {
    /// all-MiniLM-L6-v2 in process, from files in `modelDir`.
    Local {
        /// Directory holding `model.safetensors`, `config.json` and `tokenizer.json`.
        model_dir: String,
        /// How the dense layers compute: `f32` as published (the default; the mapped
        /// weights are shared by every process on the node), or `int16` (13-bit
        /// integer matmuls, faster to ingest on x86-64 CPUs with AVX2 and FMA, which
        /// it needs; its packed weights are private to the process).
        #[serde(default, skip_serializing_if = "ModelWeights::is_f32")]
        weights: ModelWeights,
    },
    /// An OpenAI-compatible `/v1/embeddings` endpoint.
    Openai {
        /// Base URL of the API.
        base_url: String,
        /// Model name.
        model: String,
        /// Environment variable holding the API key.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_key_env: Option<String>,
        /// Vector dimensions the model returns.
        dimensions: u32,
    },
}

impl Default for EmbeddingsConfig {
    fn default() -> Self {
        EmbeddingsConfig::Local {
            model_dir: "/opt/saint/models/all-MiniLM-L6-v2".to_string(),
            weights: ModelWeights::F32,
        }
    }
}

/// How the local embedding model's dense layers compute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModelWeights {
    /// As published: 32-bit floats.
    #[default]
    F32,
    /// Weights (per output) and activations (per row) rounded to 13-bit integers,
    /// multiplied in 16-bit pairs with exact integer sums.
    Int16,
}

impl ModelWeights {
    fn is_f32(&self) -> bool {
        *self == ModelWeights::F32
    }
}

impl BotConfig {
    /// Parses and validates a rendered config.
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let config: BotConfig = serde_json::from_str(text).map_err(ConfigError::Parse)?;
        validate(&config)?;
        Ok(config)
    }

    /// Serialises deterministically (pretty, trailing newline).
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("config is always serialisable");
        text.push('\n');
        text
    }

    /// The JSON Schema of the rendered config.
    pub fn json_schema() -> serde_json::Value {
        serde_json::to_value(schemars::schema_for!(BotConfig)).expect("schema is serialisable")
    }

    /// The models a turn of this bot calls: the default, the roles' own and the failover
    /// chain's, sorted.
    /// (A sub-agent may ask for another, but only for one `model.prices` prices.)
    pub fn models_in_use(&self) -> Vec<&str> {
        let mut models: Vec<&str> = std::iter::once(self.model.name.as_str())
            .chain(self.roles.values().filter_map(|role| role.model.as_deref()))
            .chain(self.model.fallbacks.iter().map(|entry| entry.name.as_str()))
            .collect();
        models.sort_unstable();
        models.dedup();
        models
    }

    /// The models in use that `model.prices` does not price.
    pub fn unpriced_models(&self) -> Vec<&str> {
        self.models_in_use()
            .into_iter()
            .filter(|model| !self.model.prices.contains_key(*model))
            .collect()
    }

    /// One line on the models budgets cannot count, or `None` when every model in use
    /// has a price: what happens to their calls and what to set. Shown by the agent's
    /// `/readyz` and the SaintBot status.
    pub fn unpriced_models_warning(&self) -> Option<String> {
        let unpriced = self.unpriced_models();
        if unpriced.is_empty() {
            return None;
        }
        let named = unpriced
            .iter()
            .map(|model| format!("{model:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        Some(match self.budget.unpriced_models {
            UnpricedModels::Refuse => format!(
                "model.prices has no price for {named}: calls to it are refused, as no \
                 budget could count them; add its price to model.prices (a free local model: \
                 inputPerMtok 0, outputPerMtok 0) or set budget.unpricedModels: allow"
            ),
            UnpricedModels::Allow => format!(
                "budget.unpricedModels is allow and model.prices has no price for {named}: \
                 its calls count as free, so no budget stops them; add its price to \
                 model.prices to count them"
            ),
        })
    }
}

#[cfg(test)]
mod memory_scope_tests {
    use super::*;

    fn role(scopes: &[MemoryScope], read: &[&str]) -> RoleConfig {
        serde_json::from_value(serde_json::json!({
            "memoryScope": scopes,
            "files": {"read": read},
        }))
        .unwrap()
    }

    #[test]
    fn a_memory_scope_must_not_reach_past_the_read_rules() {
        assert_eq!(
            role(&[MemoryScope::AllUsers], &["**"]).memory_beyond_read(),
            None
        );
        assert_eq!(
            role(&[MemoryScope::OwnUser], &["memory/users/<self>/**"]).memory_beyond_read(),
            None
        );
        assert_eq!(
            role(&[MemoryScope::AllUsers], &["memory/users/<self>/**"]).memory_beyond_read(),
            Some((MemoryScope::AllUsers, "memory/users/someone-else/notes.md"))
        );
        assert_eq!(
            role(&[MemoryScope::Shared], &["memory/shared/**"]).memory_beyond_read(),
            Some((MemoryScope::Shared, "MEMORY.md"))
        );
        assert_eq!(
            role(
                &[MemoryScope::Private],
                &["memory/private/**", "COMPANY.md"]
            )
            .memory_beyond_read(),
            Some((MemoryScope::Private, "TOOLS.md"))
        );
        assert_eq!(role(&[], &[]).memory_beyond_read(), None);
    }
}

#[cfg(test)]
mod budget_tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../tests/fixtures/acme-bot-config.json");

    #[test]
    fn unpriced_models_are_refused_unless_the_bot_allows_them_and_the_default_is_not_written() {
        let mut config = BotConfig::from_json(EXAMPLE).unwrap();
        assert_eq!(config.budget.unpriced_models, UnpricedModels::Refuse);
        // Left at its default, the section is not written: existing configs hash the same.
        assert!(!config.to_json().contains("unpricedModels"));
        assert_eq!(
            config.models_in_use(),
            vec!["claude-haiku-4-5", "claude-sonnet-4-5"]
        );
        assert_eq!(config.unpriced_models_warning(), None);

        config.roles.get_mut("owner").unwrap().model = Some("acme-local-llm".into());
        assert_eq!(config.unpriced_models(), vec!["acme-local-llm"]);
        let refused = config.unpriced_models_warning().unwrap();
        assert!(
            refused.starts_with(
                "model.prices has no price for \"acme-local-llm\": calls to it are refused"
            ) && refused.ends_with("or set budget.unpricedModels: allow"),
            "{refused}"
        );

        let mut value: serde_json::Value = serde_json::from_str(&config.to_json()).unwrap();
        value["budget"] = serde_json::json!({"unpricedModels": "allow"});
        let allowed = BotConfig::from_json(&value.to_string()).unwrap();
        assert_eq!(allowed.budget.unpriced_models, UnpricedModels::Allow);
        assert!(allowed.to_json().contains("\"unpricedModels\": \"allow\""));
        assert!(allowed.unpriced_models_warning().unwrap().starts_with(
            "budget.unpricedModels is allow and model.prices has no price for \"acme-local-llm\""
        ));

        value["budget"] = serde_json::json!({"unpricedModels": "sometimes"});
        assert!(BotConfig::from_json(&value.to_string()).is_err());
        value["budget"] = serde_json::json!({"unpriced": "allow"});
        assert!(BotConfig::from_json(&value.to_string()).is_err());
    }
}
