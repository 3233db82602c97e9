//! The `SaintBot` resource (short name `sbot`): one assistant — persona, model, channels,
//! Porter CLIs, sandbox, storage and which Contacts and Roles apply. Pure types, no client.

// `printcolumn(...)` repeats `type_ = …` by design; clippy reads it as a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::ResourceRequirements,
    apimachinery::pkg::{
        api::resource::Quantity,
        apis::meta::v1::{Condition, LabelSelector},
    },
};
use kube::{CustomResource, KubeSchema};
use saint_config::{ChannelKind, ModelProvider, ModelWeights, SandboxScope, UnpricedModels};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::mcp::{McpServerSpec, McpSpec};
pub use super::proactive::{
    ActiveHoursSpec, ConfigMapKeyReference, HeartbeatSpec, ScheduleSpec, SkillSpec,
};
pub use super::wire_rules::{GraphqlRuleSpec, InjectSpec, RequestRuleSpec};
use super::{SecretKeyReference, dns_label_rule, dns_subdomain_rule, formats, secret_key_rule};

/// One Saint assistant. The operator renders its config, storage, pod, permissions and
/// network fences, and re-renders the config when its Contacts or Roles change.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "saint.work",
    version = "v1alpha1",
    kind = "SaintBot",
    plural = "saintbots",
    singular = "saintbot",
    namespaced,
    shortname = "sbot",
    category = "saint",
    status = "SaintBotStatus",
    doc = "A Saint assistant bot: persona, model, channels, Porter CLIs, sandbox and storage.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        description = "Why the bot is (not) ready: PodReady, SecretMissing, InvalidSpec, …"
    ),
    printcolumn(
        name = "Model",
        type_ = "string",
        json_path = ".spec.model.name",
        description = "Default model"
    ),
    printcolumn(
        name = "Contacts",
        type_ = "integer",
        json_path = ".status.contacts",
        description = "Contacts rendered into the config"
    ),
    printcolumn(
        name = "Roles",
        type_ = "integer",
        json_path = ".status.roles",
        priority = 1
    ),
    printcolumn(
        name = "Suspended",
        type_ = "boolean",
        json_path = ".spec.suspend",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    validation = bot_name_rule(),
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.channels) || self.channels.all(c, self.channels.exists_one(d, d.name == c.name))"
).message("channels[].name must be unique"))]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.porter) || !has(self.porter.clis) || self.porter.clis.all(c, self.porter.clis.exists_one(d, d.name == c.name))"
).message("porter.clis[].name must be unique"))]
#[x_kube(validation = super::channel_rules::webhook_ingress_needs_a_webhook_channel())]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.skills) || self.skills.all(s, self.skills.exists_one(t, t.name == s.name))"
).message("skills[].name must be unique"))]
pub struct SaintBotSpec {
    /// Persona and workspace files (SOUL.md, IDENTITY.md, AGENTS.md, TOOLS.md, USER.md,
    /// HEARTBEAT.md, COMPANY.md), inline or from a ConfigMap.
    #[serde(default)]
    pub persona: PersonaSpec,

    /// The LLM the bot talks to.
    pub model: ModelSpec,

    /// Chat channels the bot serves. Secret settings come from Secret key references and
    /// reach only the `agent` container.
    #[serde(default)]
    #[schemars(length(max = 16))]
    pub channels: Vec<ChannelSpec>,

    /// Credentials of the CLIs sandbox commands use. They reach only the `porter`
    /// container, whose proxy puts them on the wire; sandboxes get placeholders.
    #[serde(default)]
    pub porter: PorterSpec,

    /// Tool servers over the Model Context Protocol: `url` (Streamable HTTP, reached only
    /// through Porter's proxy) or `command` (stdio, run in the caller's sandbox for each
    /// call). A server's credential, like a CLI's, reaches only the `porter` container.
    /// Roles allow a server's tools as `<server>.<tool>` (`docs.*`). Absent: none.
    #[serde(default, skip_serializing_if = "McpSpec::is_empty")]
    pub mcp: McpSpec,

    /// Where `exec` runs: sandbox Jobs in the bot's namespace.
    #[serde(default)]
    pub sandbox: SandboxSpec,

    /// The workspace volume (files, memory index, sessions, logs).
    #[serde(default)]
    pub storage: StorageSpec,

