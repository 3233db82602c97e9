//! Builds the sandbox backend the bot config names (`sandbox.backend`): bubblewrap on
//! this machine or Jobs in the bot's namespace, plus the Porter control client `exec`
//! registers tokens with. The one place the runtime calls to get an `exec` that works.
//!
//! Reads the environment and the filesystem (and, in Kubernetes, the agent's own pod);
//! starts no sandbox.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use saint_config::{BotConfig, SandboxBackend};

use super::{
    Sandbox, SandboxError,
    kubernetes::{KubernetesConfig, KubernetesSandbox},
    local::{LocalConfig, LocalSandbox},
    porter_control::PorterControl,
    seed_entries,
};

/// Machine-specific settings of the local backend, with defaults from the environment.
#[derive(Clone, Debug)]
pub struct LocalMachine {
    /// `SAINT_BWRAP`, default `/usr/bin/bwrap`.
    pub bwrap: PathBuf,
    /// `SAINT_SANDBOX_RUNNER`, default `saint-sandbox-runner` next to this executable.
    pub runner: PathBuf,
    /// `SAINT_SANDBOX_STATE`, default `$XDG_STATE_HOME/saint/sandboxes/<bot>-<hash of
    /// the workspace>` (or `~/.local/state/...`); must be outside the workspace.
    pub state_directory: PathBuf,
    /// `SAINT_PORTER_SOCKET_DIR`, default the directory of `porter.socketPath`.
    pub porter_socket_directory: PathBuf,
}

impl LocalMachine {
    /// Defaults for `config` serving `workspace`, each overridable by its environment
    /// variable.
    pub fn from_environment(
        config: &BotConfig,
        workspace: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Self {
        let beside_executable = |name: &str| {
            std::env::current_exe()
                .ok()
                .and_then(|executable| executable.parent().map(|directory| directory.join(name)))
                .unwrap_or_else(|| PathBuf::from(name))
        };
        let state_home = env("XDG_STATE_HOME")
            .map(PathBuf::from)
            .or_else(|| env("HOME").map(|home| PathBuf::from(home).join(".local/state")))
            .unwrap_or_else(|| PathBuf::from("/var/lib"));
        let porter_socket = PathBuf::from(&config.porter.socket_path);
        Self {
            bwrap: env("SAINT_BWRAP")
                .map_or_else(|| PathBuf::from("/usr/bin/bwrap"), PathBuf::from),
            runner: env("SAINT_SANDBOX_RUNNER")
                .map_or_else(|| beside_executable("saint-sandbox-runner"), PathBuf::from),
            state_directory: env("SAINT_SANDBOX_STATE").map_or_else(
                || {
                    state_home
                        .join("saint/sandboxes")
                        .join(state_directory_name(&config.bot.name, workspace))
                },
                PathBuf::from,
            ),
            porter_socket_directory: env("SAINT_PORTER_SOCKET_DIR").map_or_else(
                || {
                    porter_socket
                        .parent()
                        .map(PathBuf::from)
                        .unwrap_or_default()
                },
                PathBuf::from,
            ),
        }
    }
}

/// What `exec` needs: the sandbox and Porter's control socket; and where the agent's
/// own requests reach Porter's proxy (MCP servers over HTTP).
pub struct ExecBackend {
    pub sandbox: Arc<dyn Sandbox>,
    pub porter: Option<PorterControl>,
    /// Porter's proxy socket as the agent sees it.
    pub proxy_socket: PathBuf,
}

impl ExecBackend {
    /// Porter's CA certificate, beside its proxy socket.
    pub fn porter_ca_file(&self) -> PathBuf {
        self.proxy_socket
            .parent()
            .unwrap_or_else(|| Path::new("/"))
            .join(saint_config::sandbox_contract::PORTER_CA_FILE_NAME)
    }
}

/// The default state directory's name: the bot's name and a short hash of its
/// workspace, so two bots of the same name on one machine (two checkouts, two users'
/// workspaces) never share sandboxes or a Porter; short, so unix socket paths under it
/// stay within their 107-byte limit.
pub fn state_directory_name(bot: &str, workspace: &Path) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(workspace.as_os_str().as_encoded_bytes());
    format!("{bot}-{}", &hex::encode(digest)[..8])
}

