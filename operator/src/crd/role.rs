//! The `Role` resource (kind `Role` in `saint.work`; short names `srole`, `sroles`): what
//! a bot may do for the people who hold the role. Pure types, no client.

// `printcolumn(...)` repeats `type_ = …` by design; clippy reads it as a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use saint_config::{
    BudgetPeriod, MAX_APPROVAL_TIMEOUT_SECONDS, MAX_RUNNING_PROCESSES, MemoryScope,
    SessionsVisibilityKind,
};
use serde::{Deserialize, Serialize};

pub use super::proactive::{CronLimitsSpec, SpawnLimitsSpec};
use super::{
    bootstrap_files_rule, dns_label_list_rule,
    formats::{required_properties, workspace_paths_rule},
    tool_patterns_rule,
};

/// A role: the tools, model, files, memory and budget a bot grants the people holding it.
/// Referenced by name from `Contact.spec.role` and `SaintBot.spec.defaultRole`.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "saint.work",
    version = "v1alpha1",
    kind = "Role",
    plural = "roles",
    singular = "role",
    namespaced,
    shortname = "srole",
    shortname = "sroles",
    category = "saint",
    status = "RoleStatus",
    doc = "A Saint role: what a bot may do for the people who hold it (tools, model, files, memory, budget).",
    printcolumn(name = "Model", type_ = "string", json_path = ".spec.model", description = "Model override for this role"),
    printcolumn(name = "Budget", type_ = "number", json_path = ".spec.budget.usd", description = "USD cap per budget period"),
    printcolumn(name = "Period", type_ = "string", json_path = ".spec.budget.period", priority = 1),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = super::label_name_rule("Role", "Contacts and SaintBots name it"),
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(
    "self.sessionsVisibility == 'ownAndRoles' || !has(self.sessionsVisibleRoles) || size(self.sessionsVisibleRoles) == 0"
).message("sessionsVisibleRoles may only be set when sessionsVisibility is ownAndRoles"))]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.skills) || !('*' in self.skills) || size(self.skills) == 1"
).message("skills: '*' (all skills) must be the only entry"))]
pub struct RoleSpec {
    /// Human description of the role, shown to operators.
    #[serde(default)]
    #[schemars(length(max = 1024))]
    pub description: String,

    /// Tool allow and deny lists. Deny always wins.
    #[serde(default)]
    pub tools: RoleTools,

    /// Model name used for people with this role instead of the bot's default model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub model: Option<String>,

    /// Command globs the `exec` tool refuses (e.g. `rm -rf *`). Absent means the role has
    /// no `exec` at all; an empty list means exec with no blocklist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 512)))]
    pub exec_blocklist: Option<Vec<String>>,

    /// Memory scopes the role may search and read: shared, private, daily, ownUser, allUsers.
    #[serde(default)]
    #[schemars(length(max = 5))]
    pub memory_scope: Vec<MemoryScope>,

    /// Workspace path globs for the file tools; `<self>` is the asker's contact name.
    #[serde(default)]
    pub files: RoleFiles,

    /// Skills the role may use: names of skills a bot declares in its `spec.skills`
    /// (lower-case letters, digits and '-'), or `["*"]` for every installed skill. A
    /// bot selecting the Role leaves it out, saying so, while it names a skill that bot
    /// does not declare. Empty: none.
    #[serde(default)]
    #[schemars(length(max = 128), inner(length(min = 1, max = 64)))]
    #[x_kube(validation = kube::core::Rule::new(format!(
        "self.all(s, s == '*' || s.matches('{}'))",
        super::proactive::SKILL_NAME_PATTERN
    )).message("skills[] must be skill names (lower-case letters, digits and '-', at most 64, as in a SaintBot's spec.skills[].name) or '*'"))]
    pub skills: Vec<String>,

    /// Spending cap per period; absent means unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<RoleBudget>,

    /// Bootstrap files included in the system prompt (SOUL.md, IDENTITY.md, AGENTS.md,
    /// TOOLS.md, USER.md, HEARTBEAT.md).
    #[serde(default)]
    #[schemars(length(max = 6))]
    #[x_kube(validation = bootstrap_files_rule("bootstrap"))]
    pub bootstrap: Vec<String>,

    /// Extra workspace files injected into the prompt (e.g. `COMPANY.md`): paths
    /// relative to the workspace, never outside it.
    #[serde(default)]
    #[schemars(length(max = 32), inner(length(min = 1, max = 253)))]
    #[x_kube(validation = workspace_paths_rule("inject"))]
    pub inject: Vec<String>,

    /// Which sessions `sessions_list` / `sessions_history` may show.
    #[serde(default)]
    pub sessions_visibility: SessionsVisibilityKind,

    /// With `sessionsVisibility: ownAndRoles`: the roles whose sessions are visible too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 63)))]
    #[x_kube(validation = dns_label_list_rule("sessionsVisibleRoles"))]
    pub sessions_visible_roles: Vec<String>,

    /// Whether people with this role are external: the prompt warns the model and no
    /// internals are shown to them.
    #[serde(default)]
    pub external: bool,

    /// Limits on the scheduled jobs (`cron` tool) of each person holding the role.
    /// Absent: 10 jobs, runs at least 300 s apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<CronLimitsSpec>,

    /// Limits on the background sub-agents (`sessions_spawn`) of each person holding the
    /// role. Absent: depth 1, 2 at once, 600 s each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawn: Option<SpawnLimitsSpec>,

    /// Limits on the background commands (`process` tool) of each person holding the
    /// role. Absent: 4 running at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessLimitsSpec>,

    /// How many days the data of each person holding the role is kept; a kind left out
    /// is kept for good. The agent's sweeper deletes what is older.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<RoleRetention>,

    /// Tool calls of people holding the role that wait for someone else's yes before
    /// they run: the first rule whose `tools` (and `when`, if set) match a call applies.
    /// The call is stored, each approver who can be reached is asked in their own chat,
    /// and it runs once, as the requester, only after one of them answers
    /// `approve <code>`; a rejection or no answer within `timeoutSeconds` refuses it.
    /// Nobody approves their own request. A bot selecting the Role leaves it out, saying
    /// so, while an approver is not one of its Roles or Contacts, or the only approver
    /// is the Role's one member. Empty: nothing waits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_APPROVAL_RULES))]
    pub approvals: Vec<ApprovalRuleSpec>,
}