    /// Role (a Saint `Role` in this namespace) for senders that match no Contact.
    #[serde(default = "default_role_name")]
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = dns_label_rule("defaultRole"))]
    pub default_role: String,

    /// Which Contacts in the namespace this bot knows (label selector). Absent: all of
    /// them. A Contact listing bots in `spec.bots` must also name this bot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = formats::label_selector("contactSelector"))]
    pub contact_selector: Option<LabelSelector>,

    /// Which Roles in the namespace this bot uses (label selector). Absent: all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = formats::label_selector("roleSelector"))]
    pub role_selector: Option<LabelSelector>,

    /// Scale the bot to zero replicas; its storage and config stay.
    #[serde(default)]
    pub suspend: bool,

    /// Image overrides for this bot; absent fields use the operator's defaults.
    #[serde(default)]
    pub images: ImagesSpec,

    /// Compute resources of the `agent` container. Absent: operator defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = formats::resource_requirements("agentResources"))]
    pub agent_resources: Option<ResourceRequirements>,

    /// Compute resources of the `porter` container. Absent: operator defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = formats::resource_requirements("porterResources"))]
    pub porter_resources: Option<ResourceRequirements>,

    /// Web tools settings.
    #[serde(default)]
    pub web: WebSpec,

    /// Memory: notes in the workspace, indexed and searched by meaning and keywords.
    #[serde(default)]
    pub memory: MemorySpec,

    /// An Ingress `<bot>-webhooks` for the platforms' webhooks: it routes only
    /// `/channels/<name>/webhook` of the channels that receive webhooks (whatsapp,
    /// telegram with `settings.mode: webhook`, slack with `settings.mode: events`) to the
    /// bot's HTTP port, nothing else of the agent's API; channels that connect out
    /// (telegram polling, slack socket mode, discord, matrix, email) need none. Needs such
    /// a channel; the Ingress is deleted when this field is removed. Absent: no Ingress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_ingress: Option<WebhookIngressSpec>,

    /// The heartbeat: every `everySeconds` (within `activeHours`) the bot reads
    /// `HEARTBEAT.md` and does what it says, with the Role `role`, telling only the
    /// Contacts in `notify`. An empty or comment-only HEARTBEAT.md costs no model call.
    /// Absent: no heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<HeartbeatSpec>,

    /// Scheduled jobs (the `cron` tool), bot-wide: the time zone of schedules that name
    /// none and how long after its time a missed run is still made up. Absent: UTC, 3600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleSpec>,

    /// Skills: `SKILL.md` files from ConfigMap keys, mounted read-only into the `agent`
    /// container as `/etc/saint-skills/<name>/SKILL.md`. Their front matter is listed in
    /// the prompt of roles whose `skills` allow them; the body is read on demand.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub skills: Vec<SkillSpec>,

    /// Bot-wide budget settings; the caps themselves are per Role (`budget`). Every
    /// model call reserves its worst case against the person's budget at the price in
    /// `model.prices`. Absent: a model without a price is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetSpec>,

    /// Where the bot's traces go: one span per turn, model call and tool call
    /// (OpenTelemetry GenAI conventions), naming the bot, the person's Contact and Role,
    /// models and tools, never message text or secrets. A change takes effect when the
    /// pod restarts, which the operator does for it. Absent: no traces are exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<TelemetrySpec>,

    /// Media services: voice notes and audio files people send, transcribed for the
    /// model (`transcription`), and the engine of the `tts` tool (`speech`). Absent:
    /// neither (the model is told a voice note could not be heard; no role is offered
    /// `tts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media: Option<super::media::MediaSpec>,
}

/// Where the bot's traces are exported.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TelemetrySpec {
    /// An OpenTelemetry collector's OTLP/HTTP receiver (protobuf, `POST
    /// <endpoint>/v1/traces`). Absent: no traces are exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp: Option<OtlpSpec>,
}

/// Most headers sent to the OTLP collector.
pub const MAX_OTLP_HEADERS: usize = 8;

/// Longest batch delay of the OTLP exporter, in milliseconds: spans wait at most a
/// minute in the pod.
pub const MAX_OTLP_BATCH_DELAY_MILLIS: u64 = 60_000;

/// An OTLP/HTTP collector and the headers the agent sends it.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(
    "!self.endpoint.startsWith('http://') || !has(self.headers) || size(self.headers) == 0 || has(self.allowInsecure)"
).message("telemetry.otlp.endpoint is plain http://: the headers' values (a collector's token) would cross the network in clear text; use https://, or set telemetry.otlp.allowInsecure to say why clear text is acceptable here"))]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.headers) || self.headers.all(a, self.headers.exists_one(b, b.name == a.name))"
).message("telemetry.otlp.headers[].name must be unique"))]
pub struct OtlpSpec {
    /// Base URL of the collector's OTLP/HTTP receiver, `http://` or `https://` with a
    /// host (`https://otel.example.com`, `http://10.0.12.7:4318`); the agent posts to
    /// `<endpoint>/v1/traces`. The bot pod's NetworkPolicy reaches public addresses; a
    /// private IP address here gets an egress rule for exactly that address and port
    /// (loopback, link-local and cloud metadata addresses are refused), and a host
    /// name is not resolved into one (an in-cluster collector by Service name needs a
    /// NetworkPolicy of your own allowing the bot pod's egress to it).
    #[schemars(length(min = 8, max = 2048))]
    #[x_kube(validation = kube::core::Rule::new(format!("[self].all(v, {})", super::channel_rules::HTTP_URL))
        .message("telemetry.otlp.endpoint must be an http:// or https:// URL with a host"))]
    pub endpoint: String,
    /// Request headers whose values come from Secret keys (`Authorization`,
    /// `X-Scope-OrgID`): each reaches only the `agent` container, as the environment
    /// variable `SAINT_OTLP_HEADER_<index>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_OTLP_HEADERS))]
    pub headers: Vec<OtlpHeaderSpec>,
    /// Milliseconds spans wait to be sent in one batch (1 to 60000). Absent: 5000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_OTLP_BATCH_DELAY_MILLIS))]
    pub batch_delay_millis: Option<u64>,
    /// Why clear text is acceptable for the collector (e.g. `collector on the node,
    /// token scoped to this bot`): only with it may an `http://` endpoint get headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub allow_insecure: Option<String>,
}

