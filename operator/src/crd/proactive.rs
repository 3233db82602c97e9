//! What a bot does on its own: the heartbeat, the scheduling settings and the skills of
//! a SaintBot, and the limits a Role puts on the scheduled jobs and sub-agents of the
//! people holding it. Pure types; the bounds mirror `saint_config::validate_proactive`
//! (the agent's check) so the API server refuses what the agent would.
//!
//! Time zones cannot be checked by CEL (it knows no tz database): the controller checks
//! them and names the field.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::{dns_label_list_rule, dns_label_rule};

/// `HH:MM`, 24-hour, 00:00 to 23:59 (as `saint_config::clock_minutes` reads it).
pub const CLOCK_PATTERN: &str = "^([01][0-9]|2[0-3]):[0-5][0-9]$";

/// A skill's name: its folder under the skills mount, so lower-case letters, digits and
/// '-', starting with a letter or digit, at most 64 characters.
pub const SKILL_NAME_PATTERN: &str = "^[a-z0-9][a-z0-9-]{0,63}$";

/// ConfigMap key a skill's SKILL.md is read from when `configMapRef.key` is left out.
pub const DEFAULT_SKILL_KEY: &str = "SKILL.md";

/// The heartbeat: a periodic turn that reads `HEARTBEAT.md` and does what it says.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatSpec {
    /// Seconds between heartbeats: at least 60, at most 86400 (a day).
    #[schemars(range(min = 60, max = 86400))]
    pub every_seconds: u64,
    /// Only within these hours of the day. Absent: at any hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_hours: Option<ActiveHoursSpec>,
    /// The Role (a Saint `Role` this bot selects, like `defaultRole`) the heartbeat turn
    /// runs with: what it may do. Give it a narrow one.
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = dns_label_rule("heartbeat.role"))]
    pub role: String,
    /// Contacts (by name; Contacts this bot uses) the heartbeat may tell what it found:
    /// its answer goes to them and its `message` tool reaches no one else. Empty: it
    /// tells nobody.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 63)))]
    #[x_kube(validation = dns_label_list_rule("heartbeat.notify"))]
    pub notify: Vec<String>,
    /// What the heartbeat watches: when set, a beat calls the model only if
    /// `HEARTBEAT.md`, these settings or one of these inputs changed since the last beat
    /// that ran, so an idle bot costs nothing. Absent: every beat with tasks runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<HeartbeatWatchSpec>,
}

/// Inputs a heartbeat watches for change.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatWatchSpec {
    /// Workspace files (relative paths, e.g. `data/invoices.csv`) whose contents count.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 512)))]
    pub files: Vec<String>,
    /// `https://` URLs whose `ETag`/`Last-Modified` (or body) count.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 9, max = 2048)))]
    #[x_kube(validation = kube::core::Rule::new("self.all(u, u.startsWith('https://'))")
        .message("heartbeat.watch.urls[] must be https:// URLs"))]
    pub urls: Vec<String>,
}

/// A daily window, `start` inclusive to `end` exclusive; an `end` before `start` runs
/// over midnight (`22:00`–`06:00`).
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("self.start != self.end")
    .message("heartbeat.activeHours: start and end are equal, which leaves no active time"))]
pub struct ActiveHoursSpec {
    /// Start of the window, `HH:MM` (24-hour).
    #[x_kube(validation = kube::core::Rule::new(format!("self.matches('{CLOCK_PATTERN}')"))
        .message("heartbeat.activeHours.start must be a time of day as HH:MM (00:00 to 23:59)"))]
    pub start: String,
    /// End of the window, `HH:MM` (24-hour).
    #[x_kube(validation = kube::core::Rule::new(format!("self.matches('{CLOCK_PATTERN}')"))
        .message("heartbeat.activeHours.end must be a time of day as HH:MM (00:00 to 23:59)"))]
    pub end: String,
    /// IANA time zone of the window (`Europe/Zagreb`). Absent: `spec.schedule.timeZone`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,
}

