//! Drives the real `saint-sandbox-runner` binary over its unix socket with the real
//! frame protocol: output streaming, environment hygiene, refusals before anything
//! runs, timeouts and disconnects that leave no process behind, idle exit.

use std::{
    collections::BTreeMap,
    fs,
    io::Write,
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    process::{Child, Command},
    thread,
    time::{Duration, Instant},
};

use porter_protocol::{
    ErrorCode, ExecRequest, Frame, PROTOCOL_VERSION, Request,
    sync_io::{read_frame, write_frame},
};
use saint_config::sandbox_contract::{
    RUNNER_IDLE_TIMEOUT_ENV, RUNNER_SEED_ENV, RUNNER_SOCKET_ENV, RUNNER_TOKEN_ENV, RunnerSettings,
};

const TOKEN: &str = "runner-token-for-tests";
const CANARY: &str = "canary-secret-4b1d";

struct Runner {
    child: Child,
    socket: PathBuf,
    base: tempfile::TempDir,
}

impl Runner {
    fn start(idle_timeout_seconds: u64) -> Self {
        let base = tempfile::tempdir().unwrap();
        for directory in ["workspace", "agent", "run", "bin"] {
            fs::create_dir_all(base.path().join(directory)).unwrap();
        }
        fs::write(base.path().join("agent/AGENTS.md"), "real workspace\n").unwrap();
        let socket = base.path().join("run/runner.sock");
        let child = Command::new(env!("CARGO_BIN_EXE_saint-sandbox-runner"))
            .arg("--socket")
            .arg(&socket)
            .arg("--workspace")
            .arg(base.path().join("workspace"))
            .arg("--agent")
            .arg(base.path().join("agent"))
            .arg("--relay-listen")
            .arg("127.0.0.1:0")
            .arg("--idle-timeout-seconds")
            .arg(idle_timeout_seconds.to_string())
            // The runner's own environment holds its token and whatever the host had;
            // none of it may reach a command.
            .env("SAINT_RUNNER_TOKEN", TOKEN)
            .env("SAINT_TEST_CANARY", CANARY)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "runner socket never appeared");
            thread::sleep(Duration::from_millis(10));
        }
        Self {
            child,
            socket,
            base,
        }
    }

    fn workspace(&self) -> PathBuf {
        self.base.path().join("workspace")
    }

    fn connect(&self, request: Request) -> UnixStream {
        let mut stream = UnixStream::connect(&self.socket).unwrap();
        write_frame(
            &mut stream,
            &Frame::Hello {
                version: PROTOCOL_VERSION,
            },
        )
        .unwrap();
        assert_eq!(
            read_frame(&mut stream).unwrap(),
            Some(Frame::Welcome {
                version: PROTOCOL_VERSION
            })
        );
        write_frame(&mut stream, &Frame::Request(request)).unwrap();
        stream
    }

    fn exec(&self, command: &str) -> Outcome {
        self.exec_request(self.request(command))
    }

    fn request(&self, command: &str) -> ExecRequest {
        ExecRequest {
            command: command.to_string(),
            cwd: self.workspace().display().to_string(),
            token: TOKEN.to_string(),
            ..ExecRequest::default()
        }
    }

    fn exec_request(&self, request: ExecRequest) -> Outcome {
        let stream = self.connect(Request::Exec(request));
        collect(stream)
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug, Default)]
struct Outcome {
    stdout: String,
    stderr: String,
    /// Every frame kind in arrival order, to prove streaming and separation.
    frames: Vec<&'static str>,
    exit: Option<i32>,
    error: Option<(ErrorCode, String)>,
}

fn collect(mut stream: UnixStream) -> Outcome {
    let mut outcome = Outcome::default();
    while let Some(frame) = read_frame(&mut stream).unwrap() {
        match frame {
            Frame::Stdout(data) => {
                outcome.frames.push("stdout");
                outcome.stdout.push_str(&String::from_utf8_lossy(&data));
            }
            Frame::Stderr(data) => {
                outcome.frames.push("stderr");
                outcome.stderr.push_str(&String::from_utf8_lossy(&data));
            }
            Frame::Exit { code } => {
                outcome.exit = Some(code);
                break;
            }
            Frame::Error { code, message } => {
                outcome.error = Some((code, message));
                break;
            }
            other => panic!("unexpected frame {other:?}"),
        }
    }
    outcome
}

/// Processes on this machine whose command line contains `marker`.
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

