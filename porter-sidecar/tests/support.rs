//! Shared test harness: the real `porter` daemon on temp sockets with a temp registry
//! and audit log, the sandbox runner's real relay in front of its proxy socket (what
//! every sandbox has on its loopback), and a control-socket client that registers keys
//! the way the agent does.

#![allow(dead_code)]

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Write},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use porter_protocol::registry::Registry;
use saint_config::sandbox_contract::PORTER_RELAY_ADDRESS;

pub struct Daemon {
    pub directory: tempfile::TempDir,
    pub proxy_socket: PathBuf,
    pub control_socket: PathBuf,
    pub ca_file: PathBuf,
    pub registry_path: PathBuf,
    pub audit_log: PathBuf,
    /// The relay's loopback address (a sandbox's `127.0.0.1:3128`).
    pub relay: String,
    pub process: Child,
    _relay_runtime: tokio::runtime::Runtime,
}

/// A registered key and its command's environment, with the proxy address pointed at
/// this test's relay.
pub struct Registered {
    pub key: String,
    pub env: BTreeMap<String, String>,
}

impl Daemon {
    /// Porter serving `registry`, with `extra_arguments`.
    pub fn start(registry: &Registry, extra_arguments: &[&str]) -> Self {
        Self::try_start(&registry.to_json(), extra_arguments)
            .unwrap_or_else(|output| panic!("porter exited before it was ready: {output}"))
    }

    /// Starts porter with a registry file holding `registry_text` and waits until its
    /// proxy socket exists; its exit status and stderr when it stopped before that.
    pub fn try_start(registry_text: &str, extra_arguments: &[&str]) -> Result<Self, String> {
        let directory = tempfile::tempdir().unwrap();
        let registry_path = directory.path().join("registry.json");
        std::fs::write(&registry_path, registry_text).unwrap();
        Self::start_with_registry_path(directory, registry_path, extra_arguments)
    }