/// One header sent to the OTLP collector, its value from a Secret key.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OtlpHeaderSpec {
    /// The header's name, an HTTP token (`Authorization`, `X-Scope-OrgID`); names are
    /// compared without regard to case, so each may appear once.
    #[schemars(length(min = 1, max = 128))]
    #[x_kube(validation = kube::core::Rule::new(format!("self.matches('{HTTP_HEADER_NAME_PATTERN}')"))
        .message("telemetry.otlp.headers[].name must be an HTTP header name (letters, digits and !#$%&*+.^_|~-)"))]
    pub name: String,
    /// Secret key holding the header's value (`Bearer …` for `Authorization`); it
    /// reaches only the `agent` container.
    #[x_kube(validation = secret_key_rule("telemetry.otlp.headers[].secretKeyRef"))]
    pub secret_key_ref: SecretKeyReference,
}

/// An HTTP header name (an RFC 9110 token, without `'` and `` ` ``, which a CEL string
/// literal would have to escape).
pub const HTTP_HEADER_NAME_PATTERN: &str = "^[A-Za-z0-9!#$%&*+.^_|~-]+$";

/// How budgets treat models without a price, and what tools cost.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetSpec {
    /// What a call to a model `model.prices` does not price does: `refuse` (the
    /// default) fails it with a message naming `model.prices`; `allow` makes it, counted
    /// as free, so no budget stops it — the `ModelsPriced` condition then warns.
    #[serde(default)]
    pub unpriced_models: UnpricedModels,
    /// USD per call of tools that cost money, by tool name (`web_search: 0.005`):
    /// reserved against the person's budget before the call, charged when it succeeds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32, "additionalProperties" = {"type": "number", "minimum": 0}))]
    pub tool_prices: BTreeMap<String, f64>,
}

/// Longest SaintBot name. Every child is named `<bot>` or `<bot>-<suffix>` (see
/// `crate::labels`), the longest suffix being `-workspace`; at 53 characters every child
/// name is still a DNS-1123 label (≤ 63) and so may itself be a label value or a Service
/// name. The bot's own name is a label value (`app.kubernetes.io/instance`) and names its
/// Service, so it must be a DNS-1035 label: `1bot` and `bot.v2` are refused. (Sandbox Job
/// names are cut to fit by the agent.)
pub const MAX_BOT_NAME_LENGTH: usize = 53;

/// CEL at the top of the SaintBot CRD: the bot's name (see [`MAX_BOT_NAME_LENGTH`]).
pub(crate) fn bot_name_rule() -> kube::core::Rule {
    kube::core::Rule::new(format!(
        "size(self.metadata.name) <= {MAX_BOT_NAME_LENGTH} && self.metadata.name.matches('{}')",
        super::DNS_1035_LABEL_PATTERN
    ))
    .message(kube::core::Message::Message(format!(
        "metadata.name of a SaintBot must be at most {MAX_BOT_NAME_LENGTH} characters of \
         lower-case letters, digits and '-', starting with a letter (a DNS-1035 label): \
         its children are named <name>-workspace, <name>-webhooks, … and its Service <name>"
    )))
}

/// Role for senders that match no Contact, when `spec.defaultRole` is left out.
pub const DEFAULT_ROLE: &str = "external";

pub(crate) fn default_role_name() -> String {
    DEFAULT_ROLE.to_string()
}

/// Persona files: inline contents and/or a ConfigMap whose keys are file names.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PersonaSpec {
    /// File name → contents (e.g. `SOUL.md: "You are…"`). Wins over the ConfigMap.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Name of a ConfigMap in this namespace whose keys are persona file names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = formats::object_name_rule("persona.configMapName", "a ConfigMap"))]
    pub config_map_name: Option<String>,
}