fn wait_until_gone(marker: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = processes_with(marker);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn output_streams_as_separate_stdout_and_stderr_frames_then_exit_code() {
    let runner = Runner::start(60);
    let outcome = runner.exec("echo out-1; echo err-1 >&2; sleep 0.2; echo out-2; exit 7");
    assert_eq!(outcome.stdout, "out-1\nout-2\n");
    assert_eq!(outcome.stderr, "err-1\n");
    assert_eq!(outcome.exit, Some(7));
    // Streamed, not buffered until exit: the first stdout frame precedes the last one
    // by the sleep, so there are at least two stdout frames.
    assert!(
        outcome
            .frames
            .iter()
            .filter(|kind| **kind == "stdout")
            .count()
            >= 2,
        "{outcome:?}"
    );
}

#[test]
fn commands_see_only_the_minimal_environment_and_request_variables() {
    let runner = Runner::start(60);
    let mut request = runner.request("env | sort");
    request.env = BTreeMap::from([("CLIPORT_TOKEN".to_string(), "per-command".to_string())]);
    let outcome = runner.exec_request(request);
    assert_eq!(outcome.exit, Some(0));
    let names: Vec<&str> = outcome
        .stdout
        .lines()
        .map(|line| line.split('=').next().unwrap())
        .collect();
    // `sh` itself adds PWD (and may add SHLVL/_); nothing from the runner's environment.
    for name in &names {
        assert!(
            ["CLIPORT_TOKEN", "HOME", "LANG", "PATH", "PWD", "SHLVL", "_"].contains(name),
            "unexpected variable {name} in {}",
            outcome.stdout
        );
    }
    assert!(outcome.stdout.contains("CLIPORT_TOKEN=per-command"));
    assert!(
        !outcome.stdout.contains(CANARY),
        "canary leaked: {}",
        outcome.stdout
    );
    assert!(
        !outcome.stdout.contains(TOKEN),
        "runner token leaked: {}",
        outcome.stdout
    );
    let path = outcome
        .stdout
        .lines()
        .find(|line| line.starts_with("PATH="))
        .unwrap();
    assert_eq!(path, "PATH=/usr/local/bin:/usr/bin:/bin");
}

#[test]
fn a_wrong_token_is_refused_before_anything_runs() {
    let runner = Runner::start(60);
    let marker = runner.workspace().join("ran");
    let mut request = runner.request(&format!("touch {}", marker.display()));
    request.token = "guessed".to_string();
    let outcome = runner.exec_request(request);
    assert_eq!(
        outcome.error.map(|(code, _)| code),
        Some(ErrorCode::BadToken)
    );
    assert!(!marker.exists());
}

#[test]
fn a_working_directory_outside_the_roots_is_refused() {
    let runner = Runner::start(60);
    std::os::unix::fs::symlink("/etc", runner.workspace().join("etc-link")).unwrap();
    for cwd in [
        "/etc".to_string(),
        runner.workspace().join("etc-link").display().to_string(),
    ] {
        let mut request = runner.request("pwd");
        request.cwd = cwd.clone();
        let outcome = runner.exec_request(request);
        assert_eq!(
            outcome.error.map(|(code, _)| code),
            Some(ErrorCode::BadCwd),
            "{cwd}"
        );
        assert!(outcome.stdout.is_empty());
    }
    let mut request = runner.request("pwd");
    request.cwd = runner.base.path().join("agent").display().to_string();
    let outcome = runner.exec_request(request);
    assert_eq!(
        outcome.stdout.trim(),
        runner
            .base
            .path()
            .join("agent")
            .canonicalize()
            .unwrap()
            .display()
            .to_string()
    );
}

#[test]
fn stdin_frames_reach_the_command() {
    let runner = Runner::start(60);
    let mut request = runner.request("tr a-z A-Z");
    request.stdin = true;
    let mut stream = runner.connect(Request::Exec(request));
    write_frame(&mut stream, &Frame::Stdin(b"hello ".to_vec())).unwrap();
    write_frame(&mut stream, &Frame::Stdin(b"sandbox".to_vec())).unwrap();
    write_frame(&mut stream, &Frame::StdinEof).unwrap();
    let outcome = collect(stream);
    assert_eq!(outcome.stdout, "HELLO SANDBOX");
    assert_eq!(outcome.exit, Some(0));
}

#[test]
fn a_timeout_kills_the_whole_process_group() {
    let runner = Runner::start(60);
    let mut request = runner.request("sleep 987.25 & sleep 988.25; echo never");
    request.timeout_seconds = Some(1);
    let started = Instant::now();
    let outcome = runner.exec_request(request);
    assert_eq!(
        outcome.error.as_ref().map(|(code, _)| *code),
        Some(ErrorCode::TimedOut)
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!outcome.stdout.contains("never"));
    assert_eq!(wait_until_gone("987.25"), Vec::<String>::new());
    assert_eq!(wait_until_gone("988.25"), Vec::<String>::new());
}

#[test]
fn a_client_disconnect_kills_the_command() {
    let runner = Runner::start(60);
    let stream = runner.connect(Request::Exec(runner.request("sleep 989.25")));
    let deadline = Instant::now() + Duration::from_secs(5);
    while processes_with("989.25").is_empty() {
        assert!(Instant::now() < deadline, "command never started");
        thread::sleep(Duration::from_millis(10));
    }
    drop(stream);
    assert_eq!(wait_until_gone("989.25"), Vec::<String>::new());
}

#[test]
fn background_jobs_end_with_their_command() {
    let runner = Runner::start(60);
    let outcome = runner.exec("sleep 990.25 & echo started");
    assert_eq!(outcome.stdout, "started\n");
    assert_eq!(outcome.exit, Some(0));
    assert_eq!(wait_until_gone("990.25"), Vec::<String>::new());
}

#[test]
fn the_runner_exits_by_itself_when_idle_and_removes_its_socket() {
    let mut runner = Runner::start(1);
    assert_eq!(runner.exec("true").exit, Some(0));
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = runner.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "runner did not exit when idle");
        thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success());
    assert!(!runner.socket.exists());
}

