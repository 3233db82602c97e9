//! The registry file: which hosts each credential may reach, how Porter puts the
//! credential on the wire, and which requests each role may make.
//!
//! Porter runs no program: CLIs run in the caller's sandbox with a placeholder and
//! reach their hosts only through Porter's proxy, which swaps the placeholder for the
//! secret in the one place the entry declares. Rendered by the operator (from the
//! SaintBot's Porter CLIs) or edited by `cliport` in local mode; read and hot-reloaded
//! by the daemon. In Kubernetes it holds no secret values: secrets are `file`
//! references (mounted Secret keys, in Porter's container only) or `env` names.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Current registry format version (2: Porter only injects; version 1 ran CLIs).
pub const REGISTRY_VERSION: u32 = 2;

/// The whole registry file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Registry {
    /// Always [`REGISTRY_VERSION`].
    #[serde(default = "default_version")]
    pub version: u32,
    /// Credentials by the name of the CLI that uses them (`gh`, `gog`); the name is
    /// what the audit log and `cliport list` show.
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
            clis: BTreeMap::new(),
        }
    }
}

/// One credential and the wire it may travel.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CliEntry {
    /// The only hosts (`name` or `name:port`, port 443 by default) a command may reach
    /// with this credential; every other host is refused at `CONNECT`. A host belongs to
    /// one entry only.
    pub hosts: Vec<String>,
    /// The secret Porter holds (for `oauth2`: the refresh token).
    pub secret: SecretSource,
    /// Where the placeholder is swapped for the secret. Empty: `authorization`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inject: Vec<InjectAt>,
    /// OAuth 2.0 refresh held by Porter: requests to `tokenUrl` are answered by Porter
    /// with a short-lived placeholder access token; upstream requests carry a real
    /// access token Porter got with the refresh token (`secret`), which never leaves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth2: Option<OAuth2>,
    /// Variables a sandbox command gets holding this entry's placeholder (`GH_TOKEN`;
    /// for `oauth2`, the placeholder refresh token).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placeholder_env: Vec<String>,
    /// git over HTTPS: git's credential helper answers the placeholder (as the password,
    /// user `x-access-token`) for these hosts; `inject` must include `authorization`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub git: bool,
    /// The requests each role may make, by role name (`*` applies to every role).
    /// Empty: any request to the hosts. Otherwise a role with no rules (and no `*`
    /// rules) may make no request at all.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, Vec<RequestRule>>,
    /// Refused with a message: version 1's `env` mode (the secret in the CLI's
    /// environment) cannot exist where Porter runs no CLI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub mode: Option<String>,
}

/// Where a secret comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum SecretSource {
    /// A file only Porter can read (a mounted Secret key); a trailing newline is not
    /// part of the value.
    File(String),
    /// A variable of Porter's own environment.
    Env(String),
    /// The value itself (local mode only; the registry file is then mode 0600).
    Value(String),
}

impl Default for SecretSource {
    fn default() -> Self {
        Self::Value(String::new())
    }
}

/// One place the proxy puts the secret. Placeholders are swapped only there, never in
/// other headers or bodies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum InjectAt {
    /// `Authorization: Bearer <placeholder>` (or GitHub's `token <placeholder>`), and
    /// `Authorization: Basic` whose user or password is the placeholder (git over HTTPS).
    Authorization,
    /// A named request header whose value holds the placeholder (`X-Api-Key`).
    Header(String),
    /// A query parameter whose value is the placeholder (`key`).
    Query(String),
}

/// OAuth 2.0 refresh held by Porter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OAuth2 {
    /// The token endpoint (`https://oauth2.googleapis.com/token`); its host must be
    /// among the entry's hosts.
    pub token_url: String,
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<SecretSource>,
    /// Seconds a placeholder access token is valid for the command (at most the real
    /// token's own lifetime). Default 300.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placeholder_ttl_seconds: Option<u64>,
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

/// Why a registry file was refused.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("failed to parse porter registry")]
    Parse(#[source] serde_json::Error),
    #[error(
        "porter registry version is {0}, this porter reads {REGISTRY_VERSION} (version 1 ran CLIs inside Porter; rewrite each entry with `cliport install NAME --host HOST --secret-file FILE`)"
    )]
    Version(u32),
    #[error("clis.{name}: CLI names are plain file names, not {name:?}")]
    BadName { name: String },
    #[error("clis.{name}.{field}: {message}")]
    Entry {
        name: String,
        field: &'static str,
        message: String,
    },
}

impl CliEntry {
    /// Where the placeholder goes ([`CliEntry::inject`], or `authorization`).
    pub fn inject_at(&self) -> Vec<InjectAt> {
        if self.inject.is_empty() {
            vec![InjectAt::Authorization]
        } else {
            self.inject.clone()
        }
    }

