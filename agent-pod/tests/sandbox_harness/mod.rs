//! The local sandbox harness shared by `sandbox_local.rs` and `porter_sandbox.rs`: real
//! bubblewrap, the real runner, the real Porter pointed at Porter's HTTPS stand-in for
//! GitHub, and the exec tool called as the runtime calls it.

#![allow(dead_code)]

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use saint_config::{BotConfig, SandboxScope};
use saint_sandbox::{
    ScopeKey, View,
    local::{LocalConfig, LocalSandbox},
    porter_control::PorterControl,
};
use saint_tools::{
    Caller, Tool, ToolContext, ToolError, ToolOutput,
    exec::{ExecLimits, ExecTool},
    guard::{caller_view, role_paths::RolePaths},
    policy,
};
use serde_json::json;

#[path = "../../../porter-sidecar/tests/standin/mod.rs"]
pub mod standin;

pub const PORTER_SECRET: &str = "ghp_porterCredential7f3e9aXk";
/// The CLI whose credential Porter holds.
pub const CLI: &str = "gh";

/// The directory holding this build's binaries (`target/debug`).
pub fn binary(name: &str) -> PathBuf {
    let directory = match std::env::var_os("SAINT_TEST_BIN_DIR") {
        Some(directory) => PathBuf::from(directory),
        None => std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf(),
    };
    let path = directory.join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `cargo build -p saint-sandbox-runner -p porter` first",
        path.display()
    );
    path
}

pub fn bwrap() -> PathBuf {
    let path = PathBuf::from("/usr/bin/bwrap");
    assert!(
        path.is_file(),
        "bubblewrap is not installed (apt-get install bubblewrap)"
    );
    path
}

pub struct Porter {
    pub process: Child,
    pub socket_directory: PathBuf,
    pub control_socket: PathBuf,
    pub standin: standin::StandIn,
}

