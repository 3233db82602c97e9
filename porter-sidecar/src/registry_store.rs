//! The loaded registry: each credential with its secret read, its hosts, where it is
//! injected and its compiled request policy, plus the scrubber for responses; swapped
//! whole on reload.
//!
//! Reads the registry file, secret files and Porter's own environment; never writes.

use std::{
    collections::HashMap,
    io::Read,
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
    sync::Arc,
};

use porter_protocol::registry::{
    InjectAt, Registry, RegistryError, SecretSource, https_url_host, split_host,
};
use thiserror::Error;

use crate::inject::{
    request_policy::{PolicyError, RequestPolicy},
    scrub::Scrubber,
};
use parking_lot::RwLock;

/// Why a registry could not be loaded.
#[derive(Debug, Error)]
pub enum LoadError {
    #[error("failed to read porter registry {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid porter registry {path}")]
    Registry {
        path: PathBuf,
        #[source]
        source: RegistryError,
    },
    #[error("clis.{cli}.{field}: failed to read {path}")]
    SecretFile {
        cli: String,
        field: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("clis.{cli}.{field}: {name} is not set in porter's environment")]
    SecretEnv {
        cli: String,
        field: &'static str,
        name: String,
    },
    #[error("clis.{cli}.requests")]
    Requests {
        cli: String,
        #[source]
        source: PolicyError,
    },
    #[error("clis.{cli}.{field}: the secret is empty")]
    EmptySecret { cli: String, field: &'static str },
}

/// OAuth 2.0 settings of one credential, resolved.
#[derive(Debug)]
pub struct LoadedOAuth2 {
    pub token_url: String,
    /// `(host, port)` and path of the token endpoint (Porter answers requests there).
    pub token_host: (String, u16),
    pub token_path: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    pub placeholder_ttl: std::time::Duration,
}

/// One credential ready to inject.
#[derive(Debug)]
pub struct LoadedEntry {
    pub name: String,
    pub hosts: Vec<(String, u16)>,
    /// The secret (for OAuth 2.0: the refresh token).
    pub secret: String,
    pub inject: Vec<InjectAt>,
    pub placeholder_env: Vec<String>,
    pub git: bool,
    pub policy: RequestPolicy,
    pub oauth2: Option<LoadedOAuth2>,
}

impl LoadedEntry {
    /// Whether the entry may reach `host:port`.
    pub fn allows_host(&self, host: &str, port: u16) -> bool {
        self.hosts
            .iter()
            .any(|(allowed, allowed_port)| allowed == host && *allowed_port == port)
    }
}

/// A whole registry ready to serve.
#[derive(Debug, Default)]
pub struct LoadedRegistry {
    pub entries: HashMap<String, Arc<LoadedEntry>>,
    /// Which entry owns each host (a host carries one credential).
    by_host: HashMap<(String, u16), Arc<LoadedEntry>>,
    /// Every secret in every encoding: scrubbed from responses.
    pub scrubber: Arc<Scrubber>,
}

impl LoadedRegistry {
    /// Resolves a parsed registry. `lookup` reads Porter's own environment (injected so
    /// tests need not mutate the process environment).
    pub fn resolve(
        registry: Registry,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, LoadError> {
        let mut entries = HashMap::new();
        let mut by_host = HashMap::new();
        let mut secrets = Vec::new();
        for (name, entry) in registry.clis {
            let secret = resolve_secret(&name, "secret", &entry.secret, lookup)?;
            let oauth2 = match &entry.oauth2 {
                None => None,
                Some(oauth2) => {
                    let token_host = https_url_host(&oauth2.token_url).expect("checked at parse");
                    let after_scheme = &oauth2.token_url["https://".len()..];
                    let token_path = after_scheme
                        .find('/')
                        .map_or("/", |start| &after_scheme[start..]);
                    let token_path = token_path
                        .split(['?', '#'])
                        .next()
                        .unwrap_or("/")
                        .to_owned();
                    let client_secret = oauth2
                        .client_secret
                        .as_ref()
                        .map(|source| resolve_secret(&name, "oauth2.clientSecret", source, lookup))
                        .transpose()?;
                    secrets.extend(client_secret.clone());
                    Some(LoadedOAuth2 {
                        token_url: oauth2.token_url.clone(),
                        token_host,
                        token_path,
                        client_id: oauth2.client_id.clone(),
                        client_secret,
                        placeholder_ttl: std::time::Duration::from_secs(
                            oauth2
                                .placeholder_ttl_seconds
                                .unwrap_or(300)
                                .clamp(30, 3600),
                        ),
                    })
                }
            };
            secrets.push(secret.clone());
            let loaded = Arc::new(LoadedEntry {
                name: name.clone(),
                hosts: entry
                    .hosts
                    .iter()
                    .filter_map(|host| split_host(host))
                    .collect(),
                secret,
                inject: entry.inject_at(),
                placeholder_env: entry.placeholder_env.clone(),
                git: entry.git,
                policy: RequestPolicy::compile(&entry.requests).map_err(|source| {
                    LoadError::Requests {
                        cli: name.clone(),
                        source,
                    }
                })?,
                oauth2,
            });
            for host in &loaded.hosts {
                by_host.insert(host.clone(), loaded.clone());
            }
            entries.insert(name, loaded);
        }
        Ok(Self {
            entries,
            by_host,
            scrubber: Arc::new(Scrubber::new(&secrets)),
        })
    }

    /// Reads, parses and resolves the registry file.
    pub fn load(path: &Path, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, LoadError> {
        let text = read_config_file(path).map_err(|source| LoadError::Read {
            path: path.to_owned(),
            source,
        })?;
        let registry = Registry::from_json(&text).map_err(|source| LoadError::Registry {
            path: path.to_owned(),
            source,
        })?;
        Self::resolve(registry, lookup)
    }

    /// The credential that owns `host:port`.
    pub fn entry_for_host(&self, host: &str, port: u16) -> Option<&Arc<LoadedEntry>> {
        self.by_host.get(&(host.to_owned(), port))
    }

    /// Every credential's name, and whether it needs an access placeholder (OAuth 2.0).
    pub fn credentials(&self) -> impl Iterator<Item = (String, bool)> + '_ {
        self.entries
            .iter()
            .map(|(name, entry)| (name.clone(), entry.oauth2.is_some()))
    }
}

fn resolve_secret(
    cli: &str,
    field: &'static str,
    source: &SecretSource,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, LoadError> {
    let mut value = match source {
        SecretSource::Value(value) => value.clone(),
        SecretSource::Env(name) => lookup(name).ok_or_else(|| LoadError::SecretEnv {
            cli: cli.to_owned(),
            field,
            name: name.clone(),
        })?,
        SecretSource::File(path) => {
            read_config_file(Path::new(path)).map_err(|source| LoadError::SecretFile {
                cli: cli.to_owned(),
                field,
                path: path.clone(),
                source,
            })?
        }
    };
    // Secret files written by `echo` end in a newline that is not part of the value.
    while value.ends_with(['\n', '\r']) {
        value.pop();
    }
    if value.is_empty() {
        return Err(LoadError::EmptySecret {
            cli: cli.to_owned(),
            field,
        });
    }
    Ok(value)
}

/// Largest registry or secret file read.
pub const MAX_CONFIG_FILE_BYTES: u64 = 4 << 20;

/// Reads a registry or secret file: a regular file (after symlinks, which a
/// Kubernetes ConfigMap or Secret volume uses) of at most [`MAX_CONFIG_FILE_BYTES`] of
/// UTF-8. Opened with `O_NONBLOCK`, so a FIFO put in its place cannot hang Porter in
/// `open`; `fstat` on the open descriptor then refuses anything but a regular file
/// (FIFO, device, directory) before a byte is read, and the read is bounded in case
/// the file grows meanwhile.
pub fn read_config_file(path: &Path) -> std::io::Result<String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let too_large = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {MAX_CONFIG_FILE_BYTES} bytes"),
        )
    };
    if metadata.len() > MAX_CONFIG_FILE_BYTES {
        return Err(too_large());
    }
    let mut text = String::new();
    file.take(MAX_CONFIG_FILE_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_CONFIG_FILE_BYTES {
        return Err(too_large());
    }
    Ok(text)
}

/// The registry currently served, replaced atomically on reload.
#[derive(Debug, Default)]
pub struct RegistryStore {
    current: RwLock<Arc<LoadedRegistry>>,
}

impl RegistryStore {
    /// A store serving `registry`.
    pub fn new(registry: LoadedRegistry) -> Self {
        Self {
            current: RwLock::new(Arc::new(registry)),
        }
    }

