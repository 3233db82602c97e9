//! Background processes in the real `saint-sandbox-runner` binary, over its socket with
//! the real frames: a process outlives the connection that started it, a poll hands
//! over only the output since the last one and the exit status once, `write` reaches
//! stdin, `kill` ends the whole group, an owner sees and touches only its own, the
//! owner's limit holds, output is capped with the loss counted, and everything dies
//! with the runner.

use std::{
    fs,
    os::unix::net::UnixStream,
    path::PathBuf,
    process::{Child, Command},
    thread,
    time::{Duration, Instant},
};

use porter_protocol::{
    ErrorCode, Frame, PROTOCOL_VERSION, Request,
    process::{
        OwnerRequest, ProcessReply, ProcessState, ProcessStatus, ProcessTarget, SpawnRequest,
        WriteRequest,
    },
    sync_io::{read_frame, write_frame},
};

const TOKEN: &str = "runner-token-for-background-tests";
const ANA: &str = "owner-ana";
const IVO: &str = "owner-ivo";

struct Runner {
    child: Child,
    socket: PathBuf,
    base: tempfile::TempDir,
}

impl Runner {
    fn start() -> Self {
        let base = tempfile::tempdir().unwrap();
        for directory in ["workspace", "agent", "run"] {
            fs::create_dir_all(base.path().join(directory)).unwrap();
        }
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
            .arg("60")
            .env("SAINT_RUNNER_TOKEN", TOKEN)
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

    /// One request on its own connection: the data frames, then the last frame.
    fn ask(&self, request: Request) -> Answer {
        let mut stream = UnixStream::connect(&self.socket).unwrap();
        write_frame(
            &mut stream,
            &Frame::Hello {
                version: PROTOCOL_VERSION,
            },
        )
        .unwrap();
        assert!(matches!(
            read_frame(&mut stream).unwrap(),
            Some(Frame::Welcome { .. })
        ));
        write_frame(&mut stream, &Frame::Request(request.with_token(TOKEN))).unwrap();
        let mut answer = Answer::default();
        loop {
            match read_frame(&mut stream).unwrap() {
                Some(Frame::Stdout(data)) => answer.stdout.extend(data),
                Some(Frame::Stderr(data)) => answer.stderr.extend(data),
                Some(Frame::Process(reply)) => {
                    answer.reply = Some(reply);
                    break;
                }
                Some(Frame::Error { code, message }) => {
                    answer.error = Some((code, message));
                    break;
                }
                other => panic!("unexpected frame {other:?}"),
            }
        }
        answer
    }

    fn spawn(&self, owner: &str, command: &str, max_running: u32) -> Answer {
        self.ask(Request::Spawn(SpawnRequest {
            command: command.to_string(),
            cwd: self.base.path().join("workspace").display().to_string(),
            owner: owner.to_string(),
            max_running,
            buffer_bytes: 64 * 1024,
            timeout_seconds: Some(120),
            ..SpawnRequest::default()
        }))
    }

    fn started(&self, owner: &str, command: &str) -> String {
        match self.spawn(owner, command, 4).reply {
            Some(ProcessReply::Started { id }) => id,
            other => panic!("not started: {other:?}"),
        }
    }

    fn poll(&self, owner: &str, id: &str) -> Answer {
        self.ask(Request::Poll(target(owner, id)))
    }

    fn kill(&self, owner: &str, id: &str) -> Answer {
        self.ask(Request::Kill(target(owner, id)))
    }

    fn list(&self, owner: &str) -> Vec<ProcessStatus> {
        match self
            .ask(Request::List(OwnerRequest {
                owner: owner.to_string(),
                ..OwnerRequest::default()
            }))
            .reply
        {
            Some(ProcessReply::Listed { processes }) => processes,
            other => panic!("not a listing: {other:?}"),
        }
    }

    /// Polls until the process has ended, collecting its output on the way.
    fn poll_until_ended(&self, owner: &str, id: &str, what: &str) -> (String, ProcessStatus) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut stdout = String::new();
        loop {
            let answer = self.poll(owner, id);
            stdout.push_str(&String::from_utf8_lossy(&answer.stdout));
            let status = answer.status();
            if status.state != ProcessState::Running {
                return (stdout, status);
            }
            assert!(
                Instant::now() < deadline,
                "{what}: {id} still runs after 20 s; output so far {stdout:?}"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn target(owner: &str, id: &str) -> ProcessTarget {
    ProcessTarget {
        owner: owner.to_string(),
        id: id.to_string(),
        ..ProcessTarget::default()
    }
}

#[derive(Debug, Default)]
struct Answer {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    reply: Option<ProcessReply>,
    error: Option<(ErrorCode, String)>,
}

impl Answer {
    fn status(&self) -> ProcessStatus {
        match &self.reply {
            Some(ProcessReply::Status { status }) => status.clone(),
            _ => panic!("not a status: {self:?}"),
        }
    }

    fn error_code(&self) -> Option<ErrorCode> {
        self.error.as_ref().map(|(code, _)| *code)
    }
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
            found.push(cmdline);
        }
    }
    found
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "waited 10 s for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_process_outlives_its_connection_and_polls_hand_over_new_output_then_the_exit_once() {
    let runner = Runner::start();
    let id = runner.started(ANA, "echo first; sleep 1; echo done >&2; echo done; exit 3");
    let (stdout, status) = runner.poll_until_ended(ANA, &id, "the command to end");
    assert_eq!(stdout, "first\ndone\n", "each byte handed over once");
    assert_eq!(status.state, ProcessState::Exited);
    assert_eq!(status.exit_code, Some(3));
    assert_eq!(status.output_bytes, "first\ndone\ndone\n".len() as u64);
    assert_eq!(status.dropped_bytes, 0);
    // The final state was handed over: the runner forgot it.
    assert_eq!(
        runner.poll(ANA, &id).error_code(),
        Some(ErrorCode::NoSuchProcess)
    );
    assert!(runner.list(ANA).is_empty());
}

#[test]
fn kill_ends_the_whole_group_and_reports_it_killed() {
    let runner = Runner::start();
    let id = runner.started(ANA, "sleep 991.25 & sleep 992.25; echo never");
    wait_until("both sleeps to start", || {
        !processes_with("991.25").is_empty() && !processes_with("992.25").is_empty()
    });
    let answer = runner.kill(ANA, &id);
    let status = answer.status();
    assert_eq!(status.state, ProcessState::Killed, "{answer:?}");
    assert_eq!(status.exit_code, None);
    assert!(!String::from_utf8_lossy(&answer.stdout).contains("never"));
    wait_until("the killed group's background sleep to be gone", || {
        processes_with("991.25").is_empty()
    });
    wait_until("the killed group's foreground sleep to be gone", || {
        processes_with("992.25").is_empty()
    });
    assert!(runner.list(ANA).is_empty());
}

#[test]
fn another_owner_can_neither_see_poll_write_nor_kill_a_process() {
    let runner = Runner::start();
    let id = runner.started(ANA, "sleep 993.25");
    assert!(runner.list(IVO).is_empty(), "ivo sees nothing of ana's");
    assert_eq!(
        runner.poll(IVO, &id).error_code(),
        Some(ErrorCode::NoSuchProcess)
    );
    assert_eq!(
        runner.kill(IVO, &id).error_code(),
        Some(ErrorCode::NoSuchProcess)
    );
    let write = runner.ask(Request::Write(WriteRequest {
        owner: IVO.to_string(),
        id: id.clone(),
        data: "x\n".to_string(),
        ..WriteRequest::default()
    }));
    assert_eq!(write.error_code(), Some(ErrorCode::NoSuchProcess));
    // Refused exactly like an id that never existed: nothing tells ivo it does.
    let never = runner.poll(IVO, "p999");
    assert_eq!(
        runner.poll(IVO, &id).error.unwrap().1.replace(&id, "ID"),
        never.error.unwrap().1.replace("p999", "ID")
    );
    assert!(!processes_with("993.25").is_empty(), "ana's still runs");
    let listed = runner.list(ANA);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].state, ProcessState::Running);
    assert_eq!(listed[0].command, "sleep 993.25");
}