impl Drop for Porter {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// Porter holding `gh`'s credential for the stand-in's hosts, pointed at the stand-in.
pub fn start_porter(base: &Path) -> Porter {
    let standin = standin::StandIn::start(base, PORTER_SECRET);
    let secret_file = base.join("gh-token");
    fs::write(&secret_file, PORTER_SECRET).unwrap();
    let registry = json!({
        "version": 2,
        "clis": {CLI: {
            "hosts": standin::HOSTS,
            "secret": {"file": secret_file},
            "placeholderEnv": ["GH_TOKEN"],
            "git": true,
            "requests": {
                "employee": [
                    {"methods": ["GET"], "paths": ["/repos/*/*/pulls", "/user"]},
                    {"methods": ["POST"], "paths": ["/graphql"], "graphql": {"queries": true}},
                    {"methods": ["GET"], "paths": ["/*/*/info/refs"]},
                    {"methods": ["POST"], "paths": ["/*/*/git-upload-pack"]}
                ],
                "owner": [{"methods": ["*"], "paths": ["/**"]}]
            }
        }}
    });
    let registry_path = base.join("porter-registry.json");
    fs::write(&registry_path, registry.to_string()).unwrap();
    let socket_directory = base.join("porter-run");
    let control_socket = base.join("porter-control/control.sock");
    let mut command = Command::new(binary("porter"));
    command
        .arg("--proxy-socket")
        .arg(socket_directory.join("proxy.sock"))
        .arg("--ca-certificate")
        .arg(socket_directory.join("ca.pem"))
        .arg("--control-socket")
        .arg(&control_socket)
        .arg("--registry")
        .arg(&registry_path)
        .arg("--audit-log")
        .arg(base.join("porter-control/audit.jsonl"))
        .arg("--upstream-ca-file")
        .arg(&standin.ca_file);
    for host in standin::HOSTS {
        command
            .arg("--upstream-override")
            .arg(format!("{host}={}", standin.address));
    }
    let process = command
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("PORTER_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !(socket_directory.join("proxy.sock").exists() && control_socket.exists()) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "porter did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    Porter {
        process,
        socket_directory,
        control_socket,
        standin,
    }
}

pub struct Harness {
    pub base: tempfile::TempDir,
    pub workspace: PathBuf,
    pub sandbox: Arc<LocalSandbox>,
    pub tool: ExecTool,
    pub config: Arc<BotConfig>,
    pub porter: Porter,
}

pub fn bot_config(control_socket: &Path) -> BotConfig {
    let config = json!({
        "schemaVersion": saint_config::SCHEMA_VERSION,
        "bot": {"name": "my-bot"},
        "model": {"provider": "anthropic", "name": "scripted", "baseUrl": "http://127.0.0.1:9"},
        "defaultRole": "employee",
        "roles": {
            "employee": {"tools": {"allow": ["exec"]}, "execBlocklist": ["touch *blocked*", "rm -rf *"],
                         "files": {"read": ["SOUL.md", "skills/**"]}, "skills": "all"},
            "external": {"tools": {"allow": ["exec"]}},
            "owner": {"tools": {"allow": ["exec"]}, "execBlocklist": [], "files": {"read": ["**"]}, "skills": "all"}
        },
        "sandbox": {"backend": "local", "scope": "session", "idleTimeoutSeconds": 600, "execTimeoutSeconds": 30},
        "porter": {"socketPath": "/run/saint/porter/proxy.sock", "controlSocketPath": control_socket, "clis": [CLI]}
    });
    serde_json::from_value(config).unwrap()
}

impl Harness {
    pub fn start() -> Self {
        Self::start_with(|_| {})
    }

    pub fn start_with(adjust: impl FnOnce(&mut LocalConfig)) -> Self {
        let base = tempfile::tempdir().unwrap();
        let workspace = base.path().join("workspace");
        fs::create_dir_all(workspace.join("skills/github")).unwrap();
        fs::create_dir_all(workspace.join("memory/private")).unwrap();
        fs::write(workspace.join("SOUL.md"), "be kind\n").unwrap();
        fs::write(workspace.join("skills/github/SKILL.md"), "use hello-cli\n").unwrap();
        fs::write(workspace.join("memory/private/notes.md"), "private\n").unwrap();
        let porter = start_porter(base.path());
        let mut local = LocalConfig::new(
            workspace.clone(),
            base.path().join("state"),
            binary("saint-sandbox-runner"),
        );
        local.bwrap = bwrap();
        local.porter_socket_directory = Some(porter.socket_directory.clone());
        adjust(&mut local);
        let sandbox = Arc::new(LocalSandbox::new(local).unwrap());
        let config = Arc::new(bot_config(&porter.control_socket));
        let tool = ExecTool::new(
            sandbox.clone(),
            Some(PorterControl::new(porter.control_socket.clone())),
            ExecLimits::default(),
        );
        Self {
            base,
            workspace,
            sandbox,
            tool,
            config,
            porter,
        }
    }

    pub fn context(&self, session: &str, role: &str) -> ToolContext {
        ToolContext {
            caller: Caller {
                slug: "acme-ana".to_string(),
                display_name: "Ana".to_string(),
                role_name: role.to_string(),
                role: Arc::new(self.config.roles[role].clone()),
                known: true,
                identity: format!("http:{session}"),
                session_key: session.to_string(),
                trigger: saint_tools::Trigger::Message,
                depth: 0,
                may_message: None,
            },
            workspace: self.workspace.clone(),
            config: self.config.clone(),
        }
    }

    /// The sandbox the exec tool picks for Ana (employee) in `session`.
    pub fn scope(&self, session: &str) -> ScopeKey {
        let role = &self.config.roles["employee"];
        ScopeKey::for_caller(
            SandboxScope::Session,
            session,
            &caller_view::viewer("employee", role, "acme-ana"),
        )
    }

    /// Ana's (employee) view of the workspace now.
    pub fn view(&self) -> View {
        let rules = RolePaths::new(
            &self.config.roles["employee"],
            &self.config.file_access,
            "acme-ana",
        )
        .unwrap();
        caller_view::compute(&self.workspace, &rules).unwrap()
    }

    /// Calls exec as the runtime does: through the policy, with a sandbox available.
    pub async fn call(
        &self,
        context: &ToolContext,
        input: serde_json::Value,
    ) -> Result<ToolOutput, ToolError> {
        let permit = policy::permit(&context.caller, &self.tool, true)?;
        self.tool.call(&permit, context, input).await
    }

    /// Runs `command` as `role` in `session` and returns what the model would see.
    pub async fn run_as(&self, role: &str, session: &str, command: &str) -> String {
        let context = self.context(session, role);
        match self.call(&context, json!({"command": command})).await {
            Ok(output) => output.content,
            Err(error) => panic!("{command}: {error}"),
        }
    }

    pub async fn exec(&self, session: &str, command: &str) -> Result<ToolOutput, ToolError> {
        self.call(
            &self.context(session, "employee"),
            json!({"command": command}),
        )
        .await
    }

    pub async fn run(&self, session: &str, command: &str) -> String {
        match self.exec(session, command).await {
            Ok(output) => output.content,
            Err(error) => panic!("{command}: {error}"),
        }
    }

    /// Host processes whose command line mentions this harness's directory.
    pub fn sandbox_processes(&self) -> Vec<String> {
        processes_with(&self.base.path().join("state").display().to_string())
    }
}

pub fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(marker) {
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

pub async fn wait_until_gone(marker: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = processes_with(marker);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
