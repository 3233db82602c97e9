//! `saint-sandbox`: where the `exec` tool runs commands, and one-machine mode's Porter.
//!
//! A [`Sandbox`] backend keeps one warm sandbox per [`ScopeKey`] (session, agent or shared), each running
//! `saint-sandbox-runner`, and runs commands in it over the runner's unix socket.
//!
//! Backends: [`local`] (bubblewrap on this machine) and [`kubernetes`] (a Job per
//! scope). Neither ever runs a command outside a sandbox: if no sandbox can be had,
//! `exec` fails with an error (fail closed).

pub mod backend;
pub mod kubernetes;
pub mod local;
pub mod local_porter;
pub mod porter_control;
pub mod runner_client;
pub mod seccomp;
pub mod state_lock;
pub mod view;

use parking_lot::Mutex;
use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use futures::{future::BoxFuture, stream::BoxStream};
pub use porter_protocol::{
    Request as RunnerRequest, browser as runner_browser, process as runner_process,
};
use saint_config::SandboxScope;
use sha2::{Digest, Sha256};
pub use view::View;

/// Files copied from the real workspace into a new sandbox's `/workspace`: bootstrap
/// files and skills; never memory, config or data.
pub fn seed_entries() -> Vec<String> {
    let mut entries: Vec<String> = saint_config::BOOTSTRAP_FILES
        .iter()
        .map(|name| name.to_string())
        .collect();
    entries.push("skills".to_string());
    entries
}

/// Which sandbox a command runs in: one per session, one for the bot, or one shared —
/// always per view. Two callers whose roles show them different parts of the workspace
/// never share a sandbox (its writable `/workspace` would carry one person's files to
/// the other), whatever the configured scope.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScopeKey {
    label: &'static str,
    id: String,
}

/// Whose view of the workspace a sandbox shows: the role, and the person when the
/// role's path rules name them (`<self>`, or an internal role's own folder).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Viewer<'a> {
    pub role: &'a str,
    pub person: Option<&'a str>,
}

impl ScopeKey {
    /// The key for a call in `session_key` by `viewer` under the configured scope.
    /// Session keys hold channel identities (phone numbers) and people's slugs, so only
    /// a hash of them is used in names, labels and paths.
    pub fn for_caller(scope: SandboxScope, session_key: &str, viewer: &Viewer<'_>) -> Self {
        let mut hasher = Sha256::new();
        let (label, prefix) = match scope {
            SandboxScope::Session => {
                hasher.update((session_key.len() as u64).to_be_bytes());
                hasher.update(session_key.as_bytes());
                ("session", "s")
            }
            SandboxScope::Agent => ("agent", "a"),
            SandboxScope::Shared => ("shared", "x"),
        };
        // Length-prefixed parts: no two different viewers hash the same bytes.
        hasher.update([0]);
        for part in [Some(viewer.role), viewer.person] {
            let part = part.unwrap_or("");
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part.as_bytes());
        }
        let digest = hex::encode(hasher.finalize());
        Self {
            label,
            id: format!("{prefix}-{}", &digest[..16]),
        }
    }

    /// A key whose id is as long as any key's, for sizing paths built from ids.
    pub(crate) fn longest() -> Self {
        Self::for_caller(
            SandboxScope::Session,
            "",
            &Viewer {
                role: "",
                person: None,
            },
        )
    }

    /// A short id safe in file names and Kubernetes names/labels (`[a-z0-9-]`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The scope's label value (`session`, `agent`, `shared`).
    pub fn scope_label(&self) -> &'static str {
        self.label
    }
}

/// One command for a sandbox.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecRequest {
    /// The command line (run as `sh -c`).
    pub command: String,
    /// Working directory inside the sandbox (`/workspace/...` or `/agent/...`).
    pub cwd: String,
    /// The command's environment beyond PATH/HOME/LANG. Never credentials; at most
    /// the command's own Porter token.
    pub env: BTreeMap<String, String>,
    /// When the runner kills the command's process group.
    pub timeout: Duration,
    /// Bytes for the command's stdin (none: empty stdin).
    pub stdin: Option<Vec<u8>>,
}