#[test]
fn an_owner_at_the_limit_is_refused_until_one_ends() {
    let runner = Runner::start();
    let first = match runner.spawn(ANA, "sleep 994.25", 1).reply {
        Some(ProcessReply::Started { id }) => id,
        other => panic!("{other:?}"),
    };
    let refused = runner.spawn(ANA, "touch refused-ran", 1);
    let (code, message) = refused.error.expect("refused at the limit");
    assert_eq!(code, ErrorCode::LimitReached);
    assert!(message.contains("(1)"), "{message}");
    assert!(
        !runner.base.path().join("workspace/refused-ran").exists(),
        "nothing ran"
    );
    // The limit is the owner's: another owner still starts one.
    assert!(matches!(
        runner.spawn(IVO, "true", 1).reply,
        Some(ProcessReply::Started { .. })
    ));
    runner.kill(ANA, &first);
    assert!(matches!(
        runner.spawn(ANA, "true", 1).reply,
        Some(ProcessReply::Started { .. })
    ));
}

#[test]
fn write_reaches_stdin_and_close_ends_it() {
    let runner = Runner::start();
    let id = runner.started(ANA, "read line; echo got:$line; cat; echo eof");
    let write = |data: &str, close: bool| {
        runner.ask(Request::Write(WriteRequest {
            owner: ANA.to_string(),
            id: id.clone(),
            data: data.to_string(),
            close,
            ..WriteRequest::default()
        }))
    };
    assert_eq!(
        write("hello\n", false).status().state,
        ProcessState::Running
    );
    write("rest", true);
    let (stdout, status) = runner.poll_until_ended(ANA, &id, "cat to see end of input");
    assert_eq!(stdout, "got:hello\nresteof\n");
    assert_eq!(status.exit_code, Some(0));
}