    /// The entry's fields make sense together. Errors name the field.
    fn check(&self) -> Result<(), (&'static str, String)> {
        if let Some(mode) = &self.mode
            && mode != "inject"
        {
            return Err((
                "mode",
                format!(
                    "{mode:?} is not served: Porter runs no CLI, so a credential that must live inside the tool cannot be kept out of the sandbox; declare where it goes on the wire (hosts, inject) instead"
                ),
            ));
        }
        if self.hosts.is_empty() {
            return Err((
                "hosts",
                "an entry needs hosts (the only hosts its credential may reach)".into(),
            ));
        }
        for host in &self.hosts {
            split_host(host)
                .ok_or_else(|| ("hosts", format!("{host:?} is not a host name[:port]")))?;
        }
        match &self.secret {
            SecretSource::File(path) if !path.starts_with('/') => {
                return Err(("secret.file", format!("{path:?} must be an absolute path")));
            }
            SecretSource::Env(name) if !is_variable_name(name) => {
                return Err(("secret.env", format!("{name:?} is not a variable name")));
            }
            SecretSource::Value(value) if value.is_empty() => {
                return Err(("secret", "the secret is empty".into()));
            }
            _ => {}
        }
        for place in &self.inject {
            let (InjectAt::Header(name) | InjectAt::Query(name)) = place else {
                continue;
            };
            if name.is_empty() || !name.bytes().all(|byte| byte.is_ascii_graphic()) {
                return Err((
                    "inject",
                    format!("{name:?} is not a header or parameter name"),
                ));
            }
            if matches!(place, InjectAt::Header(_)) && http_reserved_header(name) {
                return Err((
                    "inject",
                    format!(
                        "{name} is not a credential header (use `authorization` for Authorization)"
                    ),
                ));
            }
        }
        if self.git && !self.inject_at().contains(&InjectAt::Authorization) {
            return Err((
                "git",
                "git over HTTPS sends the credential in Authorization: add `authorization` to inject".into(),
            ));
        }
        if let Some(name) = self
            .placeholder_env
            .iter()
            .find(|name| !is_variable_name(name))
        {
            return Err(("placeholderEnv", format!("{name:?} is not a variable name")));
        }
        if let Some(oauth2) = &self.oauth2 {
            let (host, port) = https_url_host(&oauth2.token_url).ok_or_else(|| {
                (
                    "oauth2.tokenUrl",
                    format!("{:?} is not an https URL", oauth2.token_url),
                )
            })?;
            let listed = self
                .hosts
                .iter()
                .filter_map(|host| split_host(host))
                .any(|listed| listed == (host.clone(), port));
            if !listed {
                return Err((
                    "oauth2.tokenUrl",
                    format!("its host {host}:{port} must be among hosts"),
                ));
            }
            if oauth2.client_id.is_empty() {
                return Err(("oauth2.clientId", "must not be empty".into()));
            }
        }
        for (role, rules) in &self.requests {
            for rule in rules {
                if rule.methods.is_empty() || rule.paths.is_empty() {
                    return Err((
                        "requests",
                        format!("{role}: a rule needs methods and paths"),
                    ));
                }
                if let Some(path) = rule.paths.iter().find(|path| !path.starts_with('/')) {
                    return Err((
                        "requests",
                        format!("{role}: path {path:?} must start with /"),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Headers that are not credentials and that the proxy manages itself.
fn http_reserved_header(name: &str) -> bool {
    [
        "authorization",
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "proxy-authorization",
        "cookie",
        "user-agent",
    ]
    .iter()
    .any(|reserved| name.eq_ignore_ascii_case(reserved))
}

/// `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_variable_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == b'_')
        && bytes.all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
}

/// The `(host, port)` of an `https://host[:port]/…` URL.
pub fn https_url_host(url: &str) -> Option<(String, u16)> {
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    if authority.contains('@') {
        return None;
    }
    split_host(authority)
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
        // The version first, so a version 1 file gets the migration message rather
        // than an unknown-field error.
        #[derive(Deserialize)]
        struct VersionOnly {
            #[serde(default = "default_version")]
            version: u32,
        }
        if let Ok(VersionOnly { version }) = serde_json::from_str(text)
            && version != REGISTRY_VERSION
        {
            return Err(RegistryError::Version(version));
        }
        let registry: Registry = serde_json::from_str(text).map_err(RegistryError::Parse)?;
        let mut owners: BTreeMap<(String, u16), &str> = BTreeMap::new();
        for (name, entry) in &registry.clis {
            let plain = !name.is_empty()
                && name != "."
                && name != ".."
                && !name.contains(['/', '\0'])
                && !name.starts_with('-');
            if !plain {
                return Err(RegistryError::BadName { name: name.clone() });
            }
            let entry_error = |(field, message): (&'static str, String)| RegistryError::Entry {
                name: name.clone(),
                field,
                message,
            };
            entry.check().map_err(entry_error)?;
            for host in entry.hosts.iter().filter_map(|host| split_host(host)) {
                if let Some(owner) = owners.insert(host.clone(), name)
                    && owner != name
                {
                    return Err(entry_error((
                        "hosts",
                        format!(
                            "{}:{} is already a host of {owner}: a host carries one credential",
                            host.0, host.1
                        ),
                    )));
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(entry: &str) -> Result<Registry, RegistryError> {
        Registry::from_json(&format!(r#"{{"version":2,"clis":{{"gh":{entry}}}}}"#))
    }

    fn message(entry: &str) -> String {
        parse(entry).unwrap_err().to_string()
    }

    #[test]
    fn the_documented_entry_parses_with_authorization_as_the_default() {
        let registry = parse(
            r#"{"hosts":["api.github.com","github.com"],"secret":{"file":"/etc/porter-secrets/gh/GH_TOKEN"},
                "placeholderEnv":["GH_TOKEN"],"git":true,
                "requests":{"employee":[{"methods":["GET"],"paths":["/repos/*/*/pulls"]}]}}"#,
        )
        .unwrap();
        let gh = &registry.clis["gh"];
        assert_eq!(gh.inject_at(), [InjectAt::Authorization]);
        assert_eq!(Registry::from_json(&registry.to_json()).unwrap(), registry);
        let places = parse(
            r#"{"hosts":["maps.example"],"secret":{"env":"MAPS_KEY"},"inject":[{"query":"key"},{"header":"X-Api-Key"}]}"#,
        )
        .unwrap();
        assert_eq!(
            places.clis["gh"].inject,
            [
                InjectAt::Query("key".into()),
                InjectAt::Header("X-Api-Key".into())
            ]
        );
    }

    #[test]
    fn refusals_name_the_field() {
        for (entry, expected) in [
            (
                r#"{"hosts":[],"secret":{"value":"x"}}"#,
                "clis.gh.hosts: an entry needs hosts",
            ),
            (
                r#"{"hosts":["a b"],"secret":{"value":"x"}}"#,
                "clis.gh.hosts: \"a b\"",
            ),
            (
                r#"{"hosts":["a.example"],"secret":{"file":"rel"}}"#,
                "clis.gh.secret.file",
            ),
            (
                r#"{"hosts":["a.example"],"secret":{"env":"1X"}}"#,
                "clis.gh.secret.env",
            ),
            (
                r#"{"hosts":["a.example"],"secret":{"value":""}}"#,
                "clis.gh.secret: the secret is empty",
            ),
            (
                r#"{"hosts":["a.example"],"secret":{"value":"x"},"mode":"env"}"#,
                "clis.gh.mode: \"env\" is not served",
            ),
            (
                r#"{"hosts":["a.example"],"secret":{"value":"x"},"inject":[{"header":"Cookie"}]}"#,
                "clis.gh.inject",
            ),
            (
                r#"{"hosts":["a.example"],"secret":{"value":"x"},"inject":[{"query":"k"}],"git":true}"#,
                "clis.gh.git",
            ),
            (
                r#"{"hosts":["a.example"],"secret":{"value":"x"},"placeholderEnv":["A-B"]}"#,
                "clis.gh.placeholderEnv",
            ),
            (
                r#"{"hosts":["a.example"],"secret":{"value":"x"},"oauth2":{"tokenUrl":"https://b.example/token","clientId":"c"}}"#,
                "clis.gh.oauth2.tokenUrl: its host b.example:443",
            ),
            (
                r#"{"hosts":["a.example"],"secret":{"value":"x"},"oauth2":{"tokenUrl":"http://a.example/token","clientId":"c"}}"#,
                "clis.gh.oauth2.tokenUrl",
            ),
            (
                r#"{"hosts":["a.example"],"secret":{"value":"x"},"requests":{"employee":[{"methods":["GET"],"paths":["x"]}]}}"#,
                "clis.gh.requests",
            ),
        ] {
            let message = message(entry);
            assert!(message.starts_with(expected), "{entry}: {message}");
        }
        assert!(
            message(r#"{"hosts":["a.example"],"bin":"/usr/bin/gh"}"#).contains("failed to parse")
        );
    }

    #[test]
    fn a_host_carries_one_credential_and_version_1_gets_the_migration_message() {
        let shared = Registry::from_json(
            r#"{"version":2,"clis":{"a":{"hosts":["x.example"],"secret":{"value":"1"}},"b":{"hosts":["X.example:443"],"secret":{"value":"2"}}}}"#,
        )
        .unwrap_err();
        assert!(
            shared.to_string().contains("already a host of a"),
            "{shared}"
        );
        let old = Registry::from_json(r#"{"version":1,"clis":{"gh":{"bin":"/usr/bin/gh"}}}"#)
            .unwrap_err();
        assert!(
            old.to_string().contains("version 1 ran CLIs inside Porter"),
            "{old}"
        );
    }
}
