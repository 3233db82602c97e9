//! The sandbox contract: the names the operator (Job template), the agent (Job builder,
//! runner client) and the sandbox runner must agree on — label keys, mount paths,
//! socket names and the runner's environment.
//!
//! Pure: constants, string building and parsing; no I/O. Each name is defined here once;
//! the three parties import it rather than spell it.

use std::{collections::BTreeMap, fmt, num::ParseIntError, path::Path, path::PathBuf};

use thiserror::Error;

use crate::DEFAULT_SANDBOX_IDLE_TIMEOUT_SECONDS;

/// `app.kubernetes.io/managed-by` of every object the operator renders, sandbox Jobs
/// included (the agent creates those from the operator's template); also the field
/// manager of every server-side apply.
pub const MANAGED_BY: &str = "saint-operator";

/// Label naming the bot an object belongs to.
pub const BOT_LABEL: &str = "saint.work/bot";
/// Label marking sandbox Jobs and their pods (value `"true"`).
pub const SANDBOX_LABEL: &str = "saint.work/sandbox";
/// Label holding a sandbox Job's lifetime scope (`session`, `agent`, `shared`).
pub const SANDBOX_SCOPE_LABEL: &str = "saint.work/sandbox-scope";
/// Label holding the key of the sandbox a Job serves (which session or view).
pub const SANDBOX_KEY_LABEL: &str = "saint.work/sandbox-key";
/// `app.kubernetes.io/component` of sandbox Jobs and pods.
pub const SANDBOX_COMPONENT: &str = "sandbox";

/// Labels on every object of `bot`, with its component (`agent`, `sandbox`, `config`, …).
pub fn labels(bot: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), "saint".to_string()),
        ("app.kubernetes.io/instance".to_string(), bot.to_string()),
        (
            "app.kubernetes.io/managed-by".to_string(),
            MANAGED_BY.to_string(),
        ),
        (
            "app.kubernetes.io/component".to_string(),
            component.to_string(),
        ),
        (BOT_LABEL.to_string(), bot.to_string()),
    ])
}

/// Labels of a sandbox Job and its pod before the agent adds scope and key: the
/// operator's template carries these, and the NetworkPolicy selects on a subset.
pub fn sandbox_labels(bot: &str) -> BTreeMap<String, String> {
    let mut labels = labels(bot, SANDBOX_COMPONENT);
    labels.insert(SANDBOX_LABEL.to_string(), "true".to_string());
    labels
}

/// The labels that select the bot's sandbox Jobs and pods.
pub fn sandbox_selector(bot: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (BOT_LABEL.to_string(), bot.to_string()),
        (SANDBOX_LABEL.to_string(), "true".to_string()),
    ])
}