/// Limits on the background commands (`process` tool) of one person holding the role.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessLimitsSpec {
    /// Background commands of one person running at once in their sandbox: 1 to 32
    /// (deny `process` to forbid them); one more is refused, naming this limit.
    /// Absent: 4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_RUNNING_PROCESSES))]
    pub max_running: Option<u32>,
}

/// Most approval rules one Role holds (bounds CEL's cost and the agent's matching).
pub const MAX_APPROVAL_RULES: usize = 32;

/// Most argument matchers (`when`) one approval rule holds.
pub const MAX_APPROVAL_MATCHERS: usize = 16;

/// Most approver roles, and most approver contacts, one rule names.
pub const MAX_APPROVERS: usize = 32;

/// One kind of tool call (or of request through Porter) that needs approval, and who
/// may give it.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
// `approvers` is required by the schema but defaults in serde: a Role stored where the
// CRD had no validation must still deserialise, so that the operator refuses it with a
// status naming the field instead of the watch failing.
#[schemars(transform = required_properties(&["approvers"]))]
#[x_kube(validation = kube::core::Rule::new("has(self.tools) != has(self.porter)")
    .message("approvals[] entries name either tools or porter requests (exactly one of them)"))]
#[x_kube(validation = kube::core::Rule::new("!has(self.porter) || !has(self.when)")
    .message("approvals[].when applies to tools, not to porter requests"))]
pub struct ApprovalRuleSpec {
    /// The calls this rule covers: tool names, `group:<name>`, globs over tool names or
    /// an MCP server's tools (`docs.*`), as in `tools.allow`. At least one, unless the
    /// rule names `porter` requests instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 64), inner(length(min = 1, max = 64)))]
    #[x_kube(validation = tool_patterns_rule("approvals[].tools"))]
    pub tools: Vec<String>,
    /// Requests a command (`exec`, `process`) makes through Porter that wait for a yes,
    /// instead of `tools`. Porter refuses them while the command runs; the approvers are
    /// asked; on a yes the same command runs again, as the requester, with a one-time
    /// grant for exactly the requests held (method, host, path). Only requests the
    /// requester's role may make at all are held; others stay refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub porter: Option<PorterRequestsSpec>,
    /// Only calls whose arguments match: argument name → glob over its text
    /// (`command: "git push*"`, `to: marko`). A call lacking the argument does not
    /// match. Empty: every call of `tools`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = MAX_APPROVAL_MATCHERS,
        "additionalProperties" = {"type": "string", "minLength": 1, "maxLength": 512}
    ))]
    #[x_kube(validation = kube::core::Rule::new("self.all(k, size(k) >= 1 && size(k) <= 128)")
        .message("approvals[].when keys must be argument names of 1 to 128 characters"))]
    pub when: BTreeMap<String, String>,
    /// Who may say yes: everyone holding these Roles and these Contacts, never the
    /// person who asked. At least one entry.
    #[serde(default)]
    pub approvers: ApproversSpec,
    /// Seconds a request waits for a decision before it is refused (1 to 604800, a
    /// week). Absent: 3600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_APPROVAL_TIMEOUT_SECONDS))]
    pub timeout_seconds: Option<u64>,
}