    /// The registry to use for one request.
    pub fn snapshot(&self) -> Arc<LoadedRegistry> {
        self.current.read().clone()
    }

    /// Replaces the registry.
    pub fn replace(&self, registry: LoadedRegistry) {
        *self.current.write() = Arc::new(registry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_sources_are_resolved_and_scrubbed() {
        let directory = tempfile::tempdir().unwrap();
        let secret_file = directory.path().join("token");
        std::fs::write(&secret_file, "file-secret-value\n").unwrap();
        let registry = Registry::from_json(&format!(
            r#"{{"clis":{{"gh":{{"hosts":["api.github.com"],"secret":{{"file":"{}"}}}},
                "jira":{{"hosts":["jira.example"],"secret":{{"env":"JIRA_TOKEN"}}}}}}}}"#,
            secret_file.display()
        ))
        .unwrap();
        let loaded = LoadedRegistry::resolve(registry, &|name| {
            (name == "JIRA_TOKEN").then(|| "passed-through".to_owned())
        })
        .unwrap();
        assert_eq!(loaded.entries["gh"].secret, "file-secret-value");
        assert_eq!(loaded.entries["jira"].secret, "passed-through");
        assert_eq!(
            loaded.entry_for_host("api.github.com", 443).unwrap().name,
            "gh"
        );
        assert!(loaded.entry_for_host("api.github.com", 8443).is_none());
        let mut body = b"a file-secret-value b".to_vec();
        loaded.scrubber.scrub_in_place(&mut body);
        assert!(!String::from_utf8_lossy(&body).contains("file-secret-value"));
    }

    #[test]
    fn only_bounded_regular_files_are_read_and_a_fifo_never_blocks() {
        let directory = tempfile::tempdir().unwrap();
        let large = directory.path().join("large.json");
        std::fs::write(&large, vec![b' '; MAX_CONFIG_FILE_BYTES as usize + 1]).unwrap();
        let fifo = directory.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        for path in [Path::new("/dev/zero"), directory.path(), &large, &fifo] {
            assert!(read_config_file(path).is_err(), "{}", path.display());
            assert!(matches!(
                LoadedRegistry::load(path, &|_| None),
                Err(LoadError::Read { .. })
            ));
        }
        let small = directory.path().join("registry.json");
        std::fs::write(&small, "{}").unwrap();
        assert_eq!(read_config_file(&small).unwrap(), "{}");
    }

    #[test]
    fn a_missing_or_empty_secret_fails_the_load_naming_the_field() {
        let registry = Registry::from_json(
            r#"{"clis":{"gh":{"hosts":["a.example"],"secret":{"env":"NOPE"}}}}"#,
        )
        .unwrap();
        let error = LoadedRegistry::resolve(registry, &|_| None).unwrap_err();
        assert_eq!(
            error.to_string(),
            "clis.gh.secret: NOPE is not set in porter's environment"
        );
        let registry = Registry::from_json(
            r#"{"clis":{"gh":{"hosts":["a.example"],"secret":{"env":"EMPTY"}}}}"#,
        )
        .unwrap();
        let error = LoadedRegistry::resolve(registry, &|_| Some("\n".into())).unwrap_err();
        assert_eq!(error.to_string(), "clis.gh.secret: the secret is empty");
    }
}