/// [`sandbox_selector`] as a list call's label selector (`key=value,key=value`).
pub fn sandbox_label_selector(bot: &str) -> String {
    sandbox_selector(bot)
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Where a sandbox sees its writable scratch copy: the runner's default working
/// directory and `HOME`.
pub const SANDBOX_SCRATCH_MOUNT_PATH: &str = "/workspace";

/// Where a sandbox sees the caller's view of the workspace (read-only).
pub const SANDBOX_VIEW_MOUNT_PATH: &str = "/agent";

/// The two sandbox paths that stand for the workspace: a path a sandbox (or the model,
/// speaking in sandbox terms) names under either is a path inside the workspace.
pub const SANDBOX_WORKSPACE_ROOTS: [&str; 2] =
    [SANDBOX_SCRATCH_MOUNT_PATH, SANDBOX_VIEW_MOUNT_PATH];

/// The `subPath` placeholder of the Job template's [`SANDBOX_VIEW_MOUNT_PATH`] mount.
/// The agent replaces that one mount with one read-only mount per subtree or file of
/// the caller's view (`/agent/<path>` with `subPath: <path>`). Left unreplaced, it
/// names an empty directory: nothing of the workspace is shown.
pub const SANDBOX_VIEW_SUBPATH_PLACEHOLDER: &str = "{{agent-view}}";

/// Where a Kubernetes sandbox sees its own runner directory (socket inside it). The
/// operator's Job template mounts the workspace volume here with
/// [`SANDBOX_RUN_SUBPATH_PLACEHOLDER`] as `subPath`; the agent replaces it.
pub const SANDBOX_RUN_MOUNT_PATH: &str = "/run/saint/sandbox";

/// The `subPath` placeholder in the Job template's [`SANDBOX_RUN_MOUNT_PATH`] mount.
/// The agent replaces it with [`SANDBOX_RUN_SUBPATH_PREFIX`]`<job name>` and refuses a
/// template without it; the admission policy refuses a Job still carrying it.
pub const SANDBOX_RUN_SUBPATH_PLACEHOLDER: &str = ".saint/run/sandboxes/{{job-name}}";

/// The directory under the agent's run directory (`.saint/run` on the workspace volume)
/// that holds one runner directory per sandbox Job.
pub const SANDBOXES_DIRECTORY: &str = "sandboxes";

/// Where on the workspace volume each sandbox's runner directory lives:
/// `.saint/run/` + [`SANDBOXES_DIRECTORY`] + `/`.
pub const SANDBOX_RUN_SUBPATH_PREFIX: &str = ".saint/run/sandboxes/";

/// Where a sandbox sees Porter's socket directory (read-only: a command must not
/// replace Porter's socket with a listener of its own).
pub const SANDBOX_PORTER_MOUNT_PATH: &str = "/run/saint/porter";

/// The workspace-volume `subPath` of Porter's socket directory.
pub const PORTER_RUN_SUBPATH: &str = ".saint/run/porter";

/// Porter's proxy socket file name in its socket directory (the sandbox runner's relay
/// connects to exactly this).
pub const PORTER_SOCKET_FILE_NAME: &str = "proxy.sock";

/// Porter's proxy socket in the pod: [`SANDBOX_PORTER_MOUNT_PATH`] +
/// [`PORTER_SOCKET_FILE_NAME`] (the Porter container mounts the directory where the
/// sandbox does).
pub const PORTER_SOCKET_PATH: &str = "/run/saint/porter/proxy.sock";

/// The certificate of the CA Porter makes at start-up, in its socket directory: the
/// CLIs in a sandbox trust it for the hosts Porter's proxy terminates.
pub const PORTER_CA_FILE_NAME: &str = "ca.pem";

/// [`PORTER_CA_FILE_NAME`] as the sandbox (and the Porter container) sees it.
pub const PORTER_CA_PATH: &str = "/run/saint/porter/ca.pem";

/// Where the runner's relay to Porter's proxy socket listens inside every sandbox's own
/// network namespace: commands' `HTTPS_PROXY` points here.
pub const PORTER_RELAY_ADDRESS: &str = "127.0.0.1:3128";

/// The directory of Porter's control socket in the pod: only the agent and Porter
/// containers mount it, never a sandbox.
pub const PORTER_CONTROL_MOUNT_PATH: &str = "/run/saint/porter-control";

/// Porter's control socket in the pod, in [`PORTER_CONTROL_MOUNT_PATH`].
pub const PORTER_CONTROL_SOCKET_PATH: &str = "/run/saint/porter-control/control.sock";

/// Where a sandbox sees the directory of its browser's egress sockets (read-only).
/// It is not inside the sandbox's own runner directory, which the sandbox may write: a
/// command there could rename the directory and listen where the browser connects,
/// collecting its session key. In a cluster the operator's Job template mounts the
/// workspace here with [`SANDBOX_BROWSER_SUBPATH_PLACEHOLDER`], read-only.
pub const SANDBOX_BROWSER_MOUNT_PATH: &str = "/run/saint/browser";

/// The directory under the agent's run directory that holds one browser socket
/// directory per sandbox Job (the agent's own; no sandbox mounts it writable).
pub const BROWSERS_DIRECTORY: &str = "browsers";

/// Where on the workspace volume each sandbox's browser socket directory lives:
/// `.saint/run/` + [`BROWSERS_DIRECTORY`] + `/`.
pub const SANDBOX_BROWSER_SUBPATH_PREFIX: &str = ".saint/run/browsers/";

/// The `subPath` placeholder in the Job template's [`SANDBOX_BROWSER_MOUNT_PATH`]
/// mount; the agent replaces it with [`SANDBOX_BROWSER_SUBPATH_PREFIX`]`<job name>`.
pub const SANDBOX_BROWSER_SUBPATH_PLACEHOLDER: &str = ".saint/run/browsers/{{job-name}}";

/// The browser socket directory of sandbox Job `job` as the agent sees it.
pub fn agent_browser_directory(agent_run_directory: &Path, job: &str) -> PathBuf {
    agent_run_directory.join(BROWSERS_DIRECTORY).join(job)
}

/// The runner's socket file name inside its runner directory.
pub const RUNNER_SOCKET_FILE_NAME: &str = "runner.sock";

/// The runner's socket as the sandbox sees it.
pub fn runner_socket_path() -> String {
    format!("{SANDBOX_RUN_MOUNT_PATH}/{RUNNER_SOCKET_FILE_NAME}")
}

/// The runner socket of sandbox Job `job` as the agent sees it, given the agent's run
/// directory (the workspace's `.saint/run`).
pub fn agent_runner_socket_path(agent_run_directory: &Path, job: &str) -> PathBuf {
    agent_run_directory
        .join(SANDBOXES_DIRECTORY)
        .join(job)
        .join(RUNNER_SOCKET_FILE_NAME)
}

/// Environment variable: the unix socket the runner listens on.
pub const RUNNER_SOCKET_ENV: &str = "SAINT_RUNNER_SOCKET";
/// Environment variable: the token every request to the runner must carry.
pub const RUNNER_TOKEN_ENV: &str = "SAINT_RUNNER_TOKEN";
/// Environment variable: what to copy from `/agent` into the scratch copy at first
/// start, a JSON array of relative paths.
pub const RUNNER_SEED_ENV: &str = "SAINT_SANDBOX_SEED";
/// Environment variable: whole seconds without a connection after which the runner exits.
pub const RUNNER_IDLE_TIMEOUT_ENV: &str = "SAINT_RUNNER_IDLE_TIMEOUT_SECONDS";
/// Environment variable: `true` when the runner must see its pod cut off from the
/// network (the API server unreachable) before it serves a command.
pub const RUNNER_REQUIRE_NETWORK_CUT_ENV: &str = "SAINT_RUNNER_REQUIRE_NETWORK_CUT";

/// What the agent tells a sandbox runner through its environment. Lists travel as JSON
/// arrays, so a name or path containing a comma arrives whole.
#[derive(Clone, PartialEq, Eq)]
pub struct RunnerSettings {
    /// The socket the runner listens on ([`RUNNER_SOCKET_ENV`]).
    pub socket: String,
    /// The token every request must carry ([`RUNNER_TOKEN_ENV`]); empty when unset.
    pub token: String,
    /// Relative paths to seed the scratch copy with ([`RUNNER_SEED_ENV`]).
    pub seed: Vec<String>,
    /// Idle seconds before the runner exits ([`RUNNER_IDLE_TIMEOUT_ENV`]).
    pub idle_timeout_seconds: u64,
    /// Serve only once the network is proven cut ([`RUNNER_REQUIRE_NETWORK_CUT_ENV`]):
    /// a NetworkPolicy takes effect some time after its pod got an address, so a sandbox
    /// pod verifies it before running anything. Local sandboxes have no network
    /// namespace to begin with.
    pub require_network_cut: bool,
}

impl Default for RunnerSettings {
    fn default() -> Self {
        Self {
            socket: runner_socket_path(),
            token: String::new(),
            seed: Vec::new(),
            idle_timeout_seconds: DEFAULT_SANDBOX_IDLE_TIMEOUT_SECONDS,
            require_network_cut: false,
        }
    }
}

// The token never reaches a log through `{:?}`.
impl fmt::Debug for RunnerSettings {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("RunnerSettings")
            .field("socket", &self.socket)
            .field("token", &"<redacted>")
            .field("seed", &self.seed)
            .field("idle_timeout_seconds", &self.idle_timeout_seconds)
            .field("require_network_cut", &self.require_network_cut)
            .finish()
    }
}