#[test]
fn output_beyond_the_buffer_is_dropped_oldest_first_and_counted() {
    let runner = Runner::start();
    let answer = runner.ask(Request::Spawn(SpawnRequest {
        command: "head -c 10000 /dev/zero | tr '\\0' a; echo tail".to_string(),
        cwd: runner.base.path().join("workspace").display().to_string(),
        owner: ANA.to_string(),
        max_running: 1,
        buffer_bytes: 1024,
        ..SpawnRequest::default()
    }));
    let Some(ProcessReply::Started { id }) = answer.reply else {
        panic!("{answer:?}")
    };
    // Waited on through `list`, which takes nothing, so one poll gets what was kept.
    wait_until("the command to end", || {
        runner.list(ANA)[0].state != ProcessState::Running
    });
    let answer = runner.poll(ANA, &id);
    let (stdout, status) = (String::from_utf8_lossy(&answer.stdout), answer.status());
    assert_eq!(stdout.len(), 1024, "the buffer is full, no more");
    assert!(stdout.ends_with("aaaatail\n"), "the newest bytes are kept");
    assert_eq!(status.output_bytes, 10_005);
    assert_eq!(status.dropped_bytes + stdout.len() as u64, 10_005);
}

#[test]
fn background_processes_die_with_the_runner() {
    let mut runner = Runner::start();
    runner.started(ANA, "sleep 995.25");
    wait_until("the sleep to start", || {
        !processes_with("995.25").is_empty()
    });
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(runner.child.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    runner.child.wait().unwrap();
    wait_until("the background sleep to die with the runner", || {
        processes_with("995.25").is_empty()
    });
}