/// The LLM the bot talks to.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.baseUrl) || !self.baseUrl.startsWith('http://') || has(self.allowInsecure)"
).message("model.baseUrl is plain http://: prompts, answers and the API key would cross the network in clear text; use https://, or set model.allowInsecure to say why clear text is acceptable here"))]
pub struct ModelSpec {
    /// Wire protocol: `anthropic` (Messages API) or `openai` (Chat Completions, also
    /// Ollama and vLLM).
    pub provider: ModelProvider,
    /// Default model name (roles may override it).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Base URL of the API: `https://` with a host (plain `http://` only with
    /// `allowInsecure`). Absent: the provider's public endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = kube::core::Rule::new(format!("[self].all(v, {})", super::channel_rules::HTTP_URL))
        .message("model.baseUrl must be an https:// URL with a host (http:// only with model.allowInsecure)"))]
    pub base_url: Option<String>,
    /// Why clear text is acceptable for the model API (e.g. `Ollama in the bot's own
    /// namespace, no key`): only with it may `baseUrl` be plain `http://`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub allow_insecure: Option<String>,
    /// Secret key holding the API key; it reaches only the `agent` container
    /// (as `SAINT_MODEL_API_KEY`). Absent: no key is sent (local servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = secret_key_rule("model.apiKeySecretRef"))]
    pub api_key_secret_ref: Option<SecretKeyReference>,
    /// Context window in tokens; compaction starts before it is reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1024))]
    pub context_window: Option<u32>,
    /// Maximum output tokens per model call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_output_tokens: Option<u32>,
    /// Price table by model name, in USD per million tokens (drives role budgets); the
    /// fallbacks' models are priced here too.
    #[serde(default)]
    pub prices: BTreeMap<String, ModelPriceSpec>,
    /// Further API keys for this endpoint (Secret keys reaching only the `agent`
    /// container): calls rotate over `apiKeySecretRef` and these, a rate-limited key
    /// resting until its `retry-after` passed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[x_kube(validation = kube::core::Rule::new("self.all(r, r.name != '' && r.key != '')")
        .message("model.additionalApiKeySecretRefs entries must name both a Secret (name) and a key in it (key)"))]
    pub additional_api_key_secret_refs: Vec<SecretKeyReference>,
    /// Endpoints tried in order after this one fails (rate limits, overload, errors,
    /// timeouts past `failover.deadlineSeconds`, a refused key). Roles override only the
    /// primary's model name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4))]
    pub fallbacks: Vec<ModelFallbackSpec>,
    /// How failed model calls are retried and failed over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverSpec>,
}

/// One fallback endpoint of the model chain, with its own model and API key.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("has(self.apiKeySecretRef)")
    .message("model.fallbacks[].apiKeySecretRef is required: a fallback is another provider's endpoint and needs its own API key Secret"))]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.baseUrl) || !self.baseUrl.startsWith('http://') || has(self.allowInsecure)"
).message("model.fallbacks[].baseUrl is plain http://: prompts, answers and the API key would cross the network in clear text; use https://, or set allowInsecure to say why clear text is acceptable here"))]
pub struct ModelFallbackSpec {
    /// Wire protocol: `anthropic` or `openai`.
    pub provider: ModelProvider,
    /// Model called at this endpoint (price it in `model.prices`).
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Base URL of the API (`https://`; plain `http://` only with `allowInsecure`).
    /// Absent: the provider's public endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = kube::core::Rule::new(format!("[self].all(v, {})", super::channel_rules::HTTP_URL))
        .message("model.fallbacks[].baseUrl must be an https:// URL with a host (http:// only with allowInsecure)"))]
    pub base_url: Option<String>,
    /// Why clear text is acceptable for this endpoint: only with it may `baseUrl` be
    /// plain `http://`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub allow_insecure: Option<String>,
    /// Secret key holding this endpoint's API key (required); it reaches only the
    /// `agent` container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = secret_key_rule("model.fallbacks[].apiKeySecretRef"))]
    pub api_key_secret_ref: Option<SecretKeyReference>,
    /// Further keys for this endpoint, rotated with `apiKeySecretRef`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[x_kube(validation = kube::core::Rule::new("self.all(r, r.name != '' && r.key != '')")
        .message("model.fallbacks[].additionalApiKeySecretRefs entries must name both a Secret (name) and a key in it (key)"))]
    pub additional_api_key_secret_refs: Vec<SecretKeyReference>,
}

/// Retries and failover of one model call.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailoverSpec {
    /// How long one model call may retry and fail over before the person is told
    /// (default 120).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub deadline_seconds: Option<u64>,
    /// How long an entry that refused a request or its key (400, 401, 403) is skipped
    /// (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 86400))]
    pub cool_down_seconds: Option<u64>,
}