/// Why the runner's environment could not be read. Names the variable; never echoes
/// the token.
#[derive(Debug, Error)]
pub enum RunnerSettingsError {
    #[error("failed to read {variable}: expected a JSON array of strings")]
    List {
        variable: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("failed to read {variable}: expected whole seconds, got {value:?}")]
    Seconds {
        variable: &'static str,
        value: String,
        #[source]
        source: ParseIntError,
    },
    #[error("failed to read {variable}: it is set but empty")]
    Empty { variable: &'static str },
    #[error("failed to read {variable}: expected true or false, got {value:?}")]
    Flag {
        variable: &'static str,
        value: String,
    },
}

impl RunnerSettings {
    /// The environment variables that carry these settings, in a fixed order.
    pub fn to_env(&self) -> Vec<(String, String)> {
        let list = |values: &[String]| {
            serde_json::to_string(values).expect("a list of strings serialises")
        };
        vec![
            (RUNNER_SOCKET_ENV.to_string(), self.socket.clone()),
            (RUNNER_TOKEN_ENV.to_string(), self.token.clone()),
            (RUNNER_SEED_ENV.to_string(), list(&self.seed)),
            (
                RUNNER_IDLE_TIMEOUT_ENV.to_string(),
                self.idle_timeout_seconds.to_string(),
            ),
            (
                RUNNER_REQUIRE_NETWORK_CUT_ENV.to_string(),
                self.require_network_cut.to_string(),
            ),
        ]
    }