/// What a running command produces, in order; the stream ends after `Exit` or
/// `TimedOut`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecEvent {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// The command ended with this status (128 + n for signal n).
    Exit(i32),
    /// The runner killed the command at its timeout.
    TimedOut,
}

/// A runner's answer to a background-process request.
#[derive(Debug)]
pub struct ProcessAnswer {
    /// New stdout since the last poll (`poll`, `kill`).
    pub stdout: Vec<u8>,
    /// New stderr since the last poll.
    pub stderr: Vec<u8>,
    /// What the runner says about the process(es).
    pub reply: runner_process::ProcessReply,
    /// The hold on the sandbox the request ran under: whoever starts a process keeps it
    /// while the process may still run, so the sandbox is not reaped under it.
    pub lease: Lease,
}

/// A runner's answer to a browser action.
#[derive(Debug)]
pub struct BrowserAnswer {
    /// The page's text (`read`) or a PNG (`screenshot`); empty otherwise.
    pub data: Vec<u8>,
    /// Where the page stands.
    pub reply: runner_browser::BrowserReply,
}

/// The events of one command. Dropping it early disconnects, and the runner kills
/// the command.
pub type ExecStream = BoxStream<'static, Result<ExecEvent, SandboxError>>;

/// Why a sandbox could not be had or a command could not run.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("failed to start sandbox: {0}")]
    Start(String),
    #[error("failed to start sandbox: not ready after {seconds} s ({detail})")]
    NotReady { seconds: u64, detail: String },
    #[error("failed to reach sandbox runner at {path}")]
    Unreachable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to talk to sandbox runner: {0}")]
    Protocol(String),
    #[error("sandbox runner refused the command ({code}): {message}")]
    Refused { code: &'static str, message: String },
    #[error("failed to manage sandbox: {0}")]
    Backend(String),
}

/// A warm sandbox, leased for one command. While a lease lives the sandbox is not
/// reaped; dropping it marks the sandbox used now.
pub struct SandboxHandle {
    /// The runner socket as the agent sees it.
    pub socket: PathBuf,
    /// The token the runner requires.
    pub token: String,
    /// Where the agent binds this sandbox's browser egress sockets, as the agent sees
    /// it: the agent's own directory, outside the sandbox's writable runner directory,
    /// which the sandbox sees read-only at
    /// [`saint_config::sandbox_contract::SANDBOX_BROWSER_MOUNT_PATH`]. `None` when the
    /// Job template has no such mount (an operator older than the browser).
    pub browser_sockets: Option<PathBuf>,
    /// Keeps the sandbox busy until the command ends.
    pub lease: Lease,
}

/// A backend that keeps sandboxes warm per scope and reaps idle ones.
pub trait Sandbox: Send + Sync {
    /// A warm sandbox for `scope`, started (and seeded) if none is running, replaced if
    /// the old one died.
    /// A sandbox whose `/agent` shows a different view than `view` is replaced.
    fn ensure<'a>(
        &'a self,
        scope: &'a ScopeKey,
        view: &'a View,
    ) -> BoxFuture<'a, Result<SandboxHandle, SandboxError>>;

    /// Destroys the sandbox of `scope`, if any (its runner is unreachable).
    fn discard<'a>(&'a self, scope: &'a ScopeKey) -> BoxFuture<'a, Result<(), SandboxError>>;

    /// Destroys sandboxes idle longer than the idle timeout; returns how many.
    fn reap_idle(&self) -> BoxFuture<'_, Result<usize, SandboxError>>;

    /// Destroys every sandbox and waits until they are gone (agent shutdown, after
    /// running turns have drained); returns how many. By default none: sandboxes that
    /// outlive the agent are reaped by the next one.
    fn shutdown(&self) -> BoxFuture<'_, usize> {
        Box::pin(async { 0 })
    }

    /// Runs one command in the scope's sandbox, streaming its output. A sandbox whose
    /// runner cannot be reached is discarded and replaced once.
    fn exec<'a>(
        &'a self,
        scope: &'a ScopeKey,
        view: &'a View,
        request: ExecRequest,
    ) -> BoxFuture<'a, Result<ExecStream, SandboxError>> {
        Box::pin(async move {
            let handle = self.ensure(scope, view).await?;
            match runner_client::start(handle, &request).await {
                Err(SandboxError::Unreachable { .. }) => {
                    self.discard(scope).await?;
                    let handle = self.ensure(scope, view).await?;
                    runner_client::start(handle, &request).await
                }
                other => other,
            }
        })
    }
}

