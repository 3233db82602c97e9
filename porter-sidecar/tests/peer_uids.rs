//! Porter's peer-uid gate with the bot pod's real uids: the real `porter` daemon runs as
//! the Porter uid with the flags the operator gives it (calls from the sandbox uid,
//! control from the agent uid, both from `saint_config::uids`), and real processes
//! running as the sandbox, agent and a stranger uid connect to its unix sockets. Every
//! process is in the shared group, as in the pod, so the sockets' mode lets all of them
//! connect and only the gate can tell them apart.
//!
//! Starting processes as other uids needs root: the test fails, saying so, without it.
//! Its own harness (`harness = false`): the same binary, started with
//! [`CLIENT_SOCKET_ENV`] set, is the control-socket client running as another uid.

use std::{
    io::{BufRead, BufReader, Write},
    os::unix::{fs::PermissionsExt, net::UnixStream, process::CommandExt},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use porter_protocol::registry::{CliEntry, Registry};
use saint_config::uids::{AGENT_UID, PORTER_UID, SANDBOX_UID, SHARED_GID};

/// Set (to the control socket's path) when this binary runs as the control client.
const CLIENT_SOCKET_ENV: &str = "PORTER_PEER_UIDS_CONTROL_SOCKET";
/// A uid none of the pod's processes has.
const STRANGER_UID: u32 = 4242;
const REGISTER: &str =
    r#"{"op":"register","session":"s-uids","contact":"ana","role":"owner","ttlSeconds":60}"#;

/// One scenario against the shared pod: a named function that panics on failure.
type Scenario = fn(&Pod);

fn main() {
    if let Ok(socket) = std::env::var(CLIENT_SOCKET_ENV) {
        let line = std::env::args().nth(1).expect("a request line");
        std::process::exit(control_client(Path::new(&socket), &line));
    }
    assert!(
        nix::unistd::geteuid().is_root(),
        "peer_uids starts processes as the agent, Porter and sandbox uids and must run as \
         root (it does in CI and in ./test.sh)"
    );
    let pod = Pod::start();
    let tests: [(&str, Scenario); 5] = [
        (
            "the_agent_uid_registers_tokens_on_the_control_socket",
            the_agent_uid_registers_tokens_on_the_control_socket,
        ),
        (
            "the_sandbox_uid_calls_porter_with_the_agents_token",
            the_sandbox_uid_calls_porter_with_the_agents_token,
        ),
        (
            "the_sandbox_uid_is_refused_on_the_control_socket",
            the_sandbox_uid_is_refused_on_the_control_socket,
        ),
        (
            "the_agent_uid_is_refused_on_the_call_socket",
            the_agent_uid_is_refused_on_the_call_socket,
        ),
        (
            "another_uid_is_refused_on_both_sockets",
            another_uid_is_refused_on_both_sockets,
        ),
    ];
    println!("\nrunning {} tests", tests.len());
    let mut failed = Vec::new();
    for (name, test) in tests {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| test(&pod))) {
            Ok(()) => println!("test {name} ... ok"),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed.push(name);
            }
        }
    }
    let passed = tests.len() - failed.len();
    drop(pod);
    if failed.is_empty() {
        println!("\ntest result: ok. {passed} passed; 0 failed\n");
    } else {
        println!(
            "\ntest result: FAILED. {passed} passed; {} failed: {}\n",
            failed.len(),
            failed.join(", ")
        );
        std::process::exit(101);
    }
}

/// Sends one line on the control socket and prints the one-line answer.
fn control_client(socket: &Path, line: &str) -> i32 {
    let mut stream = match UnixStream::connect(socket) {
        Ok(stream) => stream,
        Err(error) => {
            eprintln!("failed to connect to {}: {error}", socket.display());
            return 3;
        }
    };
    // Porter may answer a refused peer and close before reading: the answer still counts.
    let _ = stream.write_all(format!("{line}\n").as_bytes());
    let mut answer = String::new();
    if let Err(error) = BufReader::new(stream).read_line(&mut answer) {
        eprintln!("failed to read the answer: {error}");
        return 3;
    }
    print!("{answer}");
    0
}