    /// Reads the settings through `lookup` (`std::env::var(name).ok()` in the runner).
    /// An unset variable keeps its default; a set one must be well-formed.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, RunnerSettingsError> {
        let mut settings = Self::default();
        if let Some(socket) = lookup(RUNNER_SOCKET_ENV) {
            if socket.is_empty() {
                return Err(RunnerSettingsError::Empty {
                    variable: RUNNER_SOCKET_ENV,
                });
            }
            settings.socket = socket;
        }
        if let Some(token) = lookup(RUNNER_TOKEN_ENV) {
            settings.token = token;
        }
        if let Some(seed) = lookup(RUNNER_SEED_ENV) {
            settings.seed = parse_list(RUNNER_SEED_ENV, &seed)?;
        }
        if let Some(seconds) = lookup(RUNNER_IDLE_TIMEOUT_ENV) {
            settings.idle_timeout_seconds =
                seconds
                    .trim()
                    .parse()
                    .map_err(|source| RunnerSettingsError::Seconds {
                        variable: RUNNER_IDLE_TIMEOUT_ENV,
                        value: seconds.clone(),
                        source,
                    })?;
        }
        if let Some(flag) = lookup(RUNNER_REQUIRE_NETWORK_CUT_ENV) {
            settings.require_network_cut = match flag.trim() {
                "true" => true,
                "false" => false,
                _ => {
                    return Err(RunnerSettingsError::Flag {
                        variable: RUNNER_REQUIRE_NETWORK_CUT_ENV,
                        value: flag,
                    });
                }
            };
        }
        Ok(settings)
    }
}