/// Requests through Porter: host, method and path globs, matched as Porter's request
/// rules are (methods in any case; paths percent-decoded, without `;` parameters or a
/// trailing `/`, without regard to case).
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PorterRequestsSpec {
    /// Host names (`api.github.com`, `name:port`) a Porter CLI reaches, or `*` for any.
    #[schemars(length(min = 1, max = 16), inner(length(min = 1, max = 253)))]
    #[x_kube(validation = kube::core::Rule::new(
        "self.all(h, h == '*' || h.matches('^[A-Za-z0-9.-]+(:[0-9]{1,5})?$'))"
    ).message("approvals[].porter.hosts entries must be host names (name or name:port) or *"))]
    pub hosts: Vec<String>,
    /// HTTP methods (`POST`, `PUT`), or `*` for any.
    #[schemars(length(min = 1, max = 16), inner(length(min = 1, max = 32)))]
    #[x_kube(validation = kube::core::Rule::new("self.all(m, m == '*' || m.matches('^[A-Za-z]+$'))")
        .message("approvals[].porter.methods entries must be HTTP methods or *"))]
    pub methods: Vec<String>,
    /// Path globs (`/repos/*/*/pulls/*/merge`): `*` within one segment, `**` any number
    /// of segments.
    #[schemars(length(min = 1, max = 32), inner(length(min = 1, max = 512)))]
    #[x_kube(validation = kube::core::Rule::new("self.all(p, p.startsWith('/'))")
        .message("approvals[].porter.paths entries must start with /"))]
    pub paths: Vec<String>,
}

/// The people who may decide an approval request.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(
    "(has(self.roles) && size(self.roles) > 0) || (has(self.contacts) && size(self.contacts) > 0)"
).message("approvals[].approvers must name at least one role or contact: a request nobody may decide would wait until it expires"))]
pub struct ApproversSpec {
    /// Roles (Saint `Role`s the bot selects) whose holders may decide.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_APPROVERS), inner(length(min = 1, max = 63)))]
    #[x_kube(validation = dns_label_list_rule("approvals[].approvers.roles"))]
    pub roles: Vec<String>,
    /// Contacts (by name) who may decide.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_APPROVERS), inner(length(min = 1, max = 63)))]
    #[x_kube(validation = dns_label_list_rule("approvals[].approvers.contacts"))]
    pub contacts: Vec<String>,
}

/// Days each kind of a person's data is kept (each 1 to 36500 when set).
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleRetention {
    /// Transcripts (their sessions, group messages they wrote, their jobs' and
    /// sub-agents' sessions) and their channel inbox and outbox rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 36500))]
    pub transcripts_days: Option<u32>,
    /// Files that came with their messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 36500))]
    pub attachments_days: Option<u32>,
    /// Their memory notes (`memory/users/<name>/`), by last change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 36500))]
    pub memory_days: Option<u32>,
    /// Their usage-log lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 36500))]
    pub usage_days: Option<u32>,
}

/// Tool allow and deny lists.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleTools {
    /// Tools the role may use: tool names, `group:<name>` (fs, runtime, web, ui, memory,
    /// sessions, messaging, automation, media) or globs over tool names (`sessions_*`).
    #[serde(default)]
    #[schemars(length(max = 64), inner(length(min = 1, max = 64)))]
    #[x_kube(validation = tool_patterns_rule("tools.allow"))]
    pub allow: Vec<String>,
    /// Tools the role may never use; wins over `allow`. Same syntax as `allow`.
    #[serde(default)]
    #[schemars(length(max = 64), inner(length(min = 1, max = 64)))]
    #[x_kube(validation = tool_patterns_rule("tools.deny"))]
    pub deny: Vec<String>,
}

/// Read and write globs for the file tools, relative to the workspace (absolute paths,
/// `..` segments and backslashes are refused). Platform-protected files stay read-only
/// whatever a role says.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleFiles {
    /// Path globs the role may read (`memory/users/<self>/**`).
    #[serde(default)]
    #[schemars(length(max = 128), inner(length(min = 1, max = 512)))]
    #[x_kube(validation = workspace_paths_rule("files.read"))]
    pub read: Vec<String>,
    /// Path globs the role may write.
    #[serde(default)]
    #[schemars(length(max = 128), inner(length(min = 1, max = 512)))]
    #[x_kube(validation = workspace_paths_rule("files.write"))]
    pub write: Vec<String>,
    /// Path globs the role may never write, on top of the platform-protected files.
    #[serde(default)]
    #[schemars(length(max = 128), inner(length(min = 1, max = 512)))]
    #[x_kube(validation = workspace_paths_rule("files.denyWrite"))]
    pub deny_write: Vec<String>,
}

/// A spending cap per period.
#[derive(KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleBudget {
    /// Maximum spend in USD per period; must be ≥ 0.
    #[schemars(range(min = 0.0))]
    #[x_kube(validation = kube::core::Rule::new("self >= 0.0").message("budget.usd must be ≥ 0"))]
    pub usd: f64,
    /// Period the cap applies to (UTC calendar boundaries): day, week or month.
    #[serde(default)]
    pub period: BudgetPeriod,
}

/// What the operator found about this Role.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
// Until the operator's first status write, the API server shows `observedGeneration: 0`:
// kstatus (Flux, kpt) then reads the object as InProgress, not as a Current object
// without conditions. A status default is applied on every read, never stored.
#[schemars(extend("default" = {"observedGeneration": 0}))]
pub struct RoleStatus {
    /// `Ready` is True with reason `Valid` when bots can render the Role, False with
    /// reason `InvalidSpec` (e.g. a tool glob matching no known tool, named in the
    /// message, which also comes as a Warning Event) otherwise, with `Stalled` True
    /// beside it (kstatus: Failed). Written whether or not a SaintBot uses the Role.
    #[serde(default)]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
