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

/// Default per-CLI timeout: a call still running after it is killed.
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
    /// see [`Profile`]). Absent: the profile of the name the CLI is registered under, if any
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
    /// How the credential reaches the CLI; absent: `inject` when `hosts` is set, else
    /// `env`. See [`CliMode`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<CliMode>,
    /// Injection: the only hosts (`name` or `name:port`, port 443 by default) the CLI
    /// may reach through Porter's proxy; every other host is refused at CONNECT.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// Injection: the declared variables whose values the proxy injects (the CLI sees a
    /// per-call placeholder instead). Empty: every `envFromFiles` and `envPassthrough`
    /// variable, and literal `env` variables named like credentials (`*TOKEN*`,
    /// `*SECRET*`, `*PASSWORD*`, `*KEY*`, `*AUTH*`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inject_env: Vec<String>,
    /// Injection: the requests each role may make through the proxy, by role name
    /// (`*` applies to every role). Empty: any request to an allowed host. Otherwise a
    /// role with no rules (and no `*` rules) may make no request at all.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, Vec<RequestRule>>,
}

/// How a CLI gets its credential.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum CliMode {
    /// The CLI gets a per-call placeholder; Porter's HTTPS proxy swaps it for the real
    /// secret on the wire, only for the entry's `hosts` and only for requests the
    /// caller's role may make. The secret never enters the CLI's process.
    Inject,
    /// Weaker: the secret is in the CLI's environment, so everything rests on the
    /// argument policy. For credentials that must live in the tool (signing keys).
    #[default]
    Env,
}

impl CliEntry {
    /// The mode this entry runs in ([`CliEntry::mode`], or its default).
    pub fn effective_mode(&self) -> CliMode {
        self.mode.unwrap_or(if self.hosts.is_empty() {
            CliMode::Env
        } else {
            CliMode::Inject
        })
    }
}

/// Requests a role may make through the injecting proxy: a request is admitted when
/// some rule matches its method and path (and, for a GraphQL rule, every operation in
/// its body).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestRule {
    /// HTTP methods (upper case); `*` for any.
    pub methods: Vec<String>,
    /// Path patterns (no query string): `*` matches within one segment, a `**` segment
    /// matches any number of segments (`/repos/*/*/pulls/**`).
    pub paths: Vec<String>,
    /// Makes this a GraphQL rule: the JSON body's `query` is parsed and every operation
    /// in it must be admitted here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graphql: Option<GraphqlRule>,
}

/// Which GraphQL operations a rule admits. Mutations are matched by their root fields
/// (`mergePullRequest`), not by operation names, which the client chooses freely.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GraphqlRule {
    /// Query operations are admitted.
    #[serde(default)]
    pub queries: bool,
    /// Root mutation fields admitted (`*` for any); empty: no mutation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mutations: Vec<String>,
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
    #[error("failed to parse porter registry")]
    Parse(#[source] serde_json::Error),
    #[error("porter registry version is {0}, this porter reads {REGISTRY_VERSION}")]
    Version(u32),
    #[error("clis.{name}.bin: {bin:?} must be an absolute path")]
    RelativeBin { name: String, bin: String },
    #[error("clis.{name}: CLI names are plain file names, not {name:?}")]
    BadName { name: String },
    #[error("clis.{name}: {message}")]
    Injection { name: String, message: String },
}

/// The injection fields of one entry make sense: an injected entry names its hosts, and
/// every host and injected variable is well formed.
fn check_injection(entry: &CliEntry) -> Result<(), String> {
    if entry.effective_mode() == CliMode::Inject && entry.hosts.is_empty() {
        return Err("mode inject needs hosts (the only hosts the proxy lets it reach)".into());
    }
    for host in &entry.hosts {
        split_host(host).ok_or_else(|| format!("hosts: {host:?} is not a host name[:port]"))?;
    }
    let declared = |name: &String| {
        entry.env.contains_key(name)
            || entry.env_from_files.contains_key(name)
            || entry.env_passthrough.contains(name)
    };
    if let Some(name) = entry.inject_env.iter().find(|name| !declared(name)) {
        return Err(format!("injectEnv: {name} is not a declared variable"));
    }
    for (role, rules) in &entry.requests {
        for rule in rules {
            if rule.methods.is_empty() || rule.paths.is_empty() {
                return Err(format!("requests.{role}: a rule needs methods and paths"));
            }
            if let Some(path) = rule.paths.iter().find(|path| !path.starts_with('/')) {
                return Err(format!("requests.{role}: path {path:?} must start with /"));
            }
        }
    }
    Ok(())
}

/// Splits `name[:port]` into a lower-case host name and a port (443 by default).
/// `None` for anything that is not a plain DNS name or IPv4 address.
pub fn split_host(host: &str) -> Option<(String, u16)> {
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) => (name, port.parse::<u16>().ok().filter(|port| *port != 0)?),
        None => (host, 443),
    };
    let plain = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
        });
    plain.then(|| (name.to_ascii_lowercase(), port))
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
            check_injection(entry).map_err(|message| RegistryError::Injection {
                name: name.clone(),
                message,
            })?;
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
