//! The loaded registry: each CLI's compiled policy and resolved environment, the set of
//! credential values to redact, and the rate limiters; swapped whole on reload.
//!
//! Reads the registry file, `envFromFiles` files and Porter's own environment; never
//! writes anything.

use std::{
    collections::{BTreeMap, HashMap},
    num::NonZeroU32,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, RwLock},
};

use governor::{DefaultDirectRateLimiter, Quota};
use porter_protocol::registry::{CliEntry, RateLimit, Registry, RegistryError};
use thiserror::Error;

use crate::{
    inject::EntryInjection,
    policy::{CliPolicy, PolicyError},
    redact::Secrets,
};

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
    #[error("clis.{cli}")]
    Policy {
        cli: String,
        #[source]
        source: PolicyError,
    },
    #[error("clis.{cli}.envFromFiles.{name}: failed to read {path}")]
    EnvFile {
        cli: String,
        name: String,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("clis.{cli}.envPassthrough: {name} is not set in porter's environment")]
    Passthrough { cli: String, name: String },
}

/// One CLI ready to run.
#[derive(Debug)]
pub struct LoadedCli {
    pub entry: CliEntry,
    pub policy: CliPolicy,
    /// Declared variables with their resolved values (credentials).
    pub environment: BTreeMap<String, String>,
    /// Injection mode: hosts, injected variables and request policy (`None`: env mode).
    pub injection: Option<Arc<EntryInjection>>,
}

/// A whole registry ready to serve.
#[derive(Debug, Default)]
pub struct LoadedRegistry {
    pub global_rate_limit: Option<RateLimit>,
    pub clis: HashMap<String, LoadedCli>,
    /// Every credential value of every CLI: output of any call is redacted of all.
    pub secrets: Arc<Secrets>,
}

impl LoadedRegistry {
    /// Resolves a parsed registry. `lookup` reads Porter's own environment (injected so
    /// tests need not mutate the process environment).
    pub fn resolve(
        registry: Registry,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, LoadError> {
        let mut clis = HashMap::new();
        let mut secret_values = Vec::new();
        for (name, entry) in registry.clis {
            let policy = CliPolicy::compile(&name, &entry).map_err(|source| LoadError::Policy {
                cli: name.clone(),
                source,
            })?;
            let mut environment = entry.env.clone();
            for (variable, path) in &entry.env_from_files {
                // Bounded like the registry: a path pointing at a device is refused.
                let mut value =
                    read_config_file(Path::new(path)).map_err(|source| LoadError::EnvFile {
                        cli: name.clone(),
                        name: variable.clone(),
                        path: path.clone(),
                        source,
                    })?;
                // Secret files written by `echo` end in a newline that is not part of the value.
                if value.ends_with('\n') {
                    value.pop();
                }
                environment.insert(variable.clone(), value);
            }
            for variable in &entry.env_passthrough {
                let value = lookup(variable).ok_or_else(|| LoadError::Passthrough {
                    cli: name.clone(),
                    name: variable.clone(),
                })?;
                environment.insert(variable.clone(), value);
            }
            secret_values.extend(environment.values().cloned());
            let injection = EntryInjection::compile(&entry);
            clis.insert(
                name,
                LoadedCli {
                    entry,
                    policy,
                    environment,
                    injection,
                },
            );
        }
        Ok(Self {
            global_rate_limit: registry.global_rate_limit,
            clis,
            secrets: Arc::new(Secrets::new(secret_values)),
        })
    }

    /// One warning per registered CLI whose binary Porter could not run (missing, not a
    /// file, not executable): calls to it would fail only when made.
    pub fn warn_unrunnable_binaries(&self) {
        for (name, cli) in &self.clis {
            if let Err(error) = crate::manage::check_binary(&cli.entry.bin) {
                tracing::warn!(
                    cli = %name,
                    "registered CLI cannot run: {error}; calls to it fail until it is installed"
                );
            }
        }
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
}

/// Largest registry or tokens file read.
pub const MAX_CONFIG_FILE_BYTES: u64 = 4 << 20;

/// Reads a registry or tokens file: a regular file (after symlinks, which a Kubernetes
/// ConfigMap uses) of at most [`MAX_CONFIG_FILE_BYTES`] of UTF-8. A device or FIFO
/// (`/dev/zero`) or a huge file is refused before it is read, and the read itself is
/// bounded in case the file grows meanwhile.
pub fn read_config_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
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

    /// The registry to use for one call (a call keeps its snapshot across a reload).
    pub fn snapshot(&self) -> Arc<LoadedRegistry> {
        self.current.read().expect("registry lock").clone()
    }

    /// Replaces the registry.
    pub fn replace(&self, registry: LoadedRegistry) {
        *self.current.write().expect("registry lock") = Arc::new(registry);
    }
}

type Limiter = Arc<DefaultDirectRateLimiter>;

/// Token-bucket limiters, kept across registry reloads while a CLI's limit is unchanged
/// (so a reload cannot be used to reset a limit).
#[derive(Debug, Default)]
pub struct RateLimits {
    global: Mutex<Option<(RateLimit, Limiter)>>,
    per_cli: Mutex<HashMap<String, (RateLimit, Limiter)>>,
}

/// Which limit refused a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitHit {
    Cli,
    Global,
}

