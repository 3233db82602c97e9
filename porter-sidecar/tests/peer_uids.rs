//! Porter's peer-uid gate with the bot pod's real uids: the real `porter` daemon runs as
//! the Porter uid with the flags the operator gives it (proxy connections from the
//! sandbox uid, control from the agent uid, both from `saint_config::uids`), and real
//! processes running as the sandbox, agent and a stranger uid connect to its unix
//! sockets. Every process is in the shared group, as in the pod, so the sockets' mode
//! lets all of them connect and only the gate can tell them apart. The secret file is
//! Porter's alone: the sandbox uid cannot open it, nor Porter's `/proc` files.
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

use porter_protocol::registry::{CliEntry, Registry, SecretSource};
use saint_config::uids::{AGENT_UID, PORTER_UID, SANDBOX_UID, SHARED_GID};

/// Set (to the control socket's path) when this binary runs as the control client.
const CLIENT_SOCKET_ENV: &str = "PORTER_PEER_UIDS_CONTROL_SOCKET";
/// Set (to the proxy socket's path) when this binary runs as the proxy client.
const PROXY_SOCKET_ENV: &str = "PORTER_PEER_UIDS_PROXY_SOCKET";
/// The credential's secret, in a file only Porter's uid may read.
const SECRET: &str = "ghp_peer_uids_secret_0123456789";
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
    if let Ok(socket) = std::env::var(PROXY_SOCKET_ENV) {
        let key = std::env::args().nth(1).expect("a key");
        std::process::exit(proxy_client(Path::new(&socket), &key));
    }
    assert!(
        nix::unistd::geteuid().is_root(),
        "peer_uids starts processes as the agent, Porter and sandbox uids and must run as \
         root (it does in CI and in ./test.sh)"
    );
    let pod = Pod::start();
    let tests: [(&str, Scenario); 7] = [
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
            "the_agent_uid_is_refused_on_the_proxy_socket",
            the_agent_uid_is_refused_on_the_proxy_socket,
        ),
        (
            "another_uid_is_refused_on_both_sockets",
            another_uid_is_refused_on_both_sockets,
        ),
        (
            "the_sandbox_uid_cannot_open_the_secret_or_porters_process_files",
            the_sandbox_uid_cannot_open_the_secret_or_porters_process_files,
        ),
        (
            "porter_is_sealed_against_starting_programs",
            porter_is_sealed_against_starting_programs,
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

/// Sends a `CONNECT` with `key` on the proxy socket and prints Porter's status line
/// (`closed` when Porter closed the connection without one).
fn proxy_client(socket: &Path, key: &str) -> i32 {
    use base64::{Engine, engine::general_purpose::STANDARD};
    let mut stream = match UnixStream::connect(socket) {
        Ok(stream) => stream,
        Err(error) => {
            eprintln!("failed to connect to {}: {error}", socket.display());
            return 3;
        }
    };
    let head = format!(
        "CONNECT api.github.com:443 HTTP/1.1\r\nProxy-Authorization: Basic {}\r\n\r\n",
        STANDARD.encode(format!("porter:{key}"))
    );
    let _ = stream.write_all(head.as_bytes());
    let mut status = String::new();
    match BufReader::new(stream).read_line(&mut status) {
        Ok(0) | Err(_) => println!("closed"),
        Ok(_) => print!("{status}"),
    }
    0
}

/// Porter in a directory laid out like the pod's: everything owned by the Porter uid and
/// the shared group, the binaries copied out of the build directory (under `/root`,
/// which other uids cannot enter).
struct Pod {
    /// Removed (by root, with everything Porter wrote) when the test ends.
    _directory: tempfile::TempDir,
    bin: PathBuf,
    secret_file: PathBuf,
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
        std::fs::copy(env!("CARGO_BIN_EXE_porter"), bin.join("porter")).unwrap();
        std::fs::copy(std::env::current_exe().unwrap(), bin.join("control-client")).unwrap();
        // The secret: Porter's uid alone may read it (as the operator mounts it into the
        // porter container only).
        let secret_file = root.join("secret");
        std::fs::write(&secret_file, SECRET).unwrap();
        std::os::unix::fs::chown(&secret_file, Some(PORTER_UID), Some(PORTER_UID)).unwrap();
        std::fs::set_permissions(&secret_file, std::fs::Permissions::from_mode(0o400)).unwrap();
        let registry = root.join("registry.json");
        let mut clis = Registry::default();
        clis.clis.insert(
            "gh".into(),
            CliEntry {
                hosts: vec!["api.github.com".into()],
                secret: SecretSource::File(secret_file.to_string_lossy().into_owned()),
                ..CliEntry::default()
            },
        );
        std::fs::write(&registry, clis.to_json()).unwrap();
        for path in [&root, &registry] {
            std::os::unix::fs::chown(path, Some(PORTER_UID), Some(SHARED_GID)).unwrap();
        }
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o770)).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();

        let socket = root.join("run/proxy.sock");
        let control_socket = root.join("control/control.sock");
        let audit_log = root.join("logs/porter.jsonl");
        // The flags the operator's Deployment passes (PORTER_ALLOWED_UIDS,
        // PORTER_CONTROL_UIDS), from the same constants.
        let mut porter = Command::new(bin.join("porter"))
            .arg("--proxy-socket")
            .arg(&socket)
            .arg("--ca-certificate")
            .arg(root.join("run/ca.pem"))
            .arg("--control-socket")
            .arg(&control_socket)
            .arg("--registry")
            .arg(&registry)
            .arg("--audit-log")
            .arg(&audit_log)
            .args(["--allowed-uid", &SANDBOX_UID.to_string()])
            .args(["--control-uid", &AGENT_UID.to_string()])
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
            secret_file,
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

    /// A `CONNECT` with `key` on the proxy socket from a process running as `uid`:
    /// Porter's status line, or `closed`.
    fn connect(&self, uid: u32, key: &str) -> String {
        let output = Command::new(self.bin.join("control-client"))
            .arg(key)
            .env_clear()
            .env(PROXY_SOCKET_ENV, &self.socket)
            .uid(uid)
            .gid(SHARED_GID)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "the proxy client as uid {uid} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// A command run as `uid` in the shared group.
    fn run_as(&self, uid: u32, script: &str) -> Output {
        Command::new("/bin/sh")
            .args(["-c", script])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .current_dir("/")
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

    /// A connection by `uid` with a live key is closed by the gate, and audited as such.
    fn assert_call_refused(&self, uid: u32) {
        let token = self.token();
        let before = self.audit_lines();
        let status = self.connect(uid, &token);
        assert_eq!(status, "closed", "uid {uid} got a tunnel");
        let line = self.last_audit_after(before);
        assert_eq!(
            (line["decision"].as_str(), line["uid"].as_u64()),
            (Some("refused"), Some(u64::from(uid))),
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
    let status = pod.connect(SANDBOX_UID, &token);
    assert!(
        status.starts_with("HTTP/1.1 200"),
        "the sandbox's CONNECT: {status}"
    );
}

fn the_sandbox_uid_is_refused_on_the_control_socket(pod: &Pod) {
    pod.assert_control_refused(SANDBOX_UID);
}

fn the_agent_uid_is_refused_on_the_proxy_socket(pod: &Pod) {
    pod.assert_call_refused(AGENT_UID);
}

fn another_uid_is_refused_on_both_sockets(pod: &Pod) {
    pod.assert_call_refused(STRANGER_UID);
    pod.assert_control_refused(STRANGER_UID);
}

fn the_sandbox_uid_cannot_open_the_secret_or_porters_process_files(pod: &Pod) {
    let pid = pod.porter.id();
    for path in [
        pod.secret_file.display().to_string(),
        format!("/proc/{pid}/environ"),
        format!("/proc/{pid}/mem"),
    ] {
        let output = pod.run_as(SANDBOX_UID, &format!("cat '{path}'"));
        assert!(!output.status.success(), "the sandbox uid opened {path}");
        assert!(!String::from_utf8_lossy(&output.stdout).contains(SECRET));
    }
}

fn porter_is_sealed_against_starting_programs(pod: &Pod) {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pod.porter.id())).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    assert_eq!(field("Seccomp:"), "2", "porter runs under a seccomp filter");
    assert_eq!(field("NoNewPrivs:"), "1");
    // The same filter, installed by `porter __check-seal`, refuses every spawn.
    let check = Command::new(pod.bin.join("porter"))
        .arg("__check-seal")
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "a sealed porter started a program: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(String::from_utf8_lossy(&check.stdout).contains("spawn refused"));
}
