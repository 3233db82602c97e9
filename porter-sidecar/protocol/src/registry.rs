//! The CLI registry file: which CLIs Porter runs, with which environment and policy.
//!
//! Rendered by the operator (from the SaintBot's Porter CLIs) or edited by `cliport` in
//! local mode; read and hot-reloaded by the daemon. In Kubernetes it holds no secret
//! values: credentials arrive through `envFromFiles` (mounted Secret keys) or
//! `envPassthrough` (variables the porter container got via `envFrom`). Literal `env`
//! values are for local mode and non-secret settings, yet are still treated as
//! credentials (redacted from output and logs).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Current registry format version.
pub const REGISTRY_VERSION: u32 = 1;

/// Default per-CLI timeout (seed §6.8).
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 120;

/// The whole registry file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Registry {
    /// Always [`REGISTRY_VERSION`].
    #[serde(default = "default_version")]
    pub version: u32,
    /// Limit over all CLIs together; absent means unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_rate_limit: Option<RateLimit>,
    /// CLIs by exact name (the name the sandbox calls).
    #[serde(default)]
    pub clis: BTreeMap<String, CliEntry>,
}

fn default_version() -> u32 {
    REGISTRY_VERSION
}

impl Default for Registry {
    /// An empty registry of the current version (so it passes `from_json` round trips).
    fn default() -> Self {
        Self {
            version: REGISTRY_VERSION,
            global_rate_limit: None,
            clis: BTreeMap::new(),
        }
    }
}

/// One CLI Porter may run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CliEntry {
    /// Absolute path of the real binary, run with an argument vector (never a shell).
    pub bin: String,
    /// Literal environment variables (treated as credentials: redacted everywhere).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Environment variables read from files (mounted Secret keys): name → path.
    #[serde(default)]
    pub env_from_files: BTreeMap<String, String>,
    /// Names of variables copied from Porter's own environment (set by `envFrom`).
    #[serde(default)]
    pub env_passthrough: Vec<String>,
    /// Seconds before SIGTERM (then SIGKILL 5 s later).
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
    /// Per-CLI rate limit; absent means only the global limit applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// Argument policy for every caller.
    #[serde(default)]
    pub args: ArgPolicy,
    /// Extra argument policy by the requesting contact's role; applied on top of `args`.
    #[serde(default)]
    pub role_args: BTreeMap<String, ArgPolicy>,
    /// Extra caller environment hints this CLI accepts (beyond `TERM`, `COLUMNS`,
    /// `LINES`, `NO_COLOR`, `CLICOLOR`, `TZ`). Never a declared or protected variable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub request_env: Vec<String>,
    /// Variables a request may never set, whatever `requestEnv` says (deny wins).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protected_env: Vec<String>,
    /// The shipped argument grammar that checks every call (an allowlist of commands,
    /// see [`Profile`]). Absent: the profile named like the CLI or its binary, if any
    /// (kept for registries written before this field); set it explicitly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Profile>,
    /// For a CLI without a profile: the options it takes before its command, and whether
    /// each takes a value (`{"--account": "value", "-v": "flag"}`), so the command is
    /// found wherever they stand. Any other option before the command is refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub global_options: BTreeMap<String, OptionArity>,
    /// For a CLI without a profile: the allowed command paths (`"calendar list"`, or
    /// `"gmail **"` for a command and everything under it). When set, any other command
    /// is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
}

fn default_timeout() -> u64 {
    DEFAULT_TIMEOUT_SECONDS
}

/// Allow/deny patterns over a call's leading arguments; deny wins.
///
/// A pattern is whitespace-separated words matched against the first arguments in
/// order; each word is a case-sensitive glob (`pr`, `auth`, `*`, `--show-token*`).
/// A pattern ending in `**` also matches any further arguments;
/// a `**` word elsewhere matches any number of arguments (`** --upload-pack* **`
/// matches the flag anywhere). An empty `allow` allows everything not denied.
/// Patterns see the command path first, then the command's own arguments: global
/// options are taken out by the CLI's grammar (its profile), which runs first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArgPolicy {
    /// Patterns a call must match (empty: any).
    #[serde(default)]
    pub allow: Vec<String>,
    /// Patterns that refuse a call before anything runs.
    #[serde(default)]
    pub deny: Vec<String>,
}

/// A token bucket: `perMinute` sustained, `burst` at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RateLimit {
    /// Calls per minute, sustained.
    pub per_minute: u32,
    /// Calls allowed at once above the sustained rate.
    #[serde(default = "default_burst")]
    pub burst: u32,
}

fn default_burst() -> u32 {
    10
}

/// A shipped argument grammar: the CLI's global options, the commands a call may
/// use (anything else — aliases, extensions, config and auth changes — is refused) and
/// the options of those commands that would run code, print or redirect the credential,
/// or read files outside the working directory. Chosen by the `profile` field, never
/// by the binary's file name alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// GitHub's `gh`.
    Gh,
    /// `git`.
    Git,
    /// `gog`, the Google Workspace CLI.
    Gog,
}

impl Profile {
    /// Every profile.
    pub const ALL: [Profile; 3] = [Profile::Gh, Profile::Git, Profile::Gog];

    /// The profile's name as written in the registry.
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Gh => "gh",
            Profile::Git => "git",
            Profile::Gog => "gog",
        }
    }

    /// The profile of that name.
    pub fn named(name: &str) -> Option<Profile> {
        Profile::ALL
            .into_iter()
            .find(|profile| profile.as_str() == name)
    }
}

/// Whether a declared option takes a value (`--account a@b.c`, `--account=a@b.c`,
/// `-aa@b.c`) or stands alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OptionArity {
    Flag,
    Value,
}

/// Why a registry file was refused.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("failed to parse porter registry: {0}")]
    Parse(#[source] serde_json::Error),
    #[error("porter registry version is {0}, this porter reads {REGISTRY_VERSION}")]
    Version(u32),
    #[error("clis.{name}.bin: {bin:?} must be an absolute path")]
    RelativeBin { name: String, bin: String },
    #[error("clis.{name}: CLI names are plain file names, not {name:?}")]
    BadName { name: String },
}

impl Registry {
    /// Parses and checks a registry file.
    pub fn from_json(text: &str) -> Result<Self, RegistryError> {
        let registry: Registry = serde_json::from_str(text).map_err(RegistryError::Parse)?;
        if registry.version != REGISTRY_VERSION {
            return Err(RegistryError::Version(registry.version));
        }
        for (name, entry) in &registry.clis {
            let plain = !name.is_empty()
                && name != "."
                && name != ".."
                && !name.contains(['/', '\0'])
                && !name.starts_with('-');
            if !plain {
                return Err(RegistryError::BadName { name: name.clone() });
            }
            if !entry.bin.starts_with('/') {
                return Err(RegistryError::RelativeBin {
                    name: name.clone(),
                    bin: entry.bin.clone(),
                });
            }
        }
        Ok(registry)
    }

    /// Serialises deterministically (pretty, trailing newline).
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("registry is always serialisable");
        text.push('\n');
        text
    }
}