fn limiter(limit: RateLimit) -> Option<Limiter> {
    let per_minute = NonZeroU32::new(limit.per_minute)?;
    let burst = NonZeroU32::new(limit.burst.max(1)).expect("at least one");
    Some(Arc::new(DefaultDirectRateLimiter::direct(
        Quota::per_minute(per_minute).allow_burst(burst),
    )))
}

fn current(slot: &mut Option<(RateLimit, Limiter)>, limit: RateLimit) -> Option<Limiter> {
    match slot {
        Some((existing, limiter)) if *existing == limit => Some(limiter.clone()),
        _ => {
            // `perMinute: 0` means no calls at all.
            let fresh = limiter(limit)?;
            *slot = Some((limit, fresh.clone()));
            Some(fresh)
        }
    }
}

impl RateLimits {
    /// Takes one call from the CLI's bucket and the global bucket.
    pub fn check(
        &self,
        cli: &str,
        cli_limit: Option<RateLimit>,
        global_limit: Option<RateLimit>,
    ) -> Result<(), LimitHit> {
        if let Some(limit) = cli_limit {
            let mut per_cli = self.per_cli.lock().expect("rate limit lock");
            let mut slot = per_cli.remove(cli);
            let limiter = current(&mut slot, limit);
            if let Some(slot) = slot {
                per_cli.insert(cli.to_owned(), slot);
            }
            match limiter {
                Some(limiter) if limiter.check().is_ok() => {}
                _ => return Err(LimitHit::Cli),
            }
        }
        if let Some(limit) = global_limit {
            let limiter = current(&mut self.global.lock().expect("rate limit lock"), limit);
            match limiter {
                Some(limiter) if limiter.check().is_ok() => {}
                _ => return Err(LimitHit::Global),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_sources_are_resolved_and_become_secrets() {
        let directory = tempfile::tempdir().unwrap();
        let secret_file = directory.path().join("token");
        std::fs::write(&secret_file, "file-secret-value\n").unwrap();
        let registry = Registry::from_json(&format!(
            r#"{{"clis":{{"gh":{{"bin":"/usr/bin/gh","env":{{"GH_HOST":"github.example"}},
                "envFromFiles":{{"GH_TOKEN":"{}"}},"envPassthrough":["GH_ENTERPRISE_TOKEN"]}}}}}}"#,
            secret_file.display()
        ))
        .unwrap();
        let loaded = LoadedRegistry::resolve(registry, &|name| {
            (name == "GH_ENTERPRISE_TOKEN").then(|| "passed-through".to_owned())
        })
        .unwrap();
        let gh = &loaded.clis["gh"];
        assert_eq!(gh.environment["GH_TOKEN"], "file-secret-value");
        assert_eq!(gh.environment["GH_ENTERPRISE_TOKEN"], "passed-through");
        assert_eq!(
            loaded
                .secrets
                .redact_str("file-secret-value passed-through"),
            "[redacted] [redacted]"
        );
    }

    #[test]
    fn only_bounded_regular_files_are_read() {
        let directory = tempfile::tempdir().unwrap();
        let large = directory.path().join("large.json");
        std::fs::write(&large, vec![b' '; MAX_CONFIG_FILE_BYTES as usize + 1]).unwrap();
        for path in [Path::new("/dev/zero"), directory.path(), &large] {
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
    fn a_missing_passthrough_variable_fails_the_load() {
        let registry = Registry::from_json(
            r#"{"clis":{"gh":{"bin":"/usr/bin/gh","envPassthrough":["NOPE"]}}}"#,
        )
        .unwrap();
        assert!(matches!(
            LoadedRegistry::resolve(registry, &|_| None),
            Err(LoadError::Passthrough { .. })
        ));
    }

    #[test]
    fn limits_refuse_past_the_burst_and_survive_an_unchanged_reload() {
        let limits = RateLimits::default();
        let limit = Some(RateLimit {
            per_minute: 1,
            burst: 2,
        });
        assert_eq!(limits.check("gh", limit, None), Ok(()));
        assert_eq!(limits.check("gh", limit, None), Ok(()));
        assert_eq!(limits.check("gh", limit, None), Err(LimitHit::Cli));
        assert_eq!(
            limits.check(
                "other",
                None,
                Some(RateLimit {
                    per_minute: 0,
                    burst: 1
                })
            ),
            Err(LimitHit::Global)
        );
    }
}