/// Sends one background-process request to the runner of `scope`'s sandbox (a `spawn`
/// starting it if none runs). A dead sandbox is replaced once for a `spawn` only: the
/// processes other requests name died with it, which the new runner says.
pub fn process<'a>(
    sandbox: &'a dyn Sandbox,
    scope: &'a ScopeKey,
    view: &'a View,
    request: RunnerRequest,
) -> BoxFuture<'a, Result<ProcessAnswer, SandboxError>> {
    Box::pin(async move {
        let handle = sandbox.ensure(scope, view).await?;
        let retry = matches!(request, RunnerRequest::Spawn(_)).then(|| request.clone());
        match (runner_client::process(handle, request).await, retry) {
            (Err(SandboxError::Unreachable { .. }), Some(request)) => {
                sandbox.discard(scope).await?;
                let handle = sandbox.ensure(scope, view).await?;
                runner_client::process(handle, request).await
            }
            (other, _) => other,
        }
    })
}

/// Use tracking shared by a warm sandbox and its leases.
#[derive(Debug)]
pub struct Activity {
    in_flight: AtomicUsize,
    last_used: Mutex<Instant>,
}

impl Activity {
    /// A fresh, unused sandbox.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            in_flight: AtomicUsize::new(0),
            last_used: Mutex::new(Instant::now()),
        })
    }

    /// Marks one more command running.
    pub fn lease(self: &Arc<Self>) -> Lease {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        *self.last_used.lock() = Instant::now();
        Lease(Some(self.clone()))
    }

    /// Whether the sandbox ran nothing for `idle_timeout` and runs nothing now.
    pub fn is_idle(&self, idle_timeout: Duration, now: Instant) -> bool {
        self.in_flight.load(Ordering::SeqCst) == 0
            && now.saturating_duration_since(*self.last_used.lock()) >= idle_timeout
    }
}

/// One running command's hold on its sandbox.
#[derive(Debug)]
pub struct Lease(Option<Arc<Activity>>);

