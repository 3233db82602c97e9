//! Loads the rendered bot config, validates it, and hot-reloads it when the file changes.
//!
//! An invalid new file is refused with one log line and the last good config stays in
//! force. Changes are noticed two ways: every message checks the file's fingerprint
//! (a `stat`, so a new Contact applies to their very next message), and a background
//! poll catches changes while the bot is idle. Polling rather than inotify because a
//! Kubernetes ConfigMap volume swaps a `..data` symlink, which inotify on the file
//! itself does not see. Reads only the config file; touches nothing else.

use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use parking_lot::Mutex;
use saint_config::{BotConfig, ConfigError, ErrorChain};
use tokio_util::sync::CancellationToken;

/// Why a config file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigLoadError {
    #[error("failed to read config {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to load config {path}")]
    Invalid { path: PathBuf, source: ConfigError },
}

/// What the file looked like when last read. `stat` follows the ConfigMap symlinks, so
/// an atomic swap changes the inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fingerprint {
    inode: u64,
    length: u64,
    modified_nanos: i128,
    changed_nanos: i128,
}

fn fingerprint(path: &Path) -> std::io::Result<Fingerprint> {
    let metadata = std::fs::metadata(path)?;
    Ok(Fingerprint {
        inode: metadata.ino(),
        length: metadata.len(),
        modified_nanos: i128::from(metadata.mtime()) * 1_000_000_000
            + i128::from(metadata.mtime_nsec()),
        changed_nanos: i128::from(metadata.ctime()) * 1_000_000_000
            + i128::from(metadata.ctime_nsec()),
    })
}

/// Reads and validates a config file.
pub fn load_file(path: &Path) -> Result<BotConfig, ConfigLoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigLoadError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    BotConfig::from_json(&text).map_err(|source| ConfigLoadError::Invalid {
        path: path.to_path_buf(),
        source,
    })
}

/// The result of one reload check.
#[derive(Debug, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// The file did not change.
    Unchanged,
    /// A new valid config is in force.
    Reloaded,
    /// The file changed but was refused; the last good config stays.
    Refused(String),
}

struct Loaded {
    config: Arc<BotConfig>,
    // The fingerprint of the last file we *looked at*, good or bad, so a bad file is
    // refused (and logged) once rather than on every message.
    seen: Option<Fingerprint>,
    /// Why the file as it is now was refused (`None`: it is the config in force).
    refused: Option<String>,
}

/// A change applied to every config read from the file (and to nothing on disk): how
/// `saint-agent up` points a bot at the model it found.
pub type Overlay = Arc<dyn Fn(&mut BotConfig) + Send + Sync>;

/// The config in force, shared by everything that needs it.
pub struct ConfigStore {
    path: PathBuf,
    overlay: Option<Overlay>,
    loaded: Mutex<Loaded>,
    reloads: AtomicU64,
    refusals: AtomicU64,
}

impl ConfigStore {
    /// Loads the file; fails if the first config is unreadable or invalid.
    pub fn load(path: impl Into<PathBuf>) -> Result<Self, ConfigLoadError> {
        Self::load_with(path, None)
    }

    /// Loads the file with `overlay` applied to it now and on every reload.
    pub fn load_with(
        path: impl Into<PathBuf>,
        overlay: Option<Overlay>,
    ) -> Result<Self, ConfigLoadError> {
        let path = path.into();
        let seen = fingerprint(&path).ok();
        let mut config = load_file(&path)?;
        if let Some(overlay) = &overlay {
            overlay(&mut config);
        }
        Ok(Self {
            path,
            overlay,
            loaded: Mutex::new(Loaded {
                config: Arc::new(config),
                seen,
                refused: None,
            }),
            reloads: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
        })
    }

    /// The file this store reads.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The config in force, after reloading it if the file changed.
    pub fn current(&self) -> Arc<BotConfig> {
        self.reload_if_changed();
        self.last_good()
    }

    /// The config in force, without looking at the file.
    pub fn last_good(&self) -> Arc<BotConfig> {
        self.loaded.lock().config.clone()
    }

    /// Why the file on disk was refused, until it is fixed: the last good config is in
    /// force meanwhile, which whoever edited the file must not miss (the chat page
    /// shows it).
    pub fn refused(&self) -> Option<String> {
        self.reload_if_changed();
        self.loaded.lock().refused.clone()
    }

