//! Shared test harness: a real `porter` daemon on a temp socket with a temp workspace,
//! registry, tokens file and audit log, plus a raw protocol client.

#![allow(dead_code)]

use std::{
    collections::BTreeMap,
    io::Write,
    os::unix::{fs::PermissionsExt, net::UnixStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use porter_protocol::{
    CliRequest, ErrorCode, Frame, PROTOCOL_VERSION, Request,
    registry::{CliEntry, Registry},
    sync_io::{read_frame, write_frame},
};

pub const TOKEN: &str = "test-token-0123456789abcdef";
pub const EMPLOYEE_TOKEN: &str = "employee-token-0123456789";
pub const CANARY: &str = "CANARY-ghp_s3cr3tV4lu3-do-not-leak";

pub struct Daemon {
    pub directory: tempfile::TempDir,
    pub workspace: PathBuf,
    pub socket: PathBuf,
    pub control_socket: PathBuf,
    pub registry_path: PathBuf,
    pub tokens_path: PathBuf,
    pub audit_log: PathBuf,
    pub bin_dir: PathBuf,
    pub process: Child,
}

/// Writes an executable shell script test CLI and returns its path.
pub fn script(directory: &Path, name: &str, body: &str) -> String {
    let path = directory.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_string_lossy().into_owned()
}

pub fn cli(bin: &str) -> CliEntry {
    CliEntry {
        bin: bin.to_owned(),
        timeout_seconds: 30,
        ..CliEntry::default()
    }
}

impl Daemon {
    /// Starts the daemon with the CLIs that `build` registers (given the bin directory).
    pub fn start(build: impl FnOnce(&Path, &mut Registry)) -> Self {
        Self::start_with(build, &[])
    }

    pub fn start_with(build: impl FnOnce(&Path, &mut Registry), extra_arguments: &[&str]) -> Self {
        Self::try_start_with(build, extra_arguments)
            .unwrap_or_else(|status| panic!("porter exited before it was ready: {status}"))
    }

    /// A daemon serving `/metrics` on a free loopback port, and that address. The port
    /// is found free and released before porter binds it, so a test running beside this
    /// one may take it first: porter then exits at start, and another port is tried.
    pub fn start_with_metrics(
        build: impl Fn(&Path, &mut Registry),
        extra_arguments: &[&str],
    ) -> (Self, String) {
        let mut last_exit = None;
        for _ in 0..5 {
            let address = free_loopback_address();
            let arguments: Vec<&str> = ["--metrics-listen", address.as_str()]
                .into_iter()
                .chain(extra_arguments.iter().copied())
                .collect();
            match Self::try_start_with(&build, &arguments) {
                Ok(daemon) => return (daemon, address),
                Err(status) => last_exit = Some(status),
            }
        }
        panic!("porter exited at start five times, each on another port: {last_exit:?}");
    }

    /// Starts porter and waits until its call socket exists; its exit status when it
    /// stopped before that.
    fn try_start_with(
        build: impl FnOnce(&Path, &mut Registry),
        extra_arguments: &[&str],
    ) -> Result<Self, std::process::ExitStatus> {
        let directory = tempfile::tempdir().unwrap();
        let workspace = directory.path().join("workspace");
        std::fs::create_dir_all(workspace.join("repo")).unwrap();
        let bin_dir = directory.path().join("bin");
        std::fs::create_dir_all(&bin_dir).unwrap();
        let mut registry = Registry::default();
        build(&bin_dir, &mut registry);
        let registry_path = directory.path().join("registry.json");
        std::fs::write(&registry_path, registry.to_json()).unwrap();
        let tokens = directory.path().join("tokens.json");
        std::fs::write(
            &tokens,
            format!(r#"{{"tokens":[{{"token":"{TOKEN}","session":"s-local","contact":"owner","role":"owner"}},{{"token":"{EMPLOYEE_TOKEN}","session":"s-emp","contact":"ana","role":"employee"}}]}}"#),
        )
        .unwrap();
        let socket = directory.path().join("run/porter.sock");
        let control_socket = directory.path().join("control/control.sock");
        let audit_log = directory.path().join("logs/porter.jsonl");
        let mut command = Command::new(env!("CARGO_BIN_EXE_porter"));
        command
            .arg("--socket")
            .arg(&socket)
            .arg("--control-socket")
            .arg(&control_socket)
            .arg("--registry")
            .arg(&registry_path)
            .arg("--workspace")
            .arg(&workspace)
            .arg("--audit-log")
            .arg(&audit_log)
            .arg("--tokens-file")
            .arg(&tokens)
            // Each daemon its own homes root: the default is one per uid in the temp
            // directory, which every daemon empties at start, so parallel tests would
            // delete each other's call homes mid-call.
            .arg("--call-homes")
            .arg(directory.path().join("call-homes"))
            .args([
                "--kill-grace-seconds",
                "1",
                "--reload-interval-ms",
                "100",
                "--shutdown-deadline-seconds",
                "3",
            ])
            .args(extra_arguments)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", directory.path())
            .env("PORTER_SECRET_PASSTHROUGH", format!("{CANARY}-passthrough"))
            .env("PORTER_LOG", "warn")
            .stdin(Stdio::null());
        let process = command.spawn().unwrap();
        let daemon = Self {
            directory,
            workspace,
            socket,
            control_socket,
            registry_path,
            tokens_path: tokens,
            audit_log,
            bin_dir,
            process,
        };
        let mut daemon = daemon;
        let started = Instant::now();
        while !daemon.socket.exists() {
            if let Some(status) = daemon.process.try_wait().unwrap() {
                return Err(status);
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "porter did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(daemon)
    }

    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    /// Runs `cliport-proxy` as `cli` with `args`, in the sandbox cwd `/workspace`.
    pub fn proxy(&self, cli: &str, args: &[&str], token: &str) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cliport-proxy"));
        command
            .arg(cli)
            .args(args)
            .env_clear()
            .env("CLIPORT_SOCKET", &self.socket)
            .env("CLIPORT_TOKEN", token)
            .env("CLIPORT_CWD", "/workspace")
            .current_dir(&self.workspace);
        command
    }

    /// Audit lines so far: complete lines only — Porter may be appending one while
    /// the test reads, and a line is only whole once its newline is written.
    pub fn audit(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(&self.audit_log).unwrap_or_default();
        let complete = match text.rfind('\n') {
            Some(end) => &text[..end],
            None => "",
        };
        complete
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// Waits until the audit log has at least `count` lines, and returns the last.
    pub fn wait_audit(&self, count: usize) -> serde_json::Value {
        let started = Instant::now();
        loop {
            let lines = self.audit();
            if lines.len() >= count {
                return lines[count - 1].clone();
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "audit line {count} never came: {lines:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn raw_log_text(&self) -> String {
        std::fs::read_to_string(&self.audit_log).unwrap_or_default()
    }

    pub fn connect(&self) -> UnixStream {
        UnixStream::connect(&self.socket).unwrap()
    }

    /// Sends a request and collects every frame until the last one. A refused
    /// connection (peer not allowed) may be closed by Porter before the request is
    /// written: a broken pipe then is expected, and the Error frame is still read.
    pub fn call(&self, request: CliRequest) -> Vec<Frame> {
        let mut stream = self.connect();
        let sent = write_frame(
            &mut stream,
            &Frame::Hello {
                version: PROTOCOL_VERSION,
            },
        )
        .and_then(|()| write_frame(&mut stream, &Frame::Request(Request::Cli(request))));
        if let Err(error) = sent {
            assert_eq!(
                error.kind(),
                std::io::ErrorKind::BrokenPipe,
                "sending the request: {error}"
            );
        }
        collect(&mut stream)
    }

    pub fn control(&self, line: &str) -> serde_json::Value {
        use std::io::BufRead;
        let mut stream = UnixStream::connect(&self.control_socket).unwrap();
        stream.write_all(format!("{line}\n").as_bytes()).unwrap();
        let mut reader = std::io::BufReader::new(stream);
        let mut response = String::new();
        reader.read_line(&mut response).unwrap();
        serde_json::from_str(&response).unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.process.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.process.wait();
    }
}

pub fn request(cli: &str, args: &[&str], token: &str) -> CliRequest {
    CliRequest {
        cli: cli.into(),
        args: args.iter().map(|argument| (*argument).to_owned()).collect(),
        cwd: "/workspace".into(),
        token: token.into(),
        env: BTreeMap::new(),
        stdin: false,
    }
}

pub fn collect(stream: &mut UnixStream) -> Vec<Frame> {
    let mut frames = Vec::new();
    while let Some(frame) = read_frame(stream).unwrap() {
        let last = matches!(frame, Frame::Exit { .. } | Frame::Error { .. });
        frames.push(frame);
        if last {
            break;
        }
    }
    frames
}

pub fn stdout_of(frames: &[Frame]) -> String {
    let mut out = Vec::new();
    for frame in frames {
        if let Frame::Stdout(data) = frame {
            out.extend_from_slice(data);
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn error_of(frames: &[Frame]) -> Option<ErrorCode> {
    frames.iter().find_map(|frame| match frame {
        Frame::Error { code, .. } => Some(*code),
        _ => None,
    })
}

/// Processes whose command line contains `marker` (reads /proc).
pub fn processes_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(command_line) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        // Zombies have an empty cmdline; only live processes count.
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = state
            .rsplit(") ")
            .next()
            .is_some_and(|rest| rest.starts_with('Z'));
        // Arguments are NUL-separated in /proc; join them with spaces as a shell would.
        let command_line = String::from_utf8_lossy(&command_line).replace('\0', " ");
        if !zombie && command_line.contains(marker) {
            found.push(pid);
        }
    }
    found
}

/// Polls until no live process matches `marker`.
pub fn wait_gone(marker: &str, within: Duration) -> Vec<u32> {
    let started = Instant::now();
    loop {
        let left = processes_with(marker);
        if left.is_empty() || started.elapsed() > within {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Peak resident set size of a process in KiB (VmHWM).
pub fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A free loopback address for a daemon's `--metrics-listen` (bound, noted, released).
fn free_loopback_address() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

/// Replaces `path` the way a ConfigMap update does (write aside, rename over), so the
/// daemon's reload loop never sees a half-written file.
pub fn write_atomically(path: &Path, contents: &str) {
    let staged = path.with_extension("staged");
    std::fs::write(&staged, contents).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

/// The value of one series (`name{labels}`) in the daemon's `/metrics`, if present.
pub fn metric_value(address: &str, series: &str) -> Option<u64> {
    metrics(address).lines().find_map(|line| {
        line.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Polls `/metrics` until `series` reads `value`; fails with `what` after 10 s.
pub fn wait_for_metric(address: &str, series: &str, value: u64, what: &str) {
    let started = Instant::now();
    loop {
        let current = metric_value(address, series);
        if current == Some(value) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what}: {series} is {current:?} after 10 s, expected {value}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The daemon's `/metrics` text from `address`.
pub fn metrics(address: &str) -> String {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .write_all(
            format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}