    pub fn start_with_registry_path(
        directory: tempfile::TempDir,
        registry_path: PathBuf,
        extra_arguments: &[&str],
    ) -> Result<Self, String> {
        let proxy_socket = directory.path().join("run/proxy.sock");
        let ca_file = directory.path().join("run/ca.pem");
        let control_socket = directory.path().join("control/control.sock");
        let audit_log = directory.path().join("logs/porter.jsonl");
        let stderr = directory.path().join("porter.stderr");
        let mut process = Command::new(env!("CARGO_BIN_EXE_porter"))
            .arg("--proxy-socket")
            .arg(&proxy_socket)
            .arg("--ca-certificate")
            .arg(&ca_file)
            .arg("--control-socket")
            .arg(&control_socket)
            .arg("--registry")
            .arg(&registry_path)
            .arg("--audit-log")
            .arg(&audit_log)
            .args(["--reload-interval-ms", "100"])
            .args(extra_arguments)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", directory.path())
            .env("PORTER_LOG", "warn")
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while !proxy_socket.exists() {
            if let Some(status) = process.try_wait().unwrap() {
                return Err(format!(
                    "{status}: {}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                ));
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "porter did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let relay_runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = relay_runtime
            .block_on(porter_protocol::relay::bind("127.0.0.1:0".parse().unwrap()))
            .unwrap();
        let relay = listener.local_addr().unwrap().to_string();
        relay_runtime.spawn(porter_protocol::relay::serve(
            listener,
            proxy_socket.clone(),
        ));
        Ok(Self {
            directory,
            proxy_socket,
            control_socket,
            ca_file,
            registry_path,
            audit_log,
            relay,
            process,
            _relay_runtime: relay_runtime,
        })
    }

    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    /// One control line and its answer.
    pub fn control(&self, line: &str) -> serde_json::Value {
        let mut stream = UnixStream::connect(&self.control_socket).unwrap();
        stream.write_all(format!("{line}\n").as_bytes()).unwrap();
        let mut answer = String::new();
        BufReader::new(stream).read_line(&mut answer).unwrap();
        serde_json::from_str(&answer).unwrap()
    }

    /// Registers a key for a command of `contact` with `role`, as the agent does.
    pub fn register(&self, contact: &str, role: &str) -> Registered {
        let answer = self.control(
            &serde_json::json!({
                "op": "register", "session": format!("s-{contact}"), "contact": contact,
                "role": role, "ttlSeconds": 300, "command": "sha256:test"
            })
            .to_string(),
        );
        assert_eq!(answer["ok"], true, "{answer}");
        let mut env: BTreeMap<String, String> =
            serde_json::from_value(answer["env"].clone()).unwrap();
        for value in env.values_mut() {
            // The sandbox's relay listens on 127.0.0.1:3128 in its own network
            // namespace; here the test's relay does, on some free port.
            *value = value.replace(PORTER_RELAY_ADDRESS, &self.relay);
            *value = value.replace(
                saint_config::sandbox_contract::PORTER_CA_PATH,
                &self.ca_file.to_string_lossy(),
            );
        }
        Registered {
            key: answer["token"].as_str().unwrap().to_owned(),
            env,
        }
    }

    pub fn revoke(&self, key: &str) {
        let answer = self.control(&serde_json::json!({"op": "revoke", "token": key}).to_string());
        assert_eq!(answer["revoked"], true, "{answer}");
    }

    /// A command running on this machine with `command`'s environment only (plus PATH,
    /// HOME and git's identity), in `directory`.
    pub fn run(
        &self,
        command: &Registered,
        directory: &Path,
        program: &str,
        arguments: &[&str],
    ) -> std::process::Output {
        Command::new(program)
            .args(arguments)
            .current_dir(directory)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", directory)
            .env("GH_PROMPT_DISABLED", "1")
            .env("GH_NO_UPDATE_NOTIFIER", "1")
            .env("GIT_AUTHOR_NAME", "Ana")
            .env("GIT_AUTHOR_EMAIL", "ana@example.com")
            .env("GIT_COMMITTER_NAME", "Ana")
            .env("GIT_COMMITTER_EMAIL", "ana@example.com")
            .envs(&command.env)
            .output()
            .unwrap()
    }

    /// Audit lines so far: complete lines only — Porter may be appending one while
    /// the test reads, and a line is only whole once its newline is written.
    pub fn audit(&self) -> Vec<serde_json::Value> {
        let text = self.raw_log_text();
        let complete = match text.rfind('\n') {
            Some(end) => &text[..end],
            None => "",
        };
        complete
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// The proxy's request decisions so far.
    pub fn decisions(&self) -> Vec<serde_json::Value> {
        self.audit()
            .into_iter()
            .filter(|line| line["kind"] == "request")
            .collect()
    }

    pub fn raw_log_text(&self) -> String {
        std::fs::read_to_string(&self.audit_log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

pub fn text(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A fresh random GitHub-looking token (letters and digits, so no accidental hex match).
pub fn random_secret() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = [0_u8; 36];
    getrandom::fill(&mut bytes).unwrap();
    let tail: String = bytes
        .iter()
        .map(|byte| char::from(ALPHABET[usize::from(*byte) % ALPHABET.len()]))
        .collect();
    format!("ghp_{tail}")
}

/// Peak resident set size of a process in KiB (VmHWM).
pub fn peak_rss_kib(pid: u32) -> u64 {
    status_field(pid, "VmHWM:")
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap()
}

/// A field of `/proc/<pid>/status`, trimmed.
pub fn status_field(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Replaces `path` the way a ConfigMap update does (write aside, rename over), so the
/// daemon's reload loop never sees a half-written file.
pub fn write_atomically(path: &Path, contents: &str) {
    let staged = path.with_extension("staged");
    std::fs::write(&staged, contents).unwrap();
    std::fs::rename(&staged, path).unwrap();
}