    /// How many reloads succeeded and were refused since start.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.reloads.load(Ordering::Relaxed),
            self.refusals.load(Ordering::Relaxed),
        )
    }

    /// Reloads the file if its fingerprint changed.
    pub fn reload_if_changed(&self) -> ReloadOutcome {
        let now = fingerprint(&self.path).ok();
        let mut loaded = self.loaded.lock();
        if now == loaded.seen {
            return ReloadOutcome::Unchanged;
        }
        loaded.seen = now;
        match load_file(&self.path) {
            Ok(mut config) => {
                if let Some(overlay) = &self.overlay {
                    overlay(&mut config);
                }
                loaded.refused = None;
                if *loaded.config == config {
                    return ReloadOutcome::Unchanged;
                }
                if loaded.config.telemetry != config.telemetry {
                    // The exporter is set up once, before the runtime starts.
                    tracing::warn!(
                        "telemetry changed: traces go where they went at start until the \
                         agent restarts"
                    );
                }
                if loaded.config.mcp != config.mcp {
                    // Servers are listed once per start (mcp_servers.rs); a new
                    // section would otherwise look applied while the old tools stay.
                    tracing::warn!(
                        "mcp.servers changed: the tools of the servers as they were at start \
                         stay until the agent restarts"
                    );
                }
                loaded.config = Arc::new(config);
                self.reloads.fetch_add(1, Ordering::Relaxed);
                tracing::info!(path = %self.path.display(), "config reloaded");
                ReloadOutcome::Reloaded
            }
            Err(error) => {
                self.refusals.fetch_add(1, Ordering::Relaxed);
                let message = ErrorChain(&error).to_string();
                tracing::error!(error = %message, "refused new config; keeping the last good one");
                loaded.refused = Some(message.clone());
                ReloadOutcome::Refused(message)
            }
        }
    }

    /// Polls the file every `interval` until `cancel` fires.
    pub fn spawn_watcher(
        self: Arc<Self>,
        interval: Duration,
        cancel: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = ticker.tick() => {}
                }
                let store = self.clone();
                // A stat and possibly a read: keep it off the async workers.
                let _ = tokio::task::spawn_blocking(move || store.reload_if_changed()).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = include_str!("../config/tests/fixtures/acme-bot-config.json");

    #[test]
    fn invalid_change_is_refused_once_and_last_good_config_stays() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("bot-config.json");
        std::fs::write(&path, FIXTURE).unwrap();
        let store = ConfigStore::load(&path).unwrap();
        assert_eq!(store.reload_if_changed(), ReloadOutcome::Unchanged);

        std::fs::write(
            &path,
            FIXTURE.replace(
                "\"defaultRole\": \"external\"",
                "\"defaultRole\": \"nobody\"",
            ),
        )
        .unwrap();
        assert!(
            matches!(store.reload_if_changed(), ReloadOutcome::Refused(message) if message.contains("defaultRole"))
        );
        assert!(
            store
                .refused()
                .is_some_and(|message| message.contains("defaultRole"))
        );
        assert_eq!(store.current().default_role, "external");
        assert_eq!(
            store.reload_if_changed(),
            ReloadOutcome::Unchanged,
            "a bad file is refused once"
        );

        let renamed = FIXTURE.replace("\"name\": \"Ivan\"", "\"name\": \"Ivan Horvat\"");
        std::fs::write(&path, renamed).unwrap();
        assert_eq!(store.reload_if_changed(), ReloadOutcome::Reloaded);
        assert_eq!(store.refused(), None, "a fixed file clears the refusal");
        let config = store.current();
        assert_eq!(
            config
                .contacts
                .iter()
                .find(|contact| contact.slug == "ivan")
                .unwrap()
                .name,
            "Ivan Horvat"
        );
        assert_eq!(store.counts(), (1, 1));
    }

    #[test]
    fn first_load_of_an_invalid_file_fails_with_the_path() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("bot-config.json");
        std::fs::write(&path, "{").unwrap();
        let error = ConfigStore::load(&path).err().unwrap().to_string();
        assert!(
            error.starts_with("failed to load config") && error.contains("bot-config.json"),
            "{error}"
        );
    }
}
