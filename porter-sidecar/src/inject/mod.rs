//! Injection mode: the CLI holds a per-call placeholder, never the secret. Porter's
//! HTTPS proxy (on loopback, reached through the child's `HTTPS_PROXY`) terminates TLS
//! with a CA made at start-up for the hosts the registry entry allows, refuses every
//! other host, checks each request against the caller's role, swaps the placeholder for
//! the secret in the headers and forwards over properly verified TLS.
//!
//! This module holds the per-call state (placeholders live exactly as long as their
//! call) and the child-environment hook; `proxy` serves the wire.

pub mod ca;
pub mod placeholder;
pub mod proxy;
pub mod request_policy;

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use porter_protocol::registry::{CliEntry, CliMode, split_host};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use self::{ca::CertificateAuthority, request_policy::RequestPolicy};
use crate::audit::AuditLog;

/// Prefix of the per-call proxy credential (the password in the child's proxy URL).
const CALL_KEY_PREFIX: &str = "porter_call_";

/// The user name git's credential helper answers (GitHub and GitLab accept any).
const GIT_USERNAME: &str = "x-access-token";

/// Variables that point a child's TLS stack at the proxy CA: OpenSSL and Go
/// (`SSL_CERT_FILE`), git/curl, Node and Python requests.
const CA_VARIABLES: &[&str] = &[
    "SSL_CERT_FILE",
    "GIT_SSL_CAINFO",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
];

/// Proxy variables set for the child (both spellings: curl reads lower case, Go both).
const PROXY_VARIABLES: &[&str] = &["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"];

/// Variables that would route around the proxy; never passed to an injected child.
const BYPASS_VARIABLES: &[&str] = &["NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"];