fn parse_list(variable: &'static str, value: &str) -> Result<Vec<String>, RunnerSettingsError> {
    serde_json::from_str(value).map_err(|source| RunnerSettingsError::List { variable, source })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn porter_socket_path_is_its_directory_and_file_name() {
        assert_eq!(
            PORTER_SOCKET_PATH,
            format!("{SANDBOX_PORTER_MOUNT_PATH}/{PORTER_SOCKET_FILE_NAME}")
        );
        assert!(PORTER_CONTROL_SOCKET_PATH.starts_with(&format!("{PORTER_CONTROL_MOUNT_PATH}/")));
    }
    use crate::ErrorChain;

    fn lookup_in(variables: &[(String, String)]) -> impl Fn(&str) -> Option<String> + use<> {
        let variables: HashMap<String, String> = variables.iter().cloned().collect();
        move |name| variables.get(name).cloned()
    }

    #[test]
    fn settings_survive_the_environment_even_with_commas_in_names() {
        let settings = RunnerSettings {
            socket: "/run/saint/sandbox/runner, with comma.sock".to_string(),
            token: "token,with,commas".to_string(),
            seed: vec![
                "notes/a,b.md".to_string(),
                "skills".to_string(),
                "quote\"and\\slash".to_string(),
            ],
            idle_timeout_seconds: 3_600,
            require_network_cut: true,
        };
        let environment = settings.to_env();
        assert_eq!(
            environment
                .iter()
                .map(|(name, _)| name.as_str())
                .collect::<Vec<_>>(),
            [
                RUNNER_SOCKET_ENV,
                RUNNER_TOKEN_ENV,
                RUNNER_SEED_ENV,
                RUNNER_IDLE_TIMEOUT_ENV,
                RUNNER_REQUIRE_NETWORK_CUT_ENV
            ]
        );
        let parsed = RunnerSettings::from_env(lookup_in(&environment)).unwrap();
        assert_eq!(parsed, settings);
        assert_eq!(parsed.seed.len(), 3);
    }

    #[test]
    fn unset_variables_keep_their_defaults() {
        let parsed = RunnerSettings::from_env(|_| None).unwrap();
        assert_eq!(parsed, RunnerSettings::default());
        assert_eq!(parsed.socket, "/run/saint/sandbox/runner.sock");
        assert_eq!(
            parsed.idle_timeout_seconds,
            DEFAULT_SANDBOX_IDLE_TIMEOUT_SECONDS
        );
        assert!(!parsed.require_network_cut);
    }

    #[test]
    fn a_malformed_variable_is_refused_by_name() {
        let cases = [
            (RUNNER_SEED_ENV, "SOUL.md,skills"),
            (RUNNER_SEED_ENV, "[\"SOUL.md\", 3]"),
            (RUNNER_IDLE_TIMEOUT_ENV, "an hour"),
            (RUNNER_SOCKET_ENV, ""),
            (RUNNER_REQUIRE_NETWORK_CUT_ENV, "yes"),
            (RUNNER_REQUIRE_NETWORK_CUT_ENV, "1"),
        ];
        for (variable, value) in cases {
            let error =
                RunnerSettings::from_env(|name| (name == variable).then(|| value.to_string()))
                    .unwrap_err();
            let message = ErrorChain(&error).to_string();
            assert!(
                message.starts_with(&format!("failed to read {variable}: ")),
                "{message}"
            );
        }
    }

    #[test]
    fn the_token_is_never_shown_by_debug() {
        let settings = RunnerSettings {
            token: "secret-runner-token".to_string(),
            ..RunnerSettings::default()
        };
        assert!(!format!("{settings:?}").contains("secret-runner-token"));
    }

    #[test]
    fn socket_and_subpath_names_agree() {
        assert_eq!(
            SANDBOX_RUN_SUBPATH_PREFIX,
            format!(".saint/run/{SANDBOXES_DIRECTORY}/")
        );
        assert!(SANDBOX_RUN_SUBPATH_PLACEHOLDER.starts_with(SANDBOX_RUN_SUBPATH_PREFIX));
        assert_eq!(
            agent_runner_socket_path(Path::new("/run/saint"), "acme-sandbox-1"),
            PathBuf::from("/run/saint/sandboxes/acme-sandbox-1/runner.sock")
        );
        assert_eq!(
            SANDBOX_BROWSER_SUBPATH_PREFIX,
            format!(".saint/run/{BROWSERS_DIRECTORY}/")
        );
        assert!(SANDBOX_BROWSER_SUBPATH_PLACEHOLDER.starts_with(SANDBOX_BROWSER_SUBPATH_PREFIX));
        assert_eq!(
            agent_browser_directory(Path::new("/run/saint"), "acme-sandbox-1"),
            PathBuf::from("/run/saint/browsers/acme-sandbox-1")
        );
        // The browser's directory is never inside the sandbox's writable one.
        assert!(!SANDBOX_BROWSER_MOUNT_PATH.starts_with(&format!("{SANDBOX_RUN_MOUNT_PATH}/")));
    }

    #[test]
    fn sandbox_labels_select_what_the_selector_names() {
        let labels = sandbox_labels("acme-ana");
        for (key, value) in sandbox_selector("acme-ana") {
            assert_eq!(labels.get(&key), Some(&value), "{key}");
        }
        assert_eq!(
            sandbox_label_selector("acme-ana"),
            "saint.work/bot=acme-ana,saint.work/sandbox=true"
        );
        assert_eq!(labels["app.kubernetes.io/component"], "sandbox");
    }
}