/// Bot-wide settings of scheduled jobs (the `cron` tool).
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleSpec {
    /// IANA time zone of schedules that name none, and of `heartbeat.activeHours`
    /// without one (`Europe/Zagreb`). Absent: `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,
    /// A run missed while the bot was down is made up once on start if it was due no
    /// longer than this many seconds ago; older ones are skipped (never a burst). 0
    /// makes up none. Absent: 3600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 604800))]
    pub missed_run_grace_seconds: Option<u64>,
}

/// One skill: a `SKILL.md` (front matter `name` and `description`, then the body) from a
/// ConfigMap key, seen by the agent as `/etc/saint-skills/<name>/SKILL.md`.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SkillSpec {
    /// The skill's name (its folder): lower-case letters, digits and '-', at most 64.
    /// Roles list it in `spec.skills`.
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(validation = kube::core::Rule::new(format!("self.matches('{SKILL_NAME_PATTERN}')"))
        .message("skills[].name must be lower-case letters, digits and '-' (at most 64), starting with a letter or digit"))]
    pub name: String,
    /// The ConfigMap (in the bot's namespace) and key holding the SKILL.md.
    pub config_map_ref: ConfigMapKeyReference,
}

/// One key of a ConfigMap in the bot's namespace.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapKeyReference {
    /// Name of the ConfigMap.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = super::dns_subdomain_rule("skills[].configMapRef.name"))]
    pub name: String,
    /// Key inside the ConfigMap's `data`. Absent: `SKILL.md`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = kube::core::Rule::new("self.matches('^[-._a-zA-Z0-9]+$')")
        .message("skills[].configMapRef.key must be a ConfigMap key (letters, digits, '-', '_' and '.')"))]
    pub key: Option<String>,
}

impl ConfigMapKeyReference {
    /// The key, defaulted.
    pub fn key_or_default(&self) -> &str {
        self.key.as_deref().unwrap_or(DEFAULT_SKILL_KEY)
    }
}

/// Limits on the scheduled jobs of one person holding the role.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CronLimitsSpec {
    /// Jobs one person may keep (0: none; deny `cron` to hide the tool). Absent: 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1000))]
    pub max_jobs: Option<u32>,
    /// Shortest time between two runs of one job, in seconds: at least 60. Absent: 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 2592000))]
    pub min_interval_seconds: Option<u64>,
}

/// Limits on the background sub-agents (`sessions_spawn`) of one person holding the role.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpawnLimitsSpec {
    /// How deep sub-agents may nest, 0 to 5: 1 lets a person's turn spawn but not its
    /// children. Absent: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 5))]
    pub max_depth: Option<u32>,
    /// Sub-agents of one person running at once: 1 to 16 (deny `sessions_spawn` to
    /// forbid them). Absent: 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 16))]
    pub max_concurrent: Option<u32>,
    /// Longest a sub-agent may run, in seconds: 1 to 86400; a spawn may ask for less,
    /// never more. Absent: 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub timeout_seconds: Option<u64>,
}

/// Upper bounds the CRD puts on the numbers above; the controller re-checks them with the
/// same values (a CRD installed without its schema, or an older one).
pub mod bounds {
    /// `spec.heartbeat.everySeconds`.
    pub const HEARTBEAT_SECONDS: (u64, u64) = (60, 86_400);
    /// `spec.schedule.missedRunGraceSeconds`.
    pub const MAX_MISSED_RUN_GRACE_SECONDS: u64 = 604_800;
    /// `spec.cron.maxJobs` of a Role.
    pub const MAX_JOBS: u32 = 1_000;
    /// `spec.cron.minIntervalSeconds` of a Role.
    pub const MIN_INTERVAL_SECONDS: (u64, u64) = (60, 2_592_000);
    /// `spec.spawn.maxDepth` of a Role.
    pub const MAX_DEPTH: u32 = 5;
    /// `spec.spawn.maxConcurrent` of a Role.
    pub const MAX_CONCURRENT: (u32, u32) = (1, 16);
    /// `spec.spawn.timeoutSeconds` of a Role.
    pub const SPAWN_TIMEOUT_SECONDS: (u64, u64) = (1, 86_400);
}