/// Why injection could not start.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error(transparent)]
    Ca(#[from] ca::CaError),
    #[error("failed to write the proxy CA certificate to {path}")]
    WriteCa {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to read the extra upstream CA file {path}")]
    ReadUpstreamCa {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to bind the injecting proxy on {address}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// How the proxy starts.
#[derive(Clone, Debug, Default)]
pub struct InjectConfig {
    /// Loopback address to listen on (port 0: any free port).
    pub listen: Option<SocketAddr>,
    /// For tests and air-gapped mirrors only: connect to this address instead of
    /// resolving the host name (TLS is still verified against the host name).
    pub upstream_overrides: BTreeMap<String, SocketAddr>,
    /// For tests and air-gapped mirrors only: PEM file of extra CAs trusted upstream.
    pub upstream_ca_file: Option<PathBuf>,
}

/// The injection side of one registry entry, compiled at load.
#[derive(Debug)]
pub struct EntryInjection {
    /// `(host, port)` the proxy opens for this CLI.
    pub hosts: Vec<(String, u16)>,
    /// Declared variables replaced by placeholders.
    pub variables: Vec<String>,
    pub policy: RequestPolicy,
}

impl EntryInjection {
    /// `None` for an entry in env mode. The registry was checked at parse, so hosts
    /// are well formed here.
    pub fn compile(entry: &CliEntry) -> Option<Arc<Self>> {
        if entry.effective_mode() != CliMode::Inject {
            return None;
        }
        let variables = if entry.inject_env.is_empty() {
            // Literal `env` holds settings (GH_HOST) but, in local mode, also tokens
            // (`cliport install --env GH_TOKEN=…`): those must not reach the child either.
            let literal_credentials = entry.env.keys().filter(|name| looks_like_credential(name));
            let mut variables: Vec<String> = entry
                .env_from_files
                .keys()
                .chain(&entry.env_passthrough)
                .chain(literal_credentials)
                .cloned()
                .collect();
            variables.sort();
            variables.dedup();
            variables
        } else {
            entry.inject_env.clone()
        };
        Some(Arc::new(Self {
            hosts: entry
                .hosts
                .iter()
                .filter_map(|host| split_host(host))
                .collect(),
            variables,
            policy: RequestPolicy::compile(&entry.requests),
        }))
    }
}

/// Variable names that carry credentials by convention (`GH_TOKEN`, `API_KEY`,
/// `GOG_CLIENT_SECRET`, `DB_PASSWORD`).
fn looks_like_credential(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "KEY",
        "CREDENTIAL",
        "AUTH",
    ]
    .iter()
    .any(|word| upper.contains(word))
}

/// Who is calling, for the request policy and the audit.
#[derive(Clone, Debug, Default)]
pub struct Caller {
    pub session: String,
    pub contact: String,
    pub role: Option<String>,
    pub cli: String,
}

/// One running call as the proxy sees it.
#[derive(Debug)]
pub struct CallContext {
    pub caller: Caller,
    pub entry: Arc<EntryInjection>,
    /// (placeholder, secret) pairs of this call.
    pub placeholders: Vec<(String, String)>,
    /// Cancelled when the call ends: its tunnels close.
    pub ended: CancellationToken,
}

impl CallContext {
    fn allows_host(&self, host: &str, port: u16) -> bool {
        self.entry
            .hosts
            .iter()
            .any(|(allowed, allowed_port)| allowed == host && *allowed_port == port)
    }
}

/// The proxy and its live calls; one per daemon.
pub struct Injector {
    pub ca: CertificateAuthority,
    pub upstream_tls: Arc<rustls::ClientConfig>,
    pub upstream_overrides: BTreeMap<String, SocketAddr>,
    pub address: SocketAddr,
    pub audit: Arc<AuditLog>,
    ca_file: PathBuf,
    /// Holds the CA certificate file; removed with the injector.
    _ca_directory: tempfile::TempDir,
    listener: Mutex<Option<std::net::TcpListener>>,
    calls: Mutex<HashMap<String, Arc<CallContext>>>,
}

impl std::fmt::Debug for Injector {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Injector")
            .field("address", &self.address)
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

impl Injector {
    /// Makes the CA, writes its certificate for children and binds the proxy (served
    /// once [`proxy::serve`] runs).
    pub fn new(config: &InjectConfig, audit: Arc<AuditLog>) -> Result<Self, InjectError> {
        let ca = CertificateAuthority::generate()?;
        let ca_directory = tempfile::Builder::new()
            .prefix("porter-inject-")
            .tempdir()
            .map_err(|source| InjectError::WriteCa {
                path: std::env::temp_dir(),
                source,
            })?;
        let ca_file = ca_directory.path().join("ca.pem");
        write_read_only(&ca_file, ca.certificate_pem()).map_err(|source| InjectError::WriteCa {
            path: ca_file.clone(),
            source,
        })?;
        let extra_roots = match &config.upstream_ca_file {
            Some(path) => std::fs::read(path).map_err(|source| InjectError::ReadUpstreamCa {
                path: path.clone(),
                source,
            })?,
            None => Vec::new(),
        };
        let upstream_tls = ca::upstream_config(&extra_roots)?;
        let address = config
            .listen
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        let listener = std::net::TcpListener::bind(address)
            .and_then(|listener| {
                listener.set_nonblocking(true)?;
                Ok(listener)
            })
            .map_err(|source| InjectError::Bind { address, source })?;
        let address = listener
            .local_addr()
            .map_err(|source| InjectError::Bind { address, source })?;
        Ok(Self {
            ca,
            upstream_tls,
            upstream_overrides: config.upstream_overrides.clone(),
            address,
            audit,
            ca_file,
            _ca_directory: ca_directory,
            listener: Mutex::new(Some(listener)),
            calls: Mutex::new(HashMap::new()),
        })
    }

    /// The CA certificate file children trust.
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// The bound listener, once (for [`proxy::serve`]).
    pub fn take_listener(&self) -> Option<std::net::TcpListener> {
        self.listener.lock().expect("listener").take()
    }

    /// The live call a proxy credential belongs to.
    pub fn call(&self, key: &str) -> Option<Arc<CallContext>> {
        self.calls.lock().expect("calls").get(key).cloned()
    }

    /// Starts injection for one call: replaces the entry's secret variables in
    /// `environment` with fresh placeholders and adds the proxy, CA and git credential
    /// settings. The returned guard ends the placeholders when dropped.
    pub fn begin_call(
        self: &Arc<Self>,
        entry: &Arc<EntryInjection>,
        caller: Caller,
        environment: &mut BTreeMap<String, String>,
    ) -> CallInjection {
        let key = placeholder::fresh(CALL_KEY_PREFIX);
        let mut placeholders = Vec::new();
        for variable in &entry.variables {
            let fresh = placeholder::fresh(placeholder::PREFIX);
            // The real value leaves the child's environment here; only the proxy keeps it.
            if let Some(secret) = environment.insert(variable.clone(), fresh.clone()) {
                placeholders.push((fresh, secret));
            } else {
                environment.remove(variable);
            }
        }
        let proxy_url = format!("http://porter:{key}@{}", self.address);
        for variable in PROXY_VARIABLES {
            environment.insert((*variable).to_owned(), proxy_url.clone());
        }
        for variable in BYPASS_VARIABLES {
            environment.remove(*variable);
        }
        let ca_file = self.ca_file.to_string_lossy().into_owned();
        for variable in CA_VARIABLES {
            environment.insert((*variable).to_owned(), ca_file.clone());
        }
        environment.insert("GIT_TERMINAL_PROMPT".to_owned(), "0".to_owned());
        let mut git_config = vec![
            // curl sends the proxy credential at once instead of waiting for a 407.
            ("http.proxyAuthMethod".to_owned(), "basic".to_owned()),
            // An empty helper clears any configured before (system, global, repository).
            ("credential.helper".to_owned(), String::new()),
        ];
        if let Some((placeholder, _)) = placeholders.first() {
            git_config.push((
                "credential.helper".to_owned(),
                git_credential_helper(placeholder),
            ));
        }
        append_git_config(environment, &git_config);
        let context = Arc::new(CallContext {
            caller,
            entry: entry.clone(),
            placeholders,
            ended: CancellationToken::new(),
        });
        self.calls
            .lock()
            .expect("calls")
            .insert(key.clone(), context.clone());
        CallInjection {
            injector: self.clone(),
            key,
            context,
        }
    }
}

/// A credential helper that answers `get` with the placeholder (git runs `!` helpers
/// through the shell with the action as argument).
fn git_credential_helper(placeholder: &str) -> String {
    format!(
        "!f() {{ test \"$1\" = get && printf 'username={GIT_USERNAME}\\npassword={placeholder}\\n'; }}; f"
    )
}

/// Appends `GIT_CONFIG_KEY_n`/`VALUE_n` pairs after those already set (git reads them
/// after every config file, so they win over the repository's).
fn append_git_config(environment: &mut BTreeMap<String, String>, entries: &[(String, String)]) {
    let start: usize = environment
        .get("GIT_CONFIG_COUNT")
        .and_then(|count| count.parse().ok())
        .unwrap_or(0);
    for (offset, (key, value)) in entries.iter().enumerate() {
        environment.insert(format!("GIT_CONFIG_KEY_{}", start + offset), key.clone());
        environment.insert(
            format!("GIT_CONFIG_VALUE_{}", start + offset),
            value.clone(),
        );
    }
    environment.insert(
        "GIT_CONFIG_COUNT".to_owned(),
        (start + entries.len()).to_string(),
    );
}

fn write_read_only(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o444))
}

/// Injection for one running call; dropping it ends the call's placeholders and closes
/// its tunnels.
#[derive(Debug)]
pub struct CallInjection {
    injector: Arc<Injector>,
    key: String,
    context: Arc<CallContext>,
}

impl Drop for CallInjection {
    fn drop(&mut self) {
        self.injector.calls.lock().expect("calls").remove(&self.key);
        self.context.ended.cancel();
    }
}

/// One proxy decision in the audit log: who, where, what — never a header value.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestAudit {
    pub ts: String,
    /// Always `request` (call lines have no `kind`).
    pub kind: &'static str,
    pub session: String,
    pub contact: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    pub cli: String,
    pub host: String,
    pub method: String,
    /// Without the query string (which may carry values).
    pub path: String,
    /// `allowed`, `refused`, or `upstream_error` (admitted, but the upstream could not
    /// be reached or verified).
    pub decision: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The upstream's status, when forwarded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn injected_entry() -> CliEntry {
        CliEntry {
            bin: "/usr/bin/gh".into(),
            env: BTreeMap::from([("GH_HOST".into(), "github.com".into())]),
            env_from_files: BTreeMap::from([("GH_TOKEN".into(), "/secrets/gh".into())]),
            hosts: vec!["api.github.com".into(), "github.com:8443".into()],
            ..CliEntry::default()
        }
    }

    #[test]
    fn an_entry_with_hosts_is_injected_and_its_file_variables_become_placeholders() {
        let entry = EntryInjection::compile(&injected_entry()).unwrap();
        assert_eq!(entry.variables, ["GH_TOKEN"]);
        assert_eq!(
            entry.hosts,
            [
                ("api.github.com".to_owned(), 443),
                ("github.com".to_owned(), 8443)
            ]
        );
        let local = EntryInjection::compile(&CliEntry {
            env: BTreeMap::from([
                ("GH_HOST".into(), "github.com".into()),
                ("GH_TOKEN".into(), "ghp_literal".into()),
            ]),
            env_from_files: BTreeMap::new(),
            ..injected_entry()
        })
        .unwrap();
        assert_eq!(
            local.variables,
            ["GH_TOKEN"],
            "a literal token is injected too"
        );
        let env_mode = CliEntry {
            mode: Some(CliMode::Env),
            ..injected_entry()
        };
        assert!(EntryInjection::compile(&env_mode).is_none());
    }

    #[test]
    fn the_child_environment_holds_placeholders_and_proxy_settings_only() {
        let directory = tempfile::tempdir().unwrap();
        let audit = Arc::new(AuditLog::open(&directory.path().join("audit.jsonl")).unwrap());
        let injector = Arc::new(Injector::new(&InjectConfig::default(), audit).unwrap());
        let entry = EntryInjection::compile(&injected_entry()).unwrap();
        let mut environment = BTreeMap::from([
            ("GH_TOKEN".to_owned(), "ghp_real_secret".to_owned()),
            ("GH_HOST".to_owned(), "github.com".to_owned()),
            ("NO_PROXY".to_owned(), "*".to_owned()),
            ("GIT_CONFIG_COUNT".to_owned(), "1".to_owned()),
            ("GIT_CONFIG_KEY_0".to_owned(), "core.hooksPath".to_owned()),
            ("GIT_CONFIG_VALUE_0".to_owned(), "/dev/null".to_owned()),
        ]);
        let guard = injector.begin_call(&entry, Caller::default(), &mut environment);
        assert!(
            !environment
                .values()
                .any(|value| value.contains("ghp_real_secret"))
        );
        assert!(environment["GH_TOKEN"].starts_with(placeholder::PREFIX));
        assert!(!environment.contains_key("NO_PROXY"));
        assert_eq!(
            environment["SSL_CERT_FILE"],
            injector.ca_file().to_string_lossy()
        );
        assert!(environment["HTTPS_PROXY"].ends_with(&injector.address.to_string()));
        assert_eq!(environment["GIT_CONFIG_COUNT"], "4");
        assert_eq!(environment["GIT_CONFIG_KEY_0"], "core.hooksPath");
        assert_eq!(environment["GIT_CONFIG_KEY_3"], "credential.helper");
        assert!(environment["GIT_CONFIG_VALUE_3"].contains(&environment["GH_TOKEN"]));
        let key = guard.key.clone();
        assert!(injector.call(&key).is_some());
        drop(guard);
        assert!(injector.call(&key).is_none(), "the call's key dies with it");
        let pem = std::fs::read_to_string(injector.ca_file()).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----") && !pem.contains("PRIVATE"));
    }
}
