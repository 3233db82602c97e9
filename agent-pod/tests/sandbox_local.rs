//! The `exec` tool end to end on this machine: real bubblewrap, the real
//! `saint-sandbox-runner` (and its relay to Porter), the real Porter daemon, Debian's
//! real `gh` and `git` inside the sandbox, and Porter's HTTPS stand-in for GitHub.
//! The adversarial suite against the same setup is `porter_sandbox.rs`.
//!
//! Needs `bwrap` (Debian `bubblewrap`) and the binaries of `saint-sandbox-runner` and
//! `porter` built into the same target directory (`cargo build -p saint-sandbox-runner
//! -p porter`); a missing piece fails the test with the reason, never skips it.

mod sandbox_harness;

use std::{
    fs,
    os::unix::fs::{MetadataExt, PermissionsExt},
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use saint_sandbox::Sandbox;
use saint_tools::ToolError;
use serde_json::json;

use sandbox_harness::*;

#[tokio::test]
async fn a_cli_in_the_sandbox_reaches_its_host_through_porter_and_output_comes_back() {
    let harness = Harness::start();
    let output = harness
        .exec(
            "http:ana",
            &format!("{CLI} api repos/o/r/pulls --jq '.[0].title'; echo done >&2"),
        )
        .await
        .unwrap();
    assert!(
        output.content.starts_with("Fix the thing\n"),
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
    // The stand-in got the real token; the sandbox held a placeholder.
    let requests = harness.porter.standin.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].credential().as_deref(), Some(PORTER_SECRET));

    let plain = harness.exec("http:ana", "echo plain").await.unwrap();
    assert_eq!(plain.metering["porter"], json!(false));
}

#[tokio::test]
async fn the_proxy_key_and_placeholder_live_only_for_their_command() {
    let harness = Harness::start();
    let first = harness
        .run(
            "http:ana",
            "printenv HTTPS_PROXY > /workspace/old-proxy; printenv GH_TOKEN > /workspace/old-token; cut -c1-10 /workspace/old-token",
        )
        .await;
    assert!(first.starts_with("porter_ph_\n"), "a placeholder: {first}");
    // Replaying the first command's key in a later command fails: it was revoked.
    let replay = harness
        .run(
            "http:ana",
            &format!("HTTPS_PROXY=$(cat /workspace/old-proxy) {CLI} api user"),
        )
        .await;
    assert!(!replay.ends_with("[exit code 0]"), "{replay}");
    // So does the first command's placeholder through this command's live key.
    let stale = harness
        .run(
            "http:ana",
            &format!("GH_TOKEN=$(cat /workspace/old-token) {CLI} api user"),
        )
        .await;
    assert!(!stale.ends_with("[exit code 0]"), "{stale}");
    assert!(harness.porter.standin.requests().is_empty());
    // While the command's own key and placeholder work.
    let fresh = harness
        .run("http:ana", &format!("{CLI} api user --jq .login"))
        .await;
    assert_eq!(fresh, "o\n[exit code 0]");
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
            // Porter's answer for the command (proxy, CA, placeholders, git) and the
            // runner's base.
            let from_porter = name.starts_with("GIT_CONFIG_")
                || [
                    "HTTPS_PROXY",
                    "https_proxy",
                    "SSL_CERT_FILE",
                    "GIT_SSL_CAINFO",
                    "CURL_CA_BUNDLE",
                    "NODE_EXTRA_CA_CERTS",
                    "REQUESTS_CA_BUNDLE",
                    "GIT_TERMINAL_PROMPT",
                    "GH_TOKEN",
                ]
                .contains(name);
            assert!(
                from_porter || ["HOME", "LANG", "PATH", "PWD", "SHLVL", "_"].contains(name),
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
    let porter_socket = harness.porter.socket_directory.join("proxy.sock");
    let before = fs::metadata(&porter_socket).unwrap().ino();
    // Start another scope's sandbox first, so there is a runner socket to go after.
    harness.run("http:bob", "true").await;
    let bob_socket = harness.sandbox.paths(&harness.scope("http:bob")).socket();
    assert!(bob_socket.exists());
    let output = harness
        .run(
            "http:mallory",
            &format!(
                "rm -f /run/saint/porter/proxy.sock; echo rm=$?; \
                 mv /run/saint/porter/proxy.sock /run/saint/porter/old; echo mv=$?; \
                 echo forged > /run/saint/porter/ca.pem; echo ca=$?; \
                 python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); \
                 s.bind('/run/saint/porter/proxy.sock.new')\" 2>&1 | tail -n 1; \
                 python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); \
                 s.connect('/run/saint/porter/proxy.sock'); print('connected')\"; \
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
    assert!(
        output.contains("ca=2\n"),
        "the CA certificate cannot be forged: {output}"
    );
    assert!(output.contains("Read-only file system"), "{output}");
    // ...yet connect() on the socket still works.
    assert!(output.contains("connected\n"), "{output}");
    // Only Porter's directory, the browser's socket directory (read-only, outside the
    // sandbox's own) and the sandbox's own; no other sandbox's socket.
    assert!(output.contains("run=browser porter sandbox\n"), "{output}");
    assert!(output.contains("own=runner.sock token\n"), "{output}");
    assert!(output.contains("bob-hidden"), "{output}");
    assert_eq!(fs::metadata(&porter_socket).unwrap().ino(), before);
    assert!(
        !harness
            .porter
            .socket_directory
            .join("proxy.sock.new")
            .exists()
    );
    // Porter still answers commands from a sandbox.
    let call = harness
        .run("http:bob", &format!("{CLI} api user --jq .login"))
        .await;
    assert_eq!(call, "o\n[exit code 0]");
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