impl Lease {
    /// A lease on nothing (for tests and one-off runners).
    pub fn detached() -> Self {
        Self(None)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(activity) = self.0.take() {
            *activity.last_used.lock() = Instant::now();
            activity.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Per-scope slots: each scope's sandbox is created under its own async lock, so two
/// commands of one session never start two sandboxes, and a slow start in one scope
/// does not hold up another.
pub struct Slots<T> {
    slots: Mutex<HashMap<ScopeKey, Arc<tokio::sync::Mutex<Option<T>>>>>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Self {
            slots: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> Slots<T> {
    /// The slot of `scope` (created empty on first use).
    pub fn slot(&self, scope: &ScopeKey) -> Arc<tokio::sync::Mutex<Option<T>>> {
        self.slots.lock().entry(scope.clone()).or_default().clone()
    }

    /// Every slot, for reaping.
    pub fn all(&self) -> Vec<(ScopeKey, Arc<tokio::sync::Mutex<Option<T>>>)> {
        self.slots
            .lock()
            .iter()
            .map(|(scope, slot)| (scope.clone(), slot.clone()))
            .collect()
    }
}

/// Reaps idle sandboxes every `every`, until the returned task is aborted.
pub fn spawn_reaper(sandbox: Arc<dyn Sandbox>, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(every);
        loop {
            interval.tick().await;
            match sandbox.reap_idle().await {
                Ok(0) => {}
                Ok(reaped) => tracing::info!(reaped, "reaped idle sandboxes"),
                Err(error) => {
                    tracing::warn!(error = %saint_config::ErrorChain(&error), "failed to reap idle sandboxes")
                }
            }
        }
    })
}

/// A random token (hex of 32 bytes from the kernel's CSPRNG).
/// A new browser egress socket's file name: random, so a command in the sandbox, which
/// can list the directory but not write it, cannot guess the next one either.
pub fn browser_socket_file_name() -> Result<String, SandboxError> {
    Ok(format!(
        "{}.sock",
        &random_token()?[..BROWSER_SOCKET_NAME_HEX]
    ))
}

/// Hex digits of randomness in a browser socket's name (80 bits).
const BROWSER_SOCKET_NAME_HEX: usize = 20;

/// The longest browser socket file name, for socket-path length checks.
pub const BROWSER_SOCKET_FILE_NAME_LENGTH: usize = BROWSER_SOCKET_NAME_HEX + ".sock".len();

pub fn random_token() -> Result<String, SandboxError> {
    use std::io::Read;
    let mut bytes = [0_u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .map_err(|error| SandboxError::Start(format!("failed to read random bytes: {error}")))?;
    Ok(hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_keys_hash_sessions_and_share_only_within_one_view() {
        let ana = Viewer {
            role: "owner",
            person: Some("acme-ana"),
        };
        let ivo = Viewer {
            role: "employee",
            person: Some("acme-ivo"),
        };
        let session = ScopeKey::for_caller(SandboxScope::Session, "whatsapp:+385911234567", &ana);
        let other = ScopeKey::for_caller(SandboxScope::Session, "email:marko@example.com", &ana);
        assert_ne!(session, other);
        assert!(
            session.id().starts_with("s-") && session.id().len() == 18,
            "{}",
            session.id()
        );
        assert!(
            !session.id().contains("385"),
            "the phone number must not appear"
        );
        assert_eq!(
            session,
            ScopeKey::for_caller(SandboxScope::Session, "whatsapp:+385911234567", &ana)
        );
        // Scope `agent` and `shared`: one sandbox per view, never one for everybody.
        for scope in [SandboxScope::Agent, SandboxScope::Shared] {
            let first = ScopeKey::for_caller(scope, "whatsapp:+385911234567", &ana);
            let second = ScopeKey::for_caller(scope, "email:other@example.com", &ana);
            assert_eq!(first, second);
            assert_ne!(
                first,
                ScopeKey::for_caller(scope, "whatsapp:+385911234567", &ivo)
            );
            let same_role_other_person = Viewer {
                role: "owner",
                person: Some("acme-marko"),
            };
            assert_ne!(
                first,
                ScopeKey::for_caller(scope, "x", &same_role_other_person)
            );
        }
        // A role change gives the same session another sandbox.
        assert_ne!(
            ScopeKey::for_caller(SandboxScope::Session, "http:ana", &ana),
            ScopeKey::for_caller(
                SandboxScope::Session,
                "http:ana",
                &Viewer {
                    role: "employee",
                    person: Some("acme-ana")
                }
            )
        );
        // Parts are length-prefixed: ("ab", "c") and ("a", "bc") differ.
        let split = |role, person| {
            ScopeKey::for_caller(
                SandboxScope::Agent,
                "x",
                &Viewer {
                    role,
                    person: Some(person),
                },
            )
        };
        assert_ne!(split("ab", "c"), split("a", "bc"));
        assert_eq!(
            ScopeKey::for_caller(SandboxScope::Agent, "x", &ivo).scope_label(),
            "agent"
        );
    }

    #[test]
    fn a_leased_sandbox_is_never_idle() {
        let activity = Activity::new();
        let lease = activity.lease();
        let later = Instant::now() + Duration::from_secs(3600);
        assert!(!activity.is_idle(Duration::from_secs(1), later));
        drop(lease);
        assert!(activity.is_idle(Duration::from_secs(1), later));
        assert!(!activity.is_idle(Duration::from_secs(1), Instant::now()));
    }
}
