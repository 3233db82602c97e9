//! The runner's background processes: started by a `spawn` request, kept with their
//! capped output between connections, and acted on by `poll`, `write`, `kill` and
//! `list` — each only by the owner that started it (another owner's id is answered
//! exactly like an id that never existed).
//!
//! They are children of this runner, each in its own process group: they die with the
//! runner (its shutdown kills every group; in a sandbox, the sandbox's end kills what is
//! left), at their timeout, or on `kill`. A process's final state is handed over once,
//! by the `poll` (or `kill`) that sees it end; then the runner forgets it.
//!
//! Touches only the processes it started.

use std::{
    os::unix::process::ExitStatusExt,
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use porter_protocol::{
    ErrorCode,
    process::{ProcessState, ProcessStatus, SpawnRequest, shown_command},
};
use rustix::process::Signal;
use saint_paths::Directory;
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWriteExt},
    process::{Child, ChildStdin, Command},
    sync::watch,
    time::Instant,
};

use crate::{
    command_env::command_environment,
    output_ring::{OutputRing, Taken},
    process_group::ProcessGroup,
};
use parking_lot::Mutex;

/// Background processes one runner runs at once, whoever owns them: the ceiling under
/// every role's own limit.
pub const MAX_RUNNING: usize = 64;

/// Ended processes whose final state nobody polled yet, kept per owner; older ones are
/// forgotten first.
pub const MAX_ENDED_KEPT: usize = 16;

/// Unread bytes per stream the runner keeps at most, whatever a request asks.
pub const MAX_BUFFER_BYTES: usize = 1024 * 1024;

/// How long a process may keep its output pipes open after its shell exited.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);

/// Grace between SIGTERM and SIGKILL at the timeout.
const TERMINATE_GRACE: Duration = Duration::from_secs(2);

/// How long `kill` waits for the group to be gone before answering anyway.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// How long a `write` may wait for a process that does not read its stdin.
const WRITE_WAIT: Duration = Duration::from_secs(5);

/// Why a request was refused; becomes an `Error` frame.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
}

impl Refusal {
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    fn no_such_process(id: &str) -> Self {
        Self::new(
            ErrorCode::NoSuchProcess,
            format!(
                "no background process {id} of yours (it ended and was polled, or never ran here)"
            ),
        )
    }
}

/// New output of a process and where it stands, as `poll` and `kill` answer.
#[derive(Debug)]
pub struct Polled {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub status: ProcessStatus,
}

struct Output {
    stdout: OutputRing,
    stderr: OutputRing,
    state: ProcessState,
    exit_code: Option<i32>,
    kill_requested: bool,
}

struct Process {
    id: String,
    owner: String,
    command: String,
    started: Instant,
    /// Dropping the process kills its group, so nothing it started outlives it.
    group: ProcessGroup,
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    output: Mutex<Output>,
    /// Turns true once the state is final and the pipes are drained.
    ended: watch::Receiver<bool>,
}

impl Process {
    fn output(&self) -> parking_lot::MutexGuard<'_, Output> {
        self.output.lock()
    }

    fn is_running(&self) -> bool {
        self.output().state == ProcessState::Running
    }

    /// The status, with `dropped` unread bytes lost since the last poll.
    fn status(&self, output: &Output, dropped: u64) -> ProcessStatus {
        ProcessStatus {
            id: self.id.clone(),
            command: shown_command(&self.command),
            state: output.state,
            exit_code: output.exit_code,
            seconds: self.started.elapsed().as_secs(),
            output_bytes: output.stdout.total() + output.stderr.total(),
            dropped_bytes: dropped,
        }
    }
}

/// Every background process of one runner.
#[derive(Default)]
pub struct Background {
    processes: Mutex<Vec<Arc<Process>>>,
    next_id: AtomicU64,
}

