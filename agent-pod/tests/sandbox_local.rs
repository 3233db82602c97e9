//! The `exec` tool end to end on this machine: real bubblewrap, the real
//! `saint-sandbox-runner`, the real Porter daemon and `cliport-proxy`.
//!
//! Needs `bwrap` (Debian `bubblewrap`) and the binaries of `saint-sandbox-runner` and
//! `porter` built into the same target directory (`cargo build -p saint-sandbox-runner
//! -p porter`); a missing piece fails the test with the reason, never skips it.

use std::{
    fs,
    os::unix::fs::{MetadataExt, PermissionsExt},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use saint_config::{BotConfig, SandboxScope};
use saint_sandbox::{
    Sandbox, ScopeKey, View,
    local::{LocalConfig, LocalSandbox},
    porter_control::PorterControl,
};
use saint_tools::{
    Caller, Tool, ToolContext, ToolError, ToolOutput,
    exec::{ExecLimits, ExecTool},
    guard::{role_paths::RolePaths, view},
    policy,
};
use serde_json::json;

const PORTER_SECRET: &str = "porter-credential-7f3e9a";
const CLI: &str = "hello-cli";

/// The directory holding this build's binaries (`target/debug`).
fn binary(name: &str) -> PathBuf {
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

fn bwrap() -> PathBuf {
    let path = PathBuf::from("/usr/bin/bwrap");
    assert!(
        path.is_file(),
        "bubblewrap is not installed (apt-get install bubblewrap)"
    );
    path
}

struct Porter {
    process: Child,
    socket_directory: PathBuf,
    control_socket: PathBuf,
}

impl Drop for Porter {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

fn start_porter(base: &Path, workspace: &Path) -> Porter {
    let bin = base.join("porter-bin");
    fs::create_dir_all(&bin).unwrap();
    let script = bin.join(CLI);
    // The real CLI: runs in Porter, outside the sandbox, with the credential.
    fs::write(
        &script,
        "#!/bin/sh\necho \"hello-cli 1.0 args=$*\"\necho \"secret-length=${#HELLO_SECRET}\"\n",
    )
    .unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let registry = json!({
        "version": 1,
        "clis": {CLI: {"bin": script, "env": {"HELLO_SECRET": PORTER_SECRET}, "timeoutSeconds": 30}}
    });
    let registry_path = base.join("porter-registry.json");
    fs::write(&registry_path, registry.to_string()).unwrap();
    let socket_directory = base.join("porter-run");
    let control_socket = base.join("porter-control/control.sock");
    let process = Command::new(binary("porter"))
        .arg("--socket")
        .arg(socket_directory.join("porter.sock"))
        .arg("--control-socket")
        .arg(&control_socket)
        .arg("--registry")
        .arg(&registry_path)
        .arg("--workspace")
        .arg(workspace)
        .arg("--audit-log")
        .arg(base.join("porter.jsonl"))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("PORTER_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !(socket_directory.join("porter.sock").exists() && control_socket.exists()) {
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
    }
}

struct Harness {
    base: tempfile::TempDir,
    workspace: PathBuf,
    sandbox: Arc<LocalSandbox>,
    tool: ExecTool,
    config: Arc<BotConfig>,
    porter: Porter,
}

fn bot_config(control_socket: &Path) -> BotConfig {
    let config = json!({
        "schemaVersion": saint_config::SCHEMA_VERSION,
        "bot": {"name": "my-bot"},
        "model": {"provider": "anthropic", "name": "scripted", "baseUrl": "http://127.0.0.1:9"},
        "defaultRole": "employee",
        "roles": {
            "employee": {"tools": {"allow": ["exec"]}, "execBlocklist": ["touch *blocked*", "rm -rf *"],
                         "files": {"read": ["SOUL.md", "skills/**"]}, "skills": "all"},
            "external": {"tools": {"allow": ["exec"]}}
        },
        "sandbox": {"backend": "local", "scope": "session", "idleTimeoutSeconds": 600, "execTimeoutSeconds": 30},
        "porter": {"socketPath": "/run/saint/porter/porter.sock", "controlSocketPath": control_socket, "clis": [CLI]}
    });
    serde_json::from_value(config).unwrap()
}

impl Harness {
    fn start() -> Self {
        Self::start_with(|_| {})
    }

    fn start_with(adjust: impl FnOnce(&mut LocalConfig)) -> Self {
        let base = tempfile::tempdir().unwrap();
        let workspace = base.path().join("workspace");
        fs::create_dir_all(workspace.join("skills/github")).unwrap();
        fs::create_dir_all(workspace.join("memory/private")).unwrap();
        fs::write(workspace.join("SOUL.md"), "be kind\n").unwrap();
        fs::write(workspace.join("skills/github/SKILL.md"), "use hello-cli\n").unwrap();
        fs::write(workspace.join("memory/private/notes.md"), "private\n").unwrap();
        let porter = start_porter(base.path(), &workspace);
        let mut local = LocalConfig::new(
            workspace.clone(),
            base.path().join("state"),
            binary("saint-sandbox-runner"),
        );
        local.bwrap = bwrap();
        local.proxy = Some(binary("cliport-proxy"));
        local.clis = vec![CLI.to_string()];
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

    fn context(&self, session: &str, role: &str) -> ToolContext {
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
    fn scope(&self, session: &str) -> ScopeKey {
        let role = &self.config.roles["employee"];
        ScopeKey::for_caller(
            SandboxScope::Session,
            session,
            &view::viewer("employee", role, "acme-ana"),
        )
    }

    /// Ana's (employee) view of the workspace now.
    fn view(&self) -> View {
        let rules = RolePaths::new(
            &self.config.roles["employee"],
            &self.config.file_access,
            "acme-ana",
        )
        .unwrap();
        view::compute(&self.workspace, &rules).unwrap()
    }

    /// Calls exec as the runtime does: through the policy, with a sandbox available.
    async fn call(
        &self,
        context: &ToolContext,
        input: serde_json::Value,
    ) -> Result<ToolOutput, ToolError> {
        let permit = policy::permit(&context.caller, &self.tool, true)?;
        self.tool.call(&permit, context, input).await
    }

    async fn exec(&self, session: &str, command: &str) -> Result<ToolOutput, ToolError> {
        self.call(
            &self.context(session, "employee"),
            json!({"command": command}),
        )
        .await
    }

    async fn run(&self, session: &str, command: &str) -> String {
        match self.exec(session, command).await {
            Ok(output) => output.content,
            Err(error) => panic!("{command}: {error}"),
        }
    }

    /// Host processes whose command line mentions this harness's directory.
    fn sandbox_processes(&self) -> Vec<String> {
        processes_with(&self.base.path().join("state").display().to_string())
    }
}

fn processes_with(marker: &str) -> Vec<String> {
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

async fn wait_until_gone(marker: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = processes_with(marker);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_porter_cli_runs_through_the_proxy_and_output_comes_back() {
    let harness = Harness::start();
    let output = harness
        .exec("http:ana", &format!("{CLI} --version; echo done >&2"))
        .await
        .unwrap();
    assert!(
        output.content.contains("hello-cli 1.0 args=--version"),
        "{}",
        output.content
    );
    // The CLI got its credential inside Porter; the sandbox never saw the value.
    assert!(
        output
            .content
            .contains(&format!("secret-length={}", PORTER_SECRET.len())),
        "{}",
        output.content
    );
    assert!(!output.content.contains(PORTER_SECRET));
    assert!(
        output.content.contains("[stderr]\ndone\n"),
        "{}",
        output.content
    );
    assert!(
        output.content.ends_with("[exit code 0]"),
        "{}",
        output.content
    );
    assert_eq!(output.metering["porter"], json!(true));
    assert_eq!(output.metering["exitCode"], json!(0));

    let plain = harness.exec("http:ana", "echo plain").await.unwrap();
    assert_eq!(plain.metering["porter"], json!(false));
}

#[tokio::test]
async fn the_porter_token_lives_only_for_its_command() {
    let harness = Harness::start();
    let first = harness
        .run(
            "http:ana",
            "printenv CLIPORT_TOKEN > /workspace/old-token; wc -c < /workspace/old-token",
        )
        .await;
    assert!(
        first.starts_with("65\n"),
        "a 64-character token and a newline: {first}"
    );
    // Replaying the first command's token in a later command fails: it was revoked.
    let replay = harness
        .run(
            "http:ana",
            &format!("CLIPORT_TOKEN=$(cat /workspace/old-token) {CLI} --version"),
        )
        .await;
    assert!(!replay.contains("hello-cli 1.0"), "{replay}");
    assert!(!replay.ends_with("[exit code 0]"), "{replay}");
    // While the fresh token of that same command works.
    let fresh = harness.run("http:ana", &format!("{CLI} ok")).await;
    assert!(fresh.contains("hello-cli 1.0 args=ok"), "{fresh}");
}

#[tokio::test]
async fn no_credential_of_the_agent_reaches_the_sandbox() {
    const CHILD: &str = "SAINT_SANDBOX_CANARY_CHILD";
    const CANARY: &str = "canary-c3b1d9e2-agent-secret";
    if std::env::var_os(CHILD).is_some() {
        // Child: this process is "the agent" holding credentials in its environment.
        let harness = Harness::start();
        let printenv = harness.run("http:ana", "printenv").await;
        assert!(
            !printenv.contains(CANARY),
            "canary leaked into printenv: {printenv}"
        );
        let names: Vec<&str> = printenv
            .lines()
            .filter(|line| line.contains('='))
            .map(|line| line.split('=').next().unwrap())
            .collect();
        for name in &names {
            assert!(
                ["CLIPORT_TOKEN", "HOME", "LANG", "PATH", "PWD", "SHLVL", "_"].contains(name),
                "unexpected variable {name}: {printenv}"
            );
        }
        // Every process in the sandbox (bubblewrap's init, the runner, the command).
        let environments = harness
            .run("http:ana", "cat /proc/[0-9]*/environ | tr '\\0' '\\n'")
            .await;
        assert!(
            !environments.contains(CANARY),
            "canary in a sandbox process: {environments}"
        );
        assert!(!environments.contains(PORTER_SECRET));
        println!("canary-check-ran");
        return;
    }
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "no_credential_of_the_agent_reaches_the_sandbox",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD, "1")
        .env("SAINT_MODEL_API_KEY", CANARY)
        .env("GITHUB_TOKEN", CANARY)
        .env("SAINT_CHANNEL_HTTP_TOKEN", CANARY)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("canary-check-ran"),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn the_sandbox_has_no_network() {
    let harness = Harness::start();
    // A real listener on the host's loopback: the sandbox's loopback is its own (down).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "python3 -c \"import socket\ns = socket.socket()\ns.settimeout(2)\ntry:\n    s.connect(('127.0.0.1', {port}))\n    print('connected')\nexcept OSError as error:\n    print('refused', error.errno)\""
    );
    let output = harness.run("http:ana", &script).await;
    assert!(output.starts_with("refused "), "{output}");
    assert!(!output.contains("connected"));
    assert!(
        listener.accept().is_err(),
        "the host listener must see no connection"
    );
    // No interface but a downed loopback, and no route anywhere.
    let interfaces = harness
        .run(
            "http:ana",
            "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
        )
        .await;
    assert_eq!(interfaces, "lo\n[exit code 0]");
    let routes = harness
        .run("http:ana", "tail -n +2 /proc/net/route | wc -l")
        .await;
    assert_eq!(routes, "0\n[exit code 0]");
}

/// The real exec path (policy permit, view, local backend) on a machine where no
/// sandbox can start: a bubblewrap that cannot create namespaces. The command must not
/// run anywhere, and the caller is told exec is unavailable, not given a host shell.
#[tokio::test]
async fn exec_fails_closed_on_the_real_path_when_no_sandbox_can_start() {
    let broken = tempfile::tempdir().unwrap();
    let bwrap = broken.path().join("bwrap");
    fs::write(
        &bwrap,
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n",
    )
    .unwrap();
    fs::set_permissions(&bwrap, fs::Permissions::from_mode(0o755)).unwrap();
    let harness = Harness::start_with(|local| {
        local.bwrap = bwrap.clone();
        local.start_timeout = Duration::from_secs(2);
    });
    let marker = harness.base.path().join("ran-outside-the-sandbox");
    let result = harness
        .exec("http:ana", &format!("touch {}", marker.display()))
        .await;
    match result {
        Err(ToolError::Failed(message)) => {
            assert!(message.contains("sandbox is unavailable"), "{message}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!marker.exists(), "the command ran without a sandbox");
    assert!(
        harness.sandbox_processes().is_empty(),
        "{:?}",
        harness.sandbox_processes()
    );
}

#[tokio::test]
async fn the_real_workspace_is_read_only_at_agent() {
    let harness = Harness::start();
    let output = harness
        .run(
            "http:ana",
            "cat /agent/SOUL.md; touch /agent/new-file; echo more >> /agent/SOUL.md",
        )
        .await;
    assert!(output.starts_with("be kind\n"), "{output}");
    assert!(output.contains("Read-only file system"), "{output}");
    assert!(!output.ends_with("[exit code 0]"));
    assert!(!harness.workspace.join("new-file").exists());
    assert_eq!(
        fs::read_to_string(harness.workspace.join("SOUL.md")).unwrap(),
        "be kind\n"
    );
}

#[tokio::test]
async fn workspace_copy_is_seeded_and_persists_within_a_session_only() {
    let harness = Harness::start();
    let listing = harness
        .run("http:ana", "ls /workspace /workspace/skills/github; pwd")
        .await;
    assert!(
        listing.contains("SOUL.md") && listing.contains("SKILL.md"),
        "{listing}"
    );
    assert!(
        !listing.contains("memory"),
        "memory is never seeded: {listing}"
    );
    assert!(listing.contains("\n/workspace\n"), "{listing}");

    harness
        .run("http:ana", "echo draft-1 > /workspace/note.txt")
        .await;
    let same_session = harness.run("http:ana", "cat /workspace/note.txt").await;
    assert_eq!(same_session, "draft-1\n[exit code 0]");
    let other_session = harness.run("http:marko", "cat /workspace/note.txt").await;
    assert!(other_session.contains("No such file"), "{other_session}");
    // Scratch writes never touch the real workspace.
    assert!(!harness.workspace.join("note.txt").exists());
}

#[tokio::test]
async fn a_blocklisted_command_is_refused_before_anything_runs() {
    let harness = Harness::start();
    let refused = harness
        .exec("http:ana", "touch /workspace/blocked-marker")
        .await;
    assert!(matches!(refused, Err(ToolError::Denied(_))), "{refused:?}");
    let scope = harness.scope("http:ana");
    // Not even a sandbox was started for the session.
    assert!(!harness.sandbox.paths(&scope).run.exists());
    assert!(harness.sandbox_processes().is_empty());
    // A role without a blocklist has no exec at all.
    let external = harness
        .call(
            &harness.context("http:ana", "external"),
            json!({"command": "true"}),
        )
        .await;
    assert!(
        matches!(external, Err(ToolError::Denied(_))),
        "{external:?}"
    );
    harness.run("http:ana", "true").await;
    assert!(
        !harness
            .sandbox
            .paths(&scope)
            .scratch
            .join("blocked-marker")
            .exists()
    );
}

#[tokio::test]
async fn a_timeout_kills_the_command_and_leaves_no_process_behind() {
    let harness = Harness::start();
    let context = harness.context("http:ana", "employee");
    let started = Instant::now();
    let result = harness
        .call(
            &context,
            json!({"command": "sleep 1000.25 & sleep 1000.5", "timeout_seconds": 1}),
        )
        .await;
    assert_eq!(result, Err(ToolError::Timeout(1)));
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(wait_until_gone("1000.25").await, Vec::<String>::new());
    assert_eq!(wait_until_gone("1000.5").await, Vec::<String>::new());
    // The sandbox itself stays warm for the next command.
    assert_eq!(
        harness.run("http:ana", "echo still-here").await,
        "still-here\n[exit code 0]"
    );
}

#[tokio::test]
async fn without_bubblewrap_exec_fails_closed() {
    let outside = tempfile::tempdir().unwrap();
    let marker = outside.path().join("ran-unsandboxed");
    let harness = Harness::start_with(|config| config.bwrap = PathBuf::from("/nonexistent/bwrap"));
    let result = harness
        .exec("http:ana", &format!("touch {}", marker.display()))
        .await;
    let Err(ToolError::Failed(message)) = result else {
        panic!("expected a failure, got {result:?}")
    };
    assert!(message.contains("sandbox is unavailable"), "{message}");
    assert!(!marker.exists(), "the command ran outside a sandbox");
    let scope = harness.scope("http:ana");
    let error = harness
        .sandbox
        .ensure(&scope, &harness.view())
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("failed to run bubblewrap (/nonexistent/bwrap)"),
        "{error}"
    );
}

#[tokio::test]
async fn a_bubblewrap_that_cannot_start_the_sandbox_fails_closed() {
    // A bubblewrap that refuses: e.g. no permission to create namespaces.
    let base = tempfile::tempdir().unwrap();
    let fake = base.path().join("bwrap");
    fs::write(
        &fake,
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n",
    )
    .unwrap();
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();
    let harness = Harness::start_with(|config| config.bwrap = fake.clone());
    let scope = harness.scope("http:ana");
    let error = harness
        .sandbox
        .ensure(&scope, &harness.view())
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("No permissions to create new namespace"),
        "{error}"
    );
    assert!(matches!(
        harness.exec("http:ana", "true").await,
        Err(ToolError::Failed(_))
    ));
}

#[tokio::test]
async fn idle_sandboxes_are_reaped_and_dead_ones_replaced() {
    let harness = Harness::start_with(|config| config.idle_timeout = Duration::ZERO);
    harness
        .run("http:ana", "echo kept > /workspace/kept.txt")
        .await;
    assert!(!harness.sandbox_processes().is_empty());
    assert_eq!(harness.sandbox.reap_idle().await.unwrap(), 1);
    let marker = harness.base.path().join("state").display().to_string();
    assert_eq!(wait_until_gone(&marker).await, Vec::<String>::new());
    // A new sandbox for the same scope finds the scope's scratch copy again.
    assert_eq!(
        harness.run("http:ana", "cat /workspace/kept.txt").await,
        "kept\n[exit code 0]"
    );

    // Kill the sandbox from outside: the next command gets a fresh one.
    for process in harness.sandbox_processes() {
        let pid = process.split(':').next().unwrap();
        let _ = Command::new("kill").args(["-9", pid]).status();
    }
    assert_eq!(wait_until_gone(&marker).await, Vec::<String>::new());
    assert_eq!(
        harness.run("http:ana", "echo again").await,
        "again\n[exit code 0]"
    );
}

#[tokio::test]
async fn output_beyond_the_cap_is_counted_not_shown() {
    let harness = Harness::start();
    let output = harness
        .exec("http:ana", "head -c 100000 /dev/zero | tr '\\0' a")
        .await
        .unwrap();
    assert!(
        output
            .content
            .contains("[… 67232 more bytes of stdout not shown]"),
        "{}",
        &output.content[32000..]
    );
    assert_eq!(output.metering["stdoutBytes"], json!(100000));
    assert_eq!(output.metering["truncated"], json!(true));
}

#[tokio::test]
async fn a_sandbox_cannot_replace_porters_socket_but_still_connects_to_it() {
    let harness = Harness::start();
    let porter_socket = harness.porter.socket_directory.join("porter.sock");
    let before = fs::metadata(&porter_socket).unwrap().ino();
    // Start another scope's sandbox first, so there is a runner socket to go after.
    harness.run("http:bob", "true").await;
    let bob_socket = harness.sandbox.paths(&harness.scope("http:bob")).socket();
    assert!(bob_socket.exists());
    let output = harness
        .run(
            "http:mallory",
            &format!(
                "rm -f /run/saint/porter/porter.sock; echo rm=$?; \
                 mv /run/saint/porter/porter.sock /run/saint/porter/old; echo mv=$?; \
                 python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); \
                 s.bind('/run/saint/porter/porter.sock.new')\" 2>&1 | tail -n 1; \
                 python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); \
                 s.connect('/run/saint/porter/porter.sock'); print('connected')\"; \
                 echo run=$(ls -A /run/saint | tr '\\n' ' '); \
                 echo own=$(ls -A /run/saint/sandbox | tr '\\n' ' '); \
                 test -e {} && echo bob-visible || echo bob-hidden",
                bob_socket.display()
            ),
        )
        .await;
    // Read-only bind: no unlink, no rename, no new socket in Porter's directory...
    assert!(output.contains("rm=1\n"), "{output}");
    assert!(output.contains("mv=1\n"), "{output}");
    assert!(output.contains("Read-only file system"), "{output}");
    // ...yet connect() on the socket still works.
    assert!(output.contains("connected\n"), "{output}");
    // Only Porter's directory and the sandbox's own; no other sandbox's socket.
    assert!(output.contains("run=porter sandbox\n"), "{output}");
    assert!(output.contains("own=runner.sock token\n"), "{output}");
    assert!(output.contains("bob-hidden"), "{output}");
    assert_eq!(fs::metadata(&porter_socket).unwrap().ino(), before);
    assert!(
        !harness
            .porter
            .socket_directory
            .join("porter.sock.new")
            .exists()
    );
    // Porter still answers calls from a sandbox.
    let call = harness.run("http:bob", &format!("{CLI} --version")).await;
    assert!(call.contains("hello-cli 1.0 args=--version"), "{call}");
}

#[tokio::test]
async fn a_porter_cli_cannot_be_pointed_outside_the_callers_view() {
    let harness = Harness::start();
    // The sandbox cannot even enter memory/private (it is not mounted)...
    let output = harness
        .run("http:ana", "cd /agent/memory/private 2>&1; echo cd=$?")
        .await;
    assert!(
        output.contains("cd=2") || output.contains("cd=1"),
        "{output}"
    );
    // ...and naming it as the CLI's working directory gets the call refused by Porter,
    // which runs CLIs on the real workspace.
    let output = harness
        .run(
            "http:ana",
            &format!("CLIPORT_CWD=/agent/memory/private {CLI} --version; echo status=$?"),
        )
        .await;
    assert!(
        output.contains("outside what the caller's role may read"),
        "{output}"
    );
    assert!(!output.contains("hello-cli 1.0"), "{output}");
    // Inside the view (skills/ is readable), and from /workspace, it runs.
    let output = harness
        .run(
            "http:ana",
            &format!("CLIPORT_CWD=/agent/skills {CLI} --version"),
        )
        .await;
    assert!(output.contains("hello-cli 1.0 args=--version"), "{output}");
}

/// A state directory too deep for socket addresses (a long home directory and bot name)
/// still runs commands: the runner's socket goes to a short private directory instead
/// of `exec` waiting for a socket that can never be bound.
#[tokio::test]
async fn exec_works_with_a_state_directory_too_deep_for_socket_paths() {
    let short_root = tempfile::tempdir().unwrap();
    let root = short_root.path().to_path_buf();
    let harness = Harness::start_with(move |local| {
        local.state_directory = local.state_directory.join("d".repeat(120));
        local.short_socket_root = root;
    });
    let output = harness.run("http:ana", "echo deep-state-ok").await;
    assert!(output.starts_with("deep-state-ok\n"), "{output}");
    let socket = harness.sandbox.paths(&harness.scope("http:ana")).socket();
    assert!(
        socket.starts_with(short_root.path()),
        "{}",
        socket.display()
    );
    assert!(socket.as_os_str().len() <= 107);
}