/// USD per million tokens (per minute of audio for a transcription model, per million
/// characters for a speech model).
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelPriceSpec {
    /// Input (prompt) tokens, USD per million; ≥ 0.
    #[schemars(range(min = 0.0))]
    #[x_kube(validation = kube::core::Rule::new("self >= 0.0").message("model.prices[].inputPerMtok must be ≥ 0"))]
    pub input_per_mtok: f64,
    /// Output (completion) tokens, USD per million; ≥ 0.
    #[schemars(range(min = 0.0))]
    #[x_kube(validation = kube::core::Rule::new("self >= 0.0").message("model.prices[].outputPerMtok must be ≥ 0"))]
    pub output_per_mtok: f64,
    /// A transcription model's price per minute of audio (`media.transcription.model`),
    /// USD; ≥ 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    #[x_kube(validation = kube::core::Rule::new("self >= 0.0").message("model.prices[].perAudioMinute must be ≥ 0"))]
    pub per_audio_minute: Option<f64>,
    /// A speech model's price per million characters spoken (`media.speech.model`;
    /// `espeak-ng` prices the local engine), USD; ≥ 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    #[x_kube(validation = kube::core::Rule::new("self >= 0.0").message("model.prices[].perMillionCharacters must be ≥ 0"))]
    pub per_million_characters: Option<f64>,
}

/// One chat channel.
#[derive(KubeSchema, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
// The per-kind key rules are generated from `saint_config::channel_settings`, one rule
// per kind and check, which `x_kube(validation = …)` (one attribute per rule) cannot do.
#[schemars(transform = super::channel_rules::add_channel_rules)]
pub struct ChannelSpec {
    /// Unique name of the channel within the bot (DNS-1123 label).
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = dns_label_rule("channels[].name"))]
    pub name: String,
    /// Kind of channel: http, whatsapp, telegram, email, slack, discord or matrix.
    pub kind: ChannelKind,
    /// Non-secret settings. whatsapp: phoneNumberId (required, digits), apiBaseUrl.
    /// email: address, imapHost, smtpHost (required; a host name or IP address, the port
    /// is imapPort/smtpPort), imapPort, imapSecurity (tls|starttls|none), smtpPort,
    /// smtpSecurity, username, mailbox, authservId, pollSeconds, dnsServer (IP[:port]),
    /// replyLimitPerHour. http: port, chatPage ("true": serve the chat page at /chat).
    /// telegram: mode (polling, the default, or webhook),
    /// apiBaseUrl. slack: mode (socket, the default, or events), apiBaseUrl. discord:
    /// apiBaseUrl. matrix: homeserverUrl, userId (required, @localpart:server).
    /// telegram, slack, discord and matrix: groupPolicy (open|contacts|disabled; not
    /// contacts in a webhook mode), requireMention (true|false). Base URLs are https://
    /// with a host; plain http:// and security none need `allowInsecure`. Unknown keys
    /// are refused.
    #[serde(default)]
    #[schemars(extend(
        "maxProperties" = 32,
        "additionalProperties" = {"type": "string", "maxLength": 2048}
    ))]
    pub settings: BTreeMap<String, String>,
    /// Secret settings: setting name → Secret key. Each becomes the env var
    /// `SAINT_CHANNEL_<NAME>_<SETTING>` of the `agent` container only. whatsapp:
    /// accessToken, appSecret, verifyToken; email: password; http: token; telegram:
    /// botToken, webhookSecret (in mode webhook only); slack: botToken, appToken (in mode
    /// socket only), signingSecret (in mode events only); discord: botToken; matrix:
    /// accessToken. Each is required where it applies and refused where it does not.
    #[serde(default)]
    #[schemars(extend("maxProperties" = 32))]
    #[x_kube(validation = kube::core::Rule::new("self.all(k, self[k].name != '' && self[k].key != '')")
        .message("channels[].secrets values must name both a Secret (name) and a key in it (key)"))]
    pub secrets: BTreeMap<String, SecretKeyReference>,
    /// Why clear text is acceptable for this channel (e.g. `a stand-in on loopback in
    /// tests`): only with it may a base URL (`apiBaseUrl`, `homeserverUrl`) be plain
    /// `http://` or an email channel's `imapSecurity`/`smtpSecurity` be `none` — each
    /// sends the channel's token or password in clear text. Not read by the bot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub allow_insecure: Option<String>,
}

/// Porter, the credential broker: the credentials of the CLIs the sandbox may use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PorterSpec {
    /// One entry per credential, by the name of the CLI that uses it. A host belongs to
    /// one entry only.
    #[serde(default)]
    #[schemars(length(max = 64))]
    pub clis: Vec<PorterCliSpec>,
}