/// Porter in a directory laid out like the pod's: everything owned by the Porter uid and
/// the shared group, the binaries copied out of the build directory (under `/root`,
/// which other uids cannot enter).
struct Pod {
    /// Removed (by root, with everything Porter wrote) when the test ends.
    _directory: tempfile::TempDir,
    bin: PathBuf,
    workspace: PathBuf,
    socket: PathBuf,
    control_socket: PathBuf,
    audit_log: PathBuf,
    porter: Child,
}

impl Pod {
    fn start() -> Self {
        let directory = tempfile::Builder::new()
            .prefix("porter-peer-uids")
            .tempdir_in("/tmp")
            .unwrap();
        let root = directory.path().to_owned();
        let bin = root.join("bin");
        std::fs::create_dir(&bin).unwrap();
        for (name, source) in [
            ("porter", env!("CARGO_BIN_EXE_porter")),
            ("porter-supervise", env!("CARGO_BIN_EXE_porter-supervise")),
            ("cliport-proxy", env!("CARGO_BIN_EXE_cliport-proxy")),
        ] {
            std::fs::copy(source, bin.join(name)).unwrap();
        }
        std::fs::copy(std::env::current_exe().unwrap(), bin.join("control-client")).unwrap();
        let workspace = root.join("workspace");
        std::fs::create_dir(&workspace).unwrap();
        let registry = root.join("registry.json");
        // `id -u` tells which uid a brokered CLI runs as.
        let mut clis = Registry::default();
        clis.clis.insert(
            "id".into(),
            CliEntry {
                bin: "/usr/bin/id".into(),
                timeout_seconds: 30,
                ..CliEntry::default()
            },
        );
        std::fs::write(&registry, clis.to_json()).unwrap();
        for path in [&root, &workspace, &registry] {
            std::os::unix::fs::chown(path, Some(PORTER_UID), Some(SHARED_GID)).unwrap();
        }
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o770)).unwrap();
        std::fs::set_permissions(&workspace, std::fs::Permissions::from_mode(0o770)).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();

        let socket = root.join("run/porter.sock");
        let control_socket = root.join("control/control.sock");
        let audit_log = root.join("logs/porter.jsonl");
        // The flags the operator's Deployment passes (PORTER_ALLOWED_UIDS,
        // PORTER_CONTROL_UIDS), from the same constants.
        let mut porter = Command::new(bin.join("porter"))
            .arg("--socket")
            .arg(&socket)
            .arg("--control-socket")
            .arg(&control_socket)
            .arg("--registry")
            .arg(&registry)
            .arg("--workspace")
            .arg(&workspace)
            .arg("--audit-log")
            .arg(&audit_log)
            .arg("--call-homes")
            .arg(root.join("homes"))
            .args(["--allowed-uid", &SANDBOX_UID.to_string()])
            .args(["--control-uid", &AGENT_UID.to_string()])
            .args([
                "--kill-grace-seconds",
                "1",
                "--shutdown-deadline-seconds",
                "1",
            ])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &root)
            .env("PORTER_LOG", "warn")
            .uid(PORTER_UID)
            .gid(SHARED_GID)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while !socket.exists() {
            if let Some(status) = porter.try_wait().unwrap() {
                panic!("porter running as uid {PORTER_UID} exited at start: {status}");
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "porter did not bind {} within 20 s",
                socket.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            _directory: directory,
            bin,
            workspace,
            socket,
            control_socket,
            audit_log,
            porter,
        }
    }

    /// One control request from a process running as `uid` (in the shared group); the
    /// answer as JSON.
    fn control(&self, uid: u32, line: &str) -> serde_json::Value {
        let output = Command::new(self.bin.join("control-client"))
            .arg(line)
            .env_clear()
            .env(CLIENT_SOCKET_ENV, &self.control_socket)
            .uid(uid)
            .gid(SHARED_GID)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "the control client as uid {uid} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
            panic!(
                "control answer to uid {uid} is not JSON ({error}): {}",
                String::from_utf8_lossy(&output.stdout)
            )
        })
    }

    /// A token for the sandbox's commands, registered as the agent.
    fn token(&self) -> String {
        let answer = self.control(AGENT_UID, REGISTER);
        assert_eq!(answer["ok"], true, "{answer}");
        answer["token"].as_str().unwrap().to_owned()
    }

    /// `id -u` through `cliport-proxy`, the sandbox's shim, running as `uid`.
    fn call(&self, uid: u32, token: &str) -> Output {
        Command::new(self.bin.join("cliport-proxy"))
            .args(["id", "-u"])
            .env_clear()
            .env("CLIPORT_SOCKET", &self.socket)
            .env("CLIPORT_TOKEN", token)
            .env("CLIPORT_CWD", "/workspace")
            .current_dir(&self.workspace)
            .uid(uid)
            .gid(SHARED_GID)
            .output()
            .unwrap()
    }

    /// The audit line of the latest call (polled: Porter writes it as the call ends).
    fn last_audit_after(&self, count: usize) -> serde_json::Value {
        let started = Instant::now();
        loop {
            let text = std::fs::read_to_string(&self.audit_log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            if lines.len() > count && text.ends_with('\n') {
                return serde_json::from_str(lines[lines.len() - 1]).unwrap();
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "no audit line after {count} within 10 s: {text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn audit_lines(&self) -> usize {
        std::fs::read_to_string(&self.audit_log)
            .unwrap_or_default()
            .lines()
            .count()
    }

    /// A call by `uid` with a valid token is refused by the gate, and audited as such.
    fn assert_call_refused(&self, uid: u32) {
        let token = self.token();
        let before = self.audit_lines();
        let output = self.call(uid, &token);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && stderr.contains(&format!("uid {uid} may not call porter")),
            "a call as uid {uid} was not refused by the gate: {:?}, stdout {:?}, stderr {stderr:?}",
            output.status,
            String::from_utf8_lossy(&output.stdout)
        );
        let line = self.last_audit_after(before);
        assert_eq!(
            (line["outcome"].as_str(), line["peer"]["uid"].as_u64()),
            (Some("peer_denied"), Some(u64::from(uid))),
            "{line}"
        );
    }

    fn assert_control_refused(&self, uid: u32) {
        let answer = self.control(uid, REGISTER);
        assert_eq!(
            answer,
            serde_json::json!({"ok": false, "error": "peer uid not allowed"}),
            "uid {uid} on the control socket"
        );
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = self.porter.kill();
        let _ = self.porter.wait();
    }
}

fn the_agent_uid_registers_tokens_on_the_control_socket(pod: &Pod) {
    let answer = pod.control(AGENT_UID, REGISTER);
    assert_eq!(answer["ok"], true, "{answer}");
    let token = answer["token"].as_str().unwrap();
    let revoke = format!(r#"{{"op":"revoke","token":"{token}"}}"#);
    assert_eq!(pod.control(AGENT_UID, &revoke)["revoked"], true);
}

fn the_sandbox_uid_calls_porter_with_the_agents_token(pod: &Pod) {
    let token = pod.token();
    let before = pod.audit_lines();
    let output = pod.call(SANDBOX_UID, &token);
    assert!(
        output.status.success(),
        "the sandbox's call failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The CLI runs as Porter, not as its caller.
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        PORTER_UID.to_string()
    );
    let line = pod.last_audit_after(before);
    assert_eq!(line["peer"]["uid"], SANDBOX_UID, "{line}");
    assert_eq!(line["exit"], 0, "{line}");
}

fn the_sandbox_uid_is_refused_on_the_control_socket(pod: &Pod) {
    pod.assert_control_refused(SANDBOX_UID);
}

fn the_agent_uid_is_refused_on_the_call_socket(pod: &Pod) {
    pod.assert_call_refused(AGENT_UID);
}

fn another_uid_is_refused_on_both_sockets(pod: &Pod) {
    pod.assert_call_refused(STRANGER_UID);
    pod.assert_control_refused(STRANGER_UID);
}