/// The local backend for `config`. Fails (and `exec` stays disabled) if bubblewrap or
/// the runner binary is missing or the state directory is inside the workspace.
pub fn local(
    config: &BotConfig,
    workspace: PathBuf,
    machine: LocalMachine,
) -> Result<ExecBackend, SandboxError> {
    // Checked here, at start, so that exec is withheld from every role from the first
    // turn on, instead of being offered and failing at the model's first call.
    if !is_executable_file(&machine.bwrap) {
        return Err(SandboxError::Start(format!(
            "bubblewrap {} is not installed (Debian package `bubblewrap`; SAINT_BWRAP names \
             another): commands cannot run sandboxed, so exec is not offered",
            machine.bwrap.display()
        )));
    }
    if !machine.runner.is_file() {
        return Err(SandboxError::Start(format!(
            "sandbox runner {} not found (set SAINT_SANDBOX_RUNNER)",
            machine.runner.display()
        )));
    }
    let mut local =
        LocalConfig::for_bot(config, workspace, machine.state_directory, machine.runner);
    local.bwrap = machine.bwrap;
    local.porter_socket_directory = machine
        .porter_socket_directory
        .is_dir()
        .then_some(machine.porter_socket_directory);
    Ok(ExecBackend {
        sandbox: Arc::new(LocalSandbox::new(local)?),
        porter: Some(PorterControl::new(&config.porter.control_socket_path)),
        proxy_socket: PathBuf::from(&config.porter.socket_path),
    })
}

/// A regular file (after symlinks) that someone may execute.
fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}

/// The Kubernetes backend for `config`, using the in-cluster client. The template's
/// owner (the SaintBot) is kept; only when it carries none does the agent's own pod
/// (its hostname) become the Jobs' owner.
/// Deletes sandbox Jobs an earlier agent left behind.
pub async fn kubernetes(
    config: &BotConfig,
    agent_run_directory: PathBuf,
) -> Result<ExecBackend, SandboxError> {
    let template = config.sandbox.job_template.clone().ok_or_else(|| {
        SandboxError::Start("the bot config has no sandbox jobTemplate".to_string())
    })?;
    let client = kube::Client::try_default().await.map_err(|error| {
        SandboxError::Backend(format!("failed to create a Kubernetes client: {error}"))
    })?;
    let namespace = config.bot.namespace.clone();
    let pod_name = std::env::var("HOSTNAME").unwrap_or_default();
    // The operator renders the SaintBot into the template; the agent pod is only a
    // fallback for templates without an owner.
    let owner = if pod_name.is_empty() || super::kubernetes::template_has_owner(&template) {
        None
    } else {
        Some(KubernetesSandbox::own_pod_owner(client.clone(), &namespace, &pod_name).await?)
    };
    let sandbox = KubernetesSandbox::new(
        client,
        KubernetesConfig {
            namespace,
            bot: config.bot.name.clone(),
            template,
            seed: seed_entries(),
            agent_run_directory,
            idle_timeout: Duration::from_secs(config.sandbox.idle_timeout_seconds),
            start_timeout: Duration::from_secs(180),
            owner,
        },
    );
    let leftovers = sandbox.reap_leftovers().await?;
    if leftovers > 0 {
        tracing::info!(leftovers, "deleted sandbox jobs left by an earlier agent");
    }
    Ok(ExecBackend {
        sandbox: Arc::new(sandbox),
        porter: Some(PorterControl::new(&config.porter.control_socket_path)),
        proxy_socket: PathBuf::from(&config.porter.socket_path),
    })
}

