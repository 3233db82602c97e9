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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
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
}

fn default_timeout() -> u64 {
    DEFAULT_TIMEOUT_SECONDS
}

/// Allow/deny patterns over a call's leading arguments; deny wins.
///
/// A pattern is whitespace-separated words matched against the first arguments in
/// order; each word is a glob (`pr`, `auth`, `*`, `--show-token*`). A pattern ending
/// in `**` also matches any further arguments. An empty `allow` allows everything
/// not denied.
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