/// One credential Porter holds, the hosts it may reach and the requests each role may
/// make with it. The CLI itself runs in the sandbox (the sandbox image must carry it)
/// with a placeholder; only Porter's HTTPS proxy, which every sandbox command's traffic
/// to `hosts` goes through, swaps the placeholder for the real secret on the wire, and
/// only after the caller's role's `requests` admit the request. The secret stays in
/// the `porter` container. (This shape replaced the one where Porter ran the CLI:
/// `bin`, `env`, `secretEnv`, `envFromSecrets`, `passthroughEnv`, `timeoutSeconds`,
/// `rateLimit`, `args`, `roleArgs`, `profile` and a boolean `inject` are gone, and the
/// API server drops them unread.)
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
// `hosts` and `secretKeyRef` are required by the schema but default in serde: a bot
// stored before this shape (pruned of its old fields) must still deserialise, so that
// `validate` refuses it with a status naming the field instead of the watch failing.
#[schemars(transform = formats::required_properties(&["hosts", "secretKeyRef"]))]
#[x_kube(validation = kube::core::Rule::new("has(self.hosts) && size(self.hosts) > 0")
    .message("porter.clis[] needs hosts: the only hosts (name or name:port) its credential may reach; Porter no longer runs the CLI (bin, secretEnv, args and profile are gone), it puts the secret on the wire for these hosts"))]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.git) || !self.git || !has(self.inject) || size(self.inject) == 0 || self.inject.exists(i, has(i.authorization))"
).message("porter.clis[].git: git over HTTPS sends the credential in Authorization: add {authorization: true} to inject (or leave inject out)"))]
pub struct PorterCliSpec {
    /// The CLI's name (`gh`, `gog`): a plain command name, shown in the audit log and to
    /// the agent. The sandbox image must carry the CLI itself.
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(validation = kube::core::Rule::new("self.matches('^[A-Za-z0-9_][A-Za-z0-9._+-]*$')")
        .message("porter.clis[].name must be a plain command name (letters, digits, '.', '_', '+', '-')"))]
    pub name: String,
    /// The only hosts (`name` or `name:port`, port 443 by default) a sandbox command may
    /// reach with this credential, e.g. `api.github.com`, `github.com`,
    /// `uploads.github.com`; Porter's proxy refuses every other host for it. Required.
    #[serde(default)]
    #[schemars(length(min = 1, max = 32), inner(length(min = 1, max = 259)))]
    #[x_kube(validation = formats::hosts_rule("porter.clis[].hosts[]"))]
    pub hosts: Vec<String>,
    /// Secret key holding the credential (with `oauth2`: the refresh token). Mounted as a
    /// file into the `porter` container only; no sandbox and not the agent ever sees it.
    /// Required.
    #[serde(default)]
    #[x_kube(validation = secret_key_rule("porter.clis[].secretKeyRef"))]
    pub secret_key_ref: SecretKeyReference,
    /// Where in a request the placeholder is swapped for the secret: `{authorization:
    /// true}` (the `Authorization` header: `Bearer`, GitHub's `token`, and `Basic` whose
    /// user or password is the placeholder), `{header: NAME}` (a header such as
    /// `X-Api-Key`) or `{query: NAME}` (a query parameter such as `key`). Placeholders
    /// elsewhere are never swapped. Empty: the `Authorization` header.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub inject: Vec<InjectSpec>,
    /// OAuth 2.0 held by Porter: the CLI's requests to `tokenUrl` are answered by Porter
    /// with a short-lived placeholder access token, and Porter itself refreshes the real
    /// access token with the refresh token in `secretKeyRef`. Absent: `secretKeyRef` is
    /// the credential sent as is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth2: Option<OAuth2Spec>,
    /// Environment variables every sandbox command gets holding this entry's placeholder
    /// (`GH_TOKEN`; with `oauth2`, the placeholder refresh token). Names are environment
    /// variable names and none that loads code or picks a program (`PATH`, `HOME`,
    /// `LD_*`, `BASH_ENV`, `NODE_OPTIONS`, …: the refusal lists them all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 253)))]
    #[x_kube(validation = formats::env_name_list_rule("porter.clis[].placeholderEnv"))]
    pub placeholder_env: Vec<String>,
    /// git over HTTPS to `hosts`: git's credential helper in the sandbox answers the
    /// placeholder (user `x-access-token`), which Porter swaps in `Authorization`, so
    /// `inject` must include `authorization` (or be left out). Default false.
    #[serde(default)]
    pub git: bool,
    /// The requests each role may make with this credential, by role name (`*` for every
    /// role): a request is admitted when one of its rules matches its method and path
    /// (and, for a GraphQL rule, every operation in its body). Enforced on the wire,
    /// whatever command sent it. Empty: any request to `hosts`; otherwise a role with no
    /// rules (and no `*` rules) may make none.
    #[serde(default)]
    #[schemars(length(max = 64))]
    pub requests: BTreeMap<String, Vec<RequestRuleSpec>>,
}