impl Background {
    fn processes(&self) -> parking_lot::MutexGuard<'_, Vec<Arc<Process>>> {
        self.processes.lock()
    }

    fn find(&self, owner: &str, id: &str) -> Result<Arc<Process>, Refusal> {
        self.processes()
            .iter()
            .find(|process| process.owner == owner && process.id == id)
            .cloned()
            .ok_or_else(|| Refusal::no_such_process(id))
    }

    fn forget(&self, process: &Arc<Process>) {
        self.processes().retain(|kept| !Arc::ptr_eq(kept, process));
    }

    /// How many background processes run now (any owner).
    pub fn running(&self) -> usize {
        self.processes()
            .iter()
            .filter(|process| process.is_running())
            .count()
    }

    /// Starts `request.command` for its owner in `working_directory`, unless the owner
    /// already runs `request.max_running` processes or the runner [`MAX_RUNNING`].
    pub fn spawn(
        &self,
        request: &SpawnRequest,
        working_directory: Directory,
        shell: &std::path::Path,
        home: &std::path::Path,
        default_timeout: Duration,
    ) -> Result<String, Refusal> {
        let mut processes = self.processes();
        let running_of_owner = processes
            .iter()
            .filter(|process| process.owner == request.owner && process.is_running())
            .count();
        let limit = request.max_running as usize;
        if running_of_owner >= limit {
            return Err(Refusal::new(
                ErrorCode::LimitReached,
                format!(
                    "{running_of_owner} of your background processes run already, the most allowed ({limit})"
                ),
            ));
        }
        let running = processes
            .iter()
            .filter(|process| process.is_running())
            .count();
        if running >= MAX_RUNNING {
            return Err(Refusal::new(
                ErrorCode::LimitReached,
                format!(
                    "this sandbox runs {running} background processes, the most it runs at once"
                ),
            ));
        }
        // Ended processes nobody polled: keep the owner's newest few.
        let ended_of_owner: Vec<Arc<Process>> = processes
            .iter()
            .filter(|process| process.owner == request.owner && !process.is_running())
            .cloned()
            .collect();
        for old in ended_of_owner
            .iter()
            .take((ended_of_owner.len() + 1).saturating_sub(MAX_ENDED_KEPT))
        {
            processes.retain(|kept| !Arc::ptr_eq(kept, old));
        }

        let environment = command_environment(home, &request.env);
        let mut command = Command::new(shell);
        command
            .arg("-c")
            .arg(&request.command)
            .env_clear()
            .envs(&environment)
            // The checked directory itself, not whatever its name points at by now.
            .current_dir(working_directory.entry_path())
            // Its own group: `kill` and the timeout end everything it started.
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|error| {
            Refusal::new(
                ErrorCode::Internal,
                format!("failed to start command: {error}"),
            )
        })?;
        let id = format!("p{}", self.next_id.fetch_add(1, Ordering::SeqCst) + 1);
        let buffer = (request.buffer_bytes as usize).min(MAX_BUFFER_BYTES);
        let (ended_sender, ended) = watch::channel(false);
        let process = Arc::new(Process {
            id: id.clone(),
            owner: request.owner.clone(),
            command: request.command.clone(),
            started: Instant::now(),
            group: ProcessGroup::new(child.id().unwrap_or_default()),
            stdin: tokio::sync::Mutex::new(child.stdin.take()),
            output: Mutex::new(Output {
                stdout: OutputRing::new(buffer),
                stderr: OutputRing::new(buffer),
                state: ProcessState::Running,
                exit_code: None,
                kill_requested: false,
            }),
            ended,
        });
        processes.push(process.clone());
        drop(processes);
        let timeout = request
            .timeout_seconds
            .map(Duration::from_secs)
            .unwrap_or(default_timeout);
        tokio::spawn(supervise(process, child, timeout, ended_sender));
        Ok(id)
    }

    /// The output since the last poll and the state; a process seen ended is forgotten.
    pub fn poll(&self, owner: &str, id: &str) -> Result<Polled, Refusal> {
        let process = self.find(owner, id)?;
        Ok(self.take_output(&process))
    }

    fn take_output(&self, process: &Arc<Process>) -> Polled {
        let (polled, ended) = {
            let mut output = process.output();
            let Taken {
                bytes: stdout,
                dropped: stdout_dropped,
            } = output.stdout.take();
            let Taken {
                bytes: stderr,
                dropped: stderr_dropped,
            } = output.stderr.take();
            let status = process.status(&output, stdout_dropped + stderr_dropped);
            // Ended and drained (the supervisor sets the state only after draining):
            // this answer holds everything, so it is the last one.
            let ended = status.state != ProcessState::Running;
            (
                Polled {
                    stdout,
                    stderr,
                    status,
                },
                ended,
            )
        };
        if ended {
            self.forget(process);
        }
        polled
    }

    /// Writes `data` to the process's stdin, then closes it if asked.
    pub async fn write(
        &self,
        owner: &str,
        id: &str,
        data: &[u8],
        close: bool,
    ) -> Result<ProcessStatus, Refusal> {
        let process = self.find(owner, id)?;
        let mut stdin = process.stdin.lock().await;
        let Some(pipe) = stdin.as_mut() else {
            return Err(Refusal::new(
                ErrorCode::BadRequest,
                format!("the stdin of {id} is closed"),
            ));
        };
        match tokio::time::timeout(WRITE_WAIT, pipe.write_all(data)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                *stdin = None;
                return Err(Refusal::new(
                    ErrorCode::BadRequest,
                    format!("{id} no longer reads its stdin"),
                ));
            }
            Err(_) => {
                return Err(Refusal::new(
                    ErrorCode::BadRequest,
                    format!(
                        "{id} did not read its stdin within {} s",
                        WRITE_WAIT.as_secs()
                    ),
                ));
            }
        }
        if close {
            *stdin = None;
        }
        drop(stdin);
        let output = process.output();
        Ok(process.status(&output, 0))
    }

    /// Kills the process's whole group, waits until it is gone, and answers like the
    /// last poll.
    pub async fn kill(&self, owner: &str, id: &str) -> Result<Polled, Refusal> {
        let process = self.find(owner, id)?;
        if process.is_running() {
            process.output().kill_requested = true;
            process.group.kill();
            let mut ended = process.ended.clone();
            let _ = tokio::time::timeout(KILL_WAIT, ended.wait_for(|ended| *ended)).await;
        }
        Ok(self.take_output(&process))
    }

    /// The owner's processes, oldest first (nothing is taken: a later poll still gets
    /// the output).
    pub fn list(&self, owner: &str) -> Vec<ProcessStatus> {
        self.processes()
            .iter()
            .filter(|process| process.owner == owner)
            .map(|process| process.status(&process.output(), 0))
            .collect()
    }

    /// Kills every group still running (runner shutdown).
    pub fn kill_all(&self) {
        for process in self.processes().drain(..) {
            process.group.kill();
        }
    }
}