#[test]
fn a_bad_hello_is_refused() {
    let runner = Runner::start(60);
    let marker = runner.workspace().join("ran");
    // Garbage where the hello belongs, then a well-formed hello and exec request: the
    // runner must answer the garbage and read nothing after it.
    let mut bytes = b"GET / HTTP/1.1\r\n\r\n".to_vec();
    write_frame(
        &mut bytes,
        &Frame::Hello {
            version: PROTOCOL_VERSION,
        },
    )
    .unwrap();
    let request = runner.request(&format!("touch {}", marker.display()));
    write_frame(&mut bytes, &Frame::Request(Request::Exec(request))).unwrap();
    let mut stream = UnixStream::connect(&runner.socket).unwrap();
    stream.write_all(&bytes).unwrap();
    let result = read_frame(&mut stream);
    assert!(
        !matches!(result, Ok(Some(Frame::Welcome { .. }))),
        "{result:?}"
    );
    assert_eq!(
        result.unwrap(),
        Some(Frame::Error {
            code: ErrorCode::BadRequest,
            message: "failed to decode frame: unknown kind byte 71".to_string(),
        })
    );
    // The runner hangs up after the error frame; once it has, it has served this
    // connection completely, and the command it was sent never ran.
    assert_eq!(read_frame(&mut stream).unwrap(), None);
    assert!(!marker.exists());
}

#[test]
fn the_runner_refuses_to_start_without_a_token() {
    let base = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_saint-sandbox-runner"))
        .arg("--socket")
        .arg(base.path().join("runner.sock"))
        .arg("--workspace")
        .arg(base.path())
        .arg("--agent")
        .arg(base.path())
        .arg("--relay-listen")
        .arg("127.0.0.1:0")
        .env_remove("SAINT_RUNNER_TOKEN")
        .env_remove("SAINT_RUNNER_TOKEN_FILE")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no runner token"), "{stderr}");
    assert!(!base.path().join("runner.sock").exists());
}