/// OAuth 2.0 refresh held by Porter.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OAuth2Spec {
    /// The token endpoint (`https://oauth2.googleapis.com/token`); its host must be one
    /// of the entry's `hosts`.
    #[schemars(length(min = 9, max = 2048))]
    #[x_kube(validation = kube::core::Rule::new("self.startsWith('https://')")
        .message("porter.clis[].oauth2.tokenUrl must be an https:// URL"))]
    pub token_url: String,
    /// The OAuth client id (not a secret).
    #[schemars(length(min = 1, max = 1024))]
    pub client_id: String,
    /// Secret key holding the OAuth client secret, for clients that have one; mounted
    /// into the `porter` container only, like `secretKeyRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = secret_key_rule("porter.clis[].oauth2.clientSecretKeyRef"))]
    pub client_secret_key_ref: Option<SecretKeyReference>,
    /// Seconds a placeholder access token stays valid (at most the real token's own
    /// lifetime). Default 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub placeholder_ttl_seconds: Option<u64>,
}

/// The sandbox Jobs that run `exec`.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxSpec {
    /// Lifetime scope: `session` (one per session), `agent` (one per bot) or `shared`.
    #[serde(default)]
    pub scope: SandboxScope,
    /// Compute resources of the sandbox container. Absent: operator defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = formats::resource_requirements("sandbox.resources"))]
    pub resources: Option<ResourceRequirements>,
    /// RuntimeClass for sandbox pods (e.g. `gvisor`). Absent: the cluster default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = formats::object_name_rule("sandbox.runtimeClassName", "a RuntimeClass"))]
    pub runtime_class_name: Option<String>,
    /// Seconds a sandbox may sit idle before it is reaped. Default 1800.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 604800))]
    pub idle_timeout_seconds: Option<u64>,
    /// Default per-command timeout in seconds. Default 120.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub exec_timeout_seconds: Option<u64>,
    /// Hard lifetime of one sandbox Job in seconds (`activeDeadlineSeconds`). Default 86400.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 2592000))]
    pub max_lifetime_seconds: Option<i64>,
}

/// The workspace PersistentVolumeClaim.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// Requested size (e.g. `5Gi`), greater than zero. Default 5Gi. Only grows if the
    /// StorageClass allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = formats::MAX_QUANTITY_LENGTH))]
    #[x_kube(validation = formats::positive_quantity_rule("storage.size"))]
    pub size: Option<Quantity>,
    /// StorageClass of the claim. Absent: the cluster default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = formats::object_name_rule("storage.storageClassName", "a StorageClass"))]
    pub storage_class_name: Option<String>,
}

/// Per-bot image overrides: image references (`[registry/]name[:tag][@digest]`).
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImagesSpec {
    /// Image of the `agent` container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    #[x_kube(validation = formats::image_reference_rule("images.agent"))]
    pub agent: Option<String>,
    /// Image of the `porter` container: Porter's proxy only, no CLI (the CLIs of
    /// `porter.clis` run in the sandbox image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    #[x_kube(validation = formats::image_reference_rule("images.porter"))]
    pub porter: Option<String>,
    /// Image of sandbox pods; it must carry the CLIs of `porter.clis`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    #[x_kube(validation = formats::image_reference_rule("images.sandbox"))]
    pub sandbox: Option<String>,
}

/// The bot's memory.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.weights) || !has(self.embedder) || self.embedder == 'local'"
).message("memory.weights applies to the local model only; with memory.embedder: shared the shared embedder's own setting decides"))]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.enabled) || self.enabled || (!has(self.weights) && !has(self.embedder))"
).message("memory.enabled is false: memory.embedder and memory.weights would have no effect; remove them"))]
pub struct MemorySpec {
    /// False: no index and no memory tools (the model is never loaded). Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Where texts are embedded: `local` (the model in the agent image; the default)
    /// or `shared` (the chart's saint-embedder service, one copy of the model for every
    /// bot that uses it; if it is unreachable, searches answer from keywords alone and
    /// say so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedder: Option<EmbedderChoice>,
    /// How the local model computes: `f32` (as published; memory-mapped and shared
    /// between bots on a node) or `int16` (13-bit integer matmuls, faster to ingest,
    /// with ~21 MB of packed weights private to the bot; needs x86-64 nodes with AVX2
    /// and FMA, or the agent refuses to start saying so). Default f32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<ModelWeights>,
}

/// Where a bot's memory texts are embedded.
#[derive(JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbedderChoice {
    /// The model in the agent image.
    #[default]
    Local,
    /// The chart's shared embedder Service.
    Shared,
}

/// Web tools settings.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebSpec {
    /// URL/host globs `web_fetch` refuses, on top of the built-in SSRF guard.
    #[serde(default)]
    #[schemars(length(max = 256), inner(length(min = 1, max = 512)))]
    pub url_blocklist: Vec<String>,
    /// Brave Search API key; it reaches only the `agent` container. Absent: no `web_search`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = secret_key_rule("web.searchApiKeySecretRef"))]
    pub search_api_key_secret_ref: Option<SecretKeyReference>,
}