/// Reads the process's output into its rings until it ends, ends it at its timeout,
/// and records the final state only once its pipes are drained.
async fn supervise(
    process: Arc<Process>,
    mut child: Child,
    timeout: Duration,
    ended: watch::Sender<bool>,
) {
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let drain_deadline = tokio::time::sleep(Duration::MAX / 4);
    tokio::pin!(drain_deadline);
    let mut stdout_buffer = vec![0_u8; 16 * 1024];
    let mut stderr_buffer = vec![0_u8; 16 * 1024];
    let mut exit_code: Option<i32> = None;
    let mut timed_out = false;

    loop {
        if exit_code.is_some() && stdout.is_none() && stderr.is_none() {
            break;
        }
        tokio::select! {
            count = read_some(&mut stdout, &mut stdout_buffer), if stdout.is_some() => match count {
                Some(count) => process.output().stdout.push(&stdout_buffer[..count]),
                None => stdout = None,
            },
            count = read_some(&mut stderr, &mut stderr_buffer), if stderr.is_some() => match count {
                Some(count) => process.output().stderr.push(&stderr_buffer[..count]),
                None => stderr = None,
            },
            status = child.wait(), if exit_code.is_none() => {
                let status = status.ok();
                exit_code = Some(
                    status
                        .and_then(|status| status.code().or_else(|| status.signal().map(|signal| 128 + signal)))
                        .unwrap_or(-1),
                );
                // Whatever it left in its group (`sleep 100 &`) ends with it.
                process.group.kill();
                drain_deadline.as_mut().reset(Instant::now() + DRAIN_AFTER_EXIT);
            },
            () = &mut deadline, if exit_code.is_none() && !timed_out => {
                timed_out = true;
                process.group.signal(Signal::TERM);
                let _ = tokio::time::timeout(TERMINATE_GRACE, child.wait()).await;
                process.group.kill();
            },
            () = &mut drain_deadline, if exit_code.is_some() => break,
        }
    }
    {
        let mut output = process.output();
        output.state = if timed_out {
            ProcessState::TimedOut
        } else if output.kill_requested {
            ProcessState::Killed
        } else {
            output.exit_code = exit_code;
            ProcessState::Exited
        };
    }
    *process.stdin.lock().await = None;
    let _ = ended.send(true);
}

/// Reads once; `None` at the end of the stream (or a read error, treated the same).
async fn read_some<R: AsyncRead + Unpin>(
    reader: &mut Option<R>,
    buffer: &mut [u8],
) -> Option<usize> {
    let reader = reader.as_mut()?;
    match reader.read(buffer).await {
        Ok(0) | Err(_) => None,
        Ok(count) => Some(count),
    }
}