#[test]
fn the_token_can_come_from_a_file_and_the_workspace_is_seeded() {
    let base = tempfile::tempdir().unwrap();
    for directory in ["workspace", "agent/skills/demo"] {
        fs::create_dir_all(base.path().join(directory)).unwrap();
    }
    fs::write(base.path().join("agent/SOUL.md"), "soul\n").unwrap();
    fs::write(base.path().join("agent/skills/demo/SKILL.md"), "skill\n").unwrap();
    fs::write(base.path().join("agent/private.md"), "private\n").unwrap();
    fs::write(base.path().join("token"), "file-token\n").unwrap();
    let socket = base.path().join("run/runner.sock");
    let mut child = Command::new(env!("CARGO_BIN_EXE_saint-sandbox-runner"))
        .arg("--socket")
        .arg(&socket)
        .arg("--token-file")
        .arg(base.path().join("token"))
        .arg("--workspace")
        .arg(base.path().join("workspace"))
        .arg("--agent")
        .arg(base.path().join("agent"))
        .arg("--relay-listen")
        .arg("127.0.0.1:0")
        .args(["--seed", "SOUL.md", "--seed", "skills"])
        .env_remove("SAINT_RUNNER_TOKEN")
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "runner socket never appeared");
        thread::sleep(Duration::from_millis(10));
    }
    let mut stream = UnixStream::connect(&socket).unwrap();
    write_frame(
        &mut stream,
        &Frame::Hello {
            version: PROTOCOL_VERSION,
        },
    )
    .unwrap();
    read_frame(&mut stream).unwrap();
    let request = ExecRequest {
        command: "ls -R".to_string(),
        cwd: String::new(),
        token: "file-token".to_string(),
        ..ExecRequest::default()
    };
    write_frame(&mut stream, &Frame::Request(Request::Exec(request))).unwrap();
    let outcome = collect(stream);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(outcome.exit, Some(0), "{outcome:?}");
    assert!(
        outcome.stdout.contains("SOUL.md") && outcome.stdout.contains("SKILL.md"),
        "{outcome:?}"
    );
    assert!(!outcome.stdout.contains("private.md"), "{outcome:?}");
}

/// Starts the runner with only the image's fixed paths as flags (what the sandbox
/// image's entrypoint passes) and `environment` as its whole contract environment.
fn start_with_environment(base: &Path, environment: &[(String, String)]) -> Child {
    for directory in ["workspace", "agent", "bin"] {
        fs::create_dir_all(base.join(directory)).unwrap();
    }
    let mut command = Command::new(env!("CARGO_BIN_EXE_saint-sandbox-runner"));
    command
        .arg("--workspace")
        .arg(base.join("workspace"))
        .arg("--agent")
        .arg(base.join("agent"))
        .arg("--relay-listen")
        .arg("127.0.0.1:0")
        .env_remove("SAINT_RUNNER_TOKEN_FILE");
    for name in [
        RUNNER_SOCKET_ENV,
        RUNNER_TOKEN_ENV,
        RUNNER_SEED_ENV,
        RUNNER_IDLE_TIMEOUT_ENV,
    ] {
        command.env_remove(name);
    }
    command
        .envs(environment.iter().map(|(name, value)| (name, value)))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_malformed_setting_is_refused_naming_its_variable() {
    for (variable, value) in [
        (RUNNER_SEED_ENV, "SOUL.md"),
        (RUNNER_IDLE_TIMEOUT_ENV, "30m"),
    ] {
        let base = tempfile::tempdir().unwrap();
        let socket = base.path().join("run/runner.sock");
        let environment = [
            (RUNNER_SOCKET_ENV.to_string(), socket.display().to_string()),
            (RUNNER_TOKEN_ENV.to_string(), TOKEN.to_string()),
            (variable.to_string(), value.to_string()),
        ];
        let output = start_with_environment(base.path(), &environment)
            .wait_with_output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{variable}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(&format!("failed to read {variable}: ")),
            "{variable}: {stderr}"
        );
        assert!(!socket.exists(), "{variable}");
    }
}

#[test]
fn settings_from_the_environment_arrive_whole_even_with_commas() {
    let base = tempfile::tempdir().unwrap();
    fs::create_dir_all(base.path().join("agent/notes")).unwrap();
    fs::write(base.path().join("agent/notes/a,b.md"), "comma\n").unwrap();
    fs::write(base.path().join("agent/SOUL.md"), "soul\n").unwrap();
    let settings = RunnerSettings {
        socket: base.path().join("run/runner.sock").display().to_string(),
        token: TOKEN.to_string(),
        seed: vec!["notes/a,b.md".to_string(), "SOUL.md".to_string()],
        idle_timeout_seconds: 60,
        require_network_cut: false,
    };
    let mut child = start_with_environment(base.path(), &settings.to_env());
    let socket = PathBuf::from(&settings.socket);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the runner exited before its socket appeared"
        );
        assert!(Instant::now() < deadline, "runner socket never appeared");
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        fs::read_to_string(base.path().join("workspace/notes/a,b.md")).unwrap(),
        "comma\n"
    );
    assert!(base.path().join("workspace/SOUL.md").exists());
    let _ = child.kill();
    let _ = child.wait();
}