/// The webhook Ingress.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookIngressSpec {
    /// IngressClass to use (`spec.ingressClassName`, e.g. `traefik`, `nginx`). Absent:
    /// the cluster's default class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = dns_subdomain_rule("webhookIngress.className"))]
    pub class_name: Option<String>,
    /// Public host name the platform calls (e.g. `saint.company.hr`): a DNS name, no
    /// scheme, port or path. The platform (Meta, Telegram, Slack) calls
    /// `https://<host>/channels/<name>/webhook`. One bot routes each host and path:
    /// the SaintBot created first (then by namespace/name); a later one asking for the
    /// same gets no Ingress (the rest of it runs) and `Ready=False/HostClaimed` until
    /// that bot gives it up.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = dns_subdomain_rule("webhookIngress.host"))]
    pub host: String,
    /// Secret (type `kubernetes.io/tls`, in the bot's namespace) with the certificate
    /// for `host`; while it does not exist `Ready` is False with `SecretMissing`.
    /// Absent: no `tls` section (the controller's default certificate, or cert-manager
    /// through `annotations`). Meta and Slack call only HTTPS with a valid certificate;
    /// Telegram only HTTPS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = dns_subdomain_rule("webhookIngress.tlsSecretName"))]
    pub tls_secret_name: Option<String>,
    /// Namespace of the ingress controller's pods; the bot's NetworkPolicy admits pods
    /// of this namespace to the agent's HTTP port only. Default `kube-system` (k3s's
    /// Traefik); `ingress-nginx` for ingress-nginx.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = dns_label_rule("webhookIngress.controllerNamespace"))]
    pub controller_namespace: Option<String>,
    /// Annotations put on the Ingress (e.g. `cert-manager.io/cluster-issuer`): only
    /// those the operator allows (the chart value `webhookIngress.allowedAnnotations`);
    /// any other is refused with `InvalidSpec` naming it, never dropped silently.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    pub annotations: BTreeMap<String, String>,
}

/// Namespace of the ingress controller when `webhookIngress.controllerNamespace` is left
/// out: k3s ships Traefik there.
pub const DEFAULT_INGRESS_CONTROLLER_NAMESPACE: &str = "kube-system";

/// What the operator last did with this bot.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
// Until the operator's first status write, the API server shows `observedGeneration: 0`:
// kstatus (Flux, kpt) then reads the object as InProgress, not as a Current object
// without conditions. A status default is applied on every read, never stored.
#[schemars(extend("default" = {"observedGeneration": 0}))]
pub struct SaintBotStatus {
    /// `Ready` (True with `PodReady` when the config is rendered and the pod is ready;
    /// False with `PodNotReady` or `Suspended` while nothing needs fixing, with
    /// `InvalidSpec` or `RoleNotFound` when the spec cannot be rendered, with
    /// `ConfigMapNotFound` while a skill's ConfigMap or key is missing — retried),
    /// `ConfigRendered` (True with `ConfigRendered`, else the same reason as `Ready`),
    /// `IdentitiesLinked` (True with `AllLinked`; False with `IdentifierConflict` or
    /// `RoleNotFound` naming what was left out), `CredentialsIsolated` (always True
    /// with `Injected`: credentials stay in the `porter` container, sandboxes get
    /// placeholders), `ChannelsServed` (True with `AllChannelsServed`; False with
    /// `ChannelNotServed`, naming declared channels whose kind this version does not
    /// serve — none today: every kind has an agent reader), `ModelsPriced` (True with
    /// `AllModelsPriced`; False with `UnpricedModelsRefused` or, under
    /// `budget.unpricedModels: allow`, `UnpricedModelsAllowed`, naming the models
    /// `model.prices` lacks). `Ready` is also False with `SecretMissing` (a Secret or a
    /// key of it the pod needs, or the webhook Ingress's TLS Secret), `HostClaimed`
    /// (another SaintBot, created earlier, routes the `webhookIngress` host and a path;
    /// this bot runs without its Ingress until that one gives it up), `ApplyFailed` (the API
    /// server refused a child),
    /// `ReplicaFailure` or `ProgressDeadlineExceeded` (the Deployment's own words), or a
    /// container's waiting reason (`CreateContainerConfigError`, `ImagePullBackOff`,
    /// `ErrImagePull`, `CrashLoopBackOff`). kstatus' conditions go beside it, with
    /// `Ready`'s reason and message: `Stalled` True when a person has to act (GitOps
    /// tools report Failed), `Reconciling` True while waiting for the pod (InProgress);
    /// neither when ready or suspended. A change of `Ready` or `IdentitiesLinked` also
    /// comes as an Event, a Warning when a person has to act; a newly unserved channel
    /// comes as a Warning Event.
    #[serde(default)]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Contacts rendered into the config.
    #[serde(default)]
    pub contacts: i32,
    /// Roles rendered into the config.
    #[serde(default)]
    pub roles: i32,
    /// Identifier conflicts and Contacts naming missing Roles, left out of the config.
    #[serde(default)]
    pub conflicts: i32,
    /// SHA-256 of the rendered `bot-config.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
}