/// The backend `config.sandbox.backend` names.
pub async fn for_config(
    config: &BotConfig,
    workspace: PathBuf,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ExecBackend, SandboxError> {
    match config.sandbox.backend {
        SandboxBackend::Local => {
            let machine = LocalMachine::from_environment(config, &workspace, env);
            local(config, workspace, machine)
        }
        SandboxBackend::Kubernetes => kubernetes(config, PathBuf::from("/run/saint")).await,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// The agent links reqwest and kube; with two rustls crypto providers compiled in,
    /// rustls refuses to pick one and building a kube client panics. One provider
    /// (aws-lc-rs, set in the workspace manifest) keeps this working.
    #[tokio::test]
    async fn a_kube_client_can_be_built_in_the_agent_binary() {
        let url = "https://127.0.0.1:6443".parse().expect("valid url");
        let client = kube::Client::try_from(kube::Config::new(url));
        assert!(client.is_ok(), "kube client: {:?}", client.err());
    }

    fn config() -> BotConfig {
        serde_json::from_value(serde_json::json!({
            "schemaVersion": saint_config::SCHEMA_VERSION,
            "bot": {"name": "my-bot"},
            "model": {"provider": "anthropic", "name": "m", "baseUrl": "http://127.0.0.1:9"},
            "defaultRole": "external",
            "roles": {"external": {}},
            "sandbox": {"backend": "local"},
            "porter": {"socketPath": "/srv/acme/porter/porter.sock", "controlSocketPath": "/srv/acme/control.sock"}
        }))
        .unwrap()
    }

    #[test]
    fn the_default_state_directory_is_per_bot_and_workspace_and_short() {
        let one = state_directory_name("my-bot", Path::new("/home/ana/acme"));
        assert_eq!(
            one,
            state_directory_name("my-bot", Path::new("/home/ana/acme"))
        );
        assert_ne!(
            one,
            state_directory_name("my-bot", Path::new("/home/ivo/acme"))
        );
        assert_ne!(
            one,
            state_directory_name("other-bot", Path::new("/home/ana/acme"))
        );
        assert!(
            one.starts_with("my-bot-") && one.len() == "my-bot-".len() + 8,
            "{one}"
        );
    }

    #[test]
    fn local_machine_defaults_follow_the_environment() {
        let variables = HashMap::from([("HOME", "/home/acme"), ("SAINT_BWRAP", "/opt/bwrap")]);
        let lookup = |name: &str| variables.get(name).map(|value| value.to_string());
        let machine = LocalMachine::from_environment(&config(), Path::new("/srv/acme/ws"), &lookup);
        assert_eq!(machine.bwrap, PathBuf::from("/opt/bwrap"));
        assert_eq!(
            machine.state_directory,
            PathBuf::from("/home/acme/.local/state/saint/sandboxes")
                .join(state_directory_name("my-bot", Path::new("/srv/acme/ws")))
        );
        assert_eq!(
            machine.porter_socket_directory,
            PathBuf::from("/srv/acme/porter")
        );
        assert!(machine.runner.ends_with("saint-sandbox-runner"));
    }

    #[test]
    fn a_missing_runner_disables_exec_with_a_clear_error() {
        let workspace = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let machine = LocalMachine {
            bwrap: "/usr/bin/bwrap".into(),
            runner: "/nonexistent/saint-sandbox-runner".into(),
            state_directory: state.path().into(),
            porter_socket_directory: "/nonexistent".into(),
        };
        let error = local(&config(), workspace.path().into(), machine)
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("SAINT_SANDBOX_RUNNER"), "{error}");
    }

    #[test]
    fn without_bubblewrap_exec_is_not_offered_and_the_error_says_what_to_install() {
        let workspace = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let runner = tempfile::NamedTempFile::new().unwrap();
        let not_executable = tempfile::NamedTempFile::new().unwrap();
        for bwrap in [
            PathBuf::from("/nonexistent/bwrap"),
            state.path().to_path_buf(),
            not_executable.path().to_path_buf(),
        ] {
            let machine = LocalMachine {
                bwrap: bwrap.clone(),
                runner: runner.path().into(),
                state_directory: state.path().into(),
                porter_socket_directory: "/nonexistent".into(),
            };
            let error = local(&config(), workspace.path().into(), machine)
                .err()
                .unwrap_or_else(|| panic!("{} was taken for bubblewrap", bwrap.display()))
                .to_string();
            assert!(
                error.contains(&bwrap.display().to_string())
                    && error.contains("package `bubblewrap`")
                    && error.contains("exec is not offered"),
                "{error}"
            );
        }
    }
}
