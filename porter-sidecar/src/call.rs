//! One client connection: handshake, checks (peer, token, CLI, arguments, cwd, rate,
//! session cap, repository config), then the CLI under its supervisor with its output
//! streamed, stdin forwarded, timeout and disconnect handled, its home removed, and one
//! audit line written.
//!
//! Signals only the supervisor it launched, and only until that supervisor is reaped.

use std::{
    os::fd::AsFd,
    path::{Path, PathBuf},
    process::ExitStatus,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use nix::{sys::signal::Signal, unistd::Pid};
use porter_protocol::{
    CliRequest, ErrorCode, Frame, FrameKind, PROTOCOL_VERSION, Request,
    async_io::{CodecError, FrameCodec, write_frame},
    frame::{FrameHeader, HEADER_LEN, MAX_DATA_PAYLOAD, encode_data},
    handshake,
};
use saint_config::ErrorChain;
use saint_paths::{PathError, Workspace, WorkspacePath};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWriteExt},
    net::{
        UnixStream,
        unix::{OwnedReadHalf, OwnedWriteHalf},
    },
    process::Child,
    sync::oneshot,
};
use tokio_util::codec::FramedRead;

use porter_protocol::registry::Profile;

use crate::{
    audit::{AuditLine, Peer},
    capacity::Slot,
    child_env, cwd, git_guard,
    home::CallHome,
    metrics::{CallLabels, CliLabels, StreamLabels},
    redact::{Secrets, StreamRedactor},
    registry_store::{LimitHit, LoadedCli, LoadedRegistry},
    state::State,
    supervisor,
    tokens::Grant,
    view,
};

/// How long a client has to send its hello and request, together: real clients send
/// both at once, and a connection that idles here holds a handshake slot.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);

/// How long the last frame (or a refusal) may take to reach a client that stopped
/// reading before the connection is dropped.
const LAST_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long output is still drained after the child exited (a detached grandchild
/// could hold the pipes open forever).
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// Requested size of the child's output pipes.
const PIPE_SIZE: i32 = 1 << 20;

/// Arguments recorded per audit line; the rest are counted by `bytes` only.
const AUDIT_MAX_ARGS: usize = 256;

/// Characters kept of each audited string.
const AUDIT_MAX_CHARS: usize = 1024;

fn bounded(text: &str) -> String {
    match text.char_indices().nth(AUDIT_MAX_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// A refused call: the error frame to send and the audit outcome.
#[derive(Debug)]
struct Refusal {
    code: ErrorCode,
    message: String,
}

impl Refusal {
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Everything checked and ready to spawn.
struct Prepared {
    registry: Arc<LoadedRegistry>,
    request: CliRequest,
    /// The call's fresh HOME, removed when the call ends.
    home: CallHome,
    /// Counts the call against its session's cap until the call ends.
    session_slot: Slot,
    cwd: PathBuf,
    environment: std::collections::BTreeMap<String, String>,
    /// Injection mode: the call's placeholders, alive until the call ends.
    injection: Option<crate::inject::CallInjection>,
}

/// Who is on the other end of the socket, as the kernel says (`SO_PEERCRED`), not as
/// the caller claims.
fn peer_of(stream: &UnixStream) -> Peer {
    stream
        .peer_cred()
        .map(|credentials| Peer {
            uid: credentials.uid(),
            gid: credentials.gid(),
            pid: credentials.pid(),
        })
        .unwrap_or_default()
}

/// Serves one connection to the end.
pub async fn handle(state: Arc<State>, stream: UnixStream) {
    let started = Instant::now();
    let peer = peer_of(&stream);
    let (read_half, mut write_half) = stream.into_split();
    let mut frames = FramedRead::new(read_half, FrameCodec);
    let mut audit = AuditLine {
        ts: jiff::Timestamp::now().to_string(),
        peer,
        ..AuditLine::default()
    };

    // Until its request is checked a connection is anonymous: one peer process may
    // hold only a few such connections, so idle ones cannot crowd out real calls.
    let peer_process = peer.pid.map(|pid| pid.to_string()).unwrap_or_default();
    let handshake_slot = state.handshakes.acquire(&peer_process);
    let prepared = match handshake_slot {
        None => Err(Refusal::new(
            ErrorCode::RateLimited,
            format!(
                "process {peer_process} has {} porter connections waiting for their handshake",
                state.handshakes.max()
            ),
        )),
        Some(_) => prepare(&state, peer, &mut frames, &mut write_half, &mut audit).await,
    };
    drop(handshake_slot);
    match prepared {
        Err(refusal) => {
            let secrets = state.registry.snapshot().secrets.clone();
            let message = secrets.redact_str(&refusal.message);
            let _ = tokio::time::timeout(
                LAST_WRITE_TIMEOUT,
                write_frame(
                    &mut write_half,
                    &Frame::error(refusal.code, message.clone()),
                ),
            )
            .await;
            audit.outcome = refusal.code.as_str().to_owned();
            audit.reason = Some(message);
            tracing::info!(cli = %audit.cli, outcome = %audit.outcome, uid = peer.uid, "call refused");
        }
        Ok(prepared) => {
            state.metrics.running.inc();
            run(&state, prepared, frames, write_half, &mut audit).await;
            state.metrics.running.dec();
        }
    }
    audit.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    // Only registered names become label values: caller-chosen names would let anyone
    // grow the metric series without bound.
    let label_cli = if state.registry.snapshot().clis.contains_key(&audit.cli) {
        audit.cli.clone()
    } else {
        "-".to_owned()
    };
    state
        .metrics
        .calls
        .get_or_create(&CallLabels {
            cli: label_cli.clone(),
            outcome: audit.outcome.clone(),
        })
        .inc();
    state
        .metrics
        .duration
        .get_or_create(&CliLabels { cli: label_cli })
        .observe(started.elapsed().as_secs_f64());
    state.audit.write(&audit);
}

/// Refuses a connection because too many are open, and audits the refusal.
pub async fn refuse_busy(state: Arc<State>, mut stream: UnixStream) {
    const REASON: &str = "too many concurrent porter connections";
    let peer = peer_of(&stream);
    let frame = Frame::error(ErrorCode::RateLimited, REASON);
    let _ = tokio::time::timeout(LAST_WRITE_TIMEOUT, write_frame(&mut stream, &frame)).await;
    state
        .metrics
        .calls
        .get_or_create(&CallLabels {
            cli: "-".to_owned(),
            outcome: ErrorCode::RateLimited.as_str().to_owned(),
        })
        .inc();
    state.audit.write(&AuditLine {
        ts: jiff::Timestamp::now().to_string(),
        peer,
        outcome: ErrorCode::RateLimited.as_str().to_owned(),
        reason: Some(REASON.to_owned()),
        ..AuditLine::default()
    });
}

async fn next_frame(
    frames: &mut FramedRead<OwnedReadHalf, FrameCodec>,
    deadline: tokio::time::Instant,
) -> Result<Frame, Refusal> {
    match tokio::time::timeout_at(deadline, frames.next()).await {
        Err(_) => Err(Refusal::new(
            ErrorCode::BadRequest,
            "timed out waiting for the request",
        )),
        Ok(None) => Err(Refusal::new(
            ErrorCode::BadRequest,
            "connection closed before the request",
        )),
        Ok(Some(Err(error))) => Err(Refusal::new(
            ErrorCode::BadRequest,
            ErrorChain(&error).to_string(),
        )),
        Ok(Some(Ok(frame))) => Ok(frame),
    }
}

async fn prepare(
    state: &State,
    peer: Peer,
    frames: &mut FramedRead<OwnedReadHalf, FrameCodec>,
    writer: &mut OwnedWriteHalf,
    audit: &mut AuditLine,
) -> Result<Prepared, Refusal> {
    if !state.config.allowed_uids.is_empty() && !state.config.allowed_uids.contains(&peer.uid) {
        return Err(Refusal::new(
            ErrorCode::PeerDenied,
            format!("uid {} may not call porter", peer.uid),
        ));
    }
    let deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
    match next_frame(frames, deadline).await? {
        Frame::Hello { version } if handshake::is_supported(version) => {}
        Frame::Hello { version } => {
            return Err(Refusal::new(
                ErrorCode::UnsupportedVersion,
                format!(
                    "protocol version {version} is not supported (porter speaks {PROTOCOL_VERSION})"
                ),
            ));
        }
        other => {
            return Err(Refusal::new(
                ErrorCode::BadRequest,
                format!("expected hello, got {:?}", other.kind()),
            ));
        }
    }
    tokio::time::timeout_at(
        deadline,
        write_frame(
            writer,
            &Frame::Welcome {
                version: PROTOCOL_VERSION,
            },
        ),
    )
    .await
    .map_err(|_| Refusal::new(ErrorCode::BadRequest, "timed out sending the welcome"))?
    .map_err(|error| Refusal::new(ErrorCode::Internal, ErrorChain(&error).to_string()))?;
    let request = match next_frame(frames, deadline).await? {
        Frame::Request(Request::Cli(request)) => request,
        Frame::Request(Request::Exec(_)) => {
            return Err(Refusal::new(
                ErrorCode::Unsupported,
                "porter runs registered CLIs, not exec requests",
            ));
        }
        other => {
            return Err(Refusal::new(
                ErrorCode::BadRequest,
                format!("expected request, got {:?}", other.kind()),
            ));
        }
    };
    let registry = state.registry.snapshot();
    // Redacted, and bounded so one caller cannot write megabyte audit lines.
    audit.cli = bounded(&registry.secrets.redact_str(&request.cli));
    audit.args = request
        .args
        .iter()
        .take(AUDIT_MAX_ARGS)
        .map(|argument| bounded(&registry.secrets.redact_str(argument)))
        .collect();
    audit.cwd = bounded(&registry.secrets.redact_str(&request.cwd));

    if state.shutdown.is_cancelled() {
        return Err(Refusal::new(
            ErrorCode::ShuttingDown,
            "porter is shutting down",
        ));
    }
    let grant: Grant = state
        .tokens
        .validate(&request.token, Instant::now())
        .ok_or_else(|| {
            Refusal::new(
                ErrorCode::BadToken,
                "missing, unknown, expired or revoked token",
            )
        })?;
    audit.session = grant.session.clone();
    audit.contact = grant.contact.clone();
    audit.role = grant.role.clone();

    let cli: &LoadedCli = registry.clis.get(&request.cli).ok_or_else(|| {
        Refusal::new(
            ErrorCode::UnknownCli,
            format!("{} is not a registered CLI", request.cli),
        )
    })?;
    cli.policy
        .check(grant.role.as_deref(), &request.args)
        .map_err(|refusal| {
            Refusal::new(ErrorCode::DeniedArgs, format!("{} {refusal}", request.cli))
        })?;
    let cwd = cwd::translate(&state.config.workspace_root, &request.cwd)
        .map_err(|error| Refusal::new(ErrorCode::BadCwd, ErrorChain(&error).to_string()))?;
    let view = grant
        .view
        .as_deref()
        .map(|entries| view::View::new(&state.config.workspace_root, entries));
    // The CLI runs on the real workspace: it may work only where the caller's sandbox
    // could look (the root stands for the sandbox's own /workspace).
    if let Some(view) = &view
        && cwd != state.config.workspace_root
        && !view.contains(&cwd)
    {
        return Err(Refusal::new(
            ErrorCode::BadCwd,
            format!(
                "working directory {:?} is outside what the caller's role may read",
                request.cwd
            ),
        ));
    }
    // A file the call names for the CLI to read must be the file its spelling names in
    // the workspace (the grammar saw only the spelling): opened beneath the root by
    // saint-paths, so no `..`, no symlink (the CLI would follow it) and no hard link.
    // Porter's own files, secrets included, are readable by the CLI's uid.
    for file in cli.policy.files_read(&request.args) {
        let resolved =
            file_argument(&state.config.workspace_root, &cwd, &file).map_err(|error| {
                Refusal::new(
                    ErrorCode::DeniedArgs,
                    format!(
                        "{} arguments refused: {file:?} names a file outside the workspace ({})",
                        request.cli,
                        ErrorChain(&error)
                    ),
                )
            })?;
        if let Some(view) = &view
            && !view.contains(&resolved)
        {
            return Err(Refusal::new(
                ErrorCode::DeniedArgs,
                format!(
                    "{} arguments refused: {file:?} names a file the caller's role may not read",
                    request.cli
                ),
            ));
        }
    }
    state
        .rate_limits
        .check(
            &request.cli,
            cli.entry.rate_limit,
            registry.global_rate_limit,
        )
        .map_err(|hit| match hit {
            LimitHit::Cli => Refusal::new(
                ErrorCode::RateLimited,
                format!("rate limit for {} reached", request.cli),
            ),
            LimitHit::Global => Refusal::new(ErrorCode::RateLimited, "global rate limit reached"),
        })?;
    let session_slot = state.session_calls.acquire(&grant.session).ok_or_else(|| {
        Refusal::new(
            ErrorCode::RateLimited,
            format!(
                "session {:?} already has {} porter calls running",
                grant.session,
                state.session_calls.max()
            ),
        )
    })?;
    // gh runs git too (`pr checkout`, `repo clone`): both get the repository check and
    // the git hardening.
    let profile = cli.policy.profile();
    let runs_git = matches!(profile, Some(Profile::Git | Profile::Gh));
    if runs_git {
        let git = match profile {
            Some(Profile::Git) => PathBuf::from(&cli.entry.bin),
            _ => PathBuf::from("/usr/bin/git"),
        };
        let root = state.config.workspace_root.clone();
        let directory = cwd.clone();
        if git.exists() {
            tokio::task::spawn_blocking(move || git_guard::check(&git, &root, &directory))
                .await
                .map_err(|error| Refusal::new(ErrorCode::Internal, error.to_string()))?
                .map_err(|error| Refusal::new(ErrorCode::BadCwd, error.to_string()))?;
        }
    }
    let home = state.homes.create().map_err(|error| {
        Refusal::new(
            ErrorCode::Internal,
            format!("failed to create the call's home: {error}"),
        )
    })?;
    let (mut environment, dropped) = child_env::build(
        &home.path().to_string_lossy(),
        &cli.environment,
        &cli.entry.request_env,
        &cli.entry.protected_env,
        &request.env,
    );
    audit.dropped_env = dropped;
    if runs_git {
        let ceiling = state
            .config
            .workspace_root
            .parent()
            .unwrap_or(std::path::Path::new("/"));
        child_env::harden_git(&mut environment, ceiling);
    }
    // Last, so the real secrets are replaced by placeholders in the final environment.
    let injection = cli.injection.as_ref().map(|entry| {
        let caller = crate::inject::Caller {
            session: grant.session.clone(),
            contact: grant.contact.clone(),
            role: grant.role.clone(),
            cli: request.cli.clone(),
        };
        state.injector.begin_call(entry, caller, &mut environment)
    });
    Ok(Prepared {
        registry: registry.clone(),
        request,
        home,
        session_slot,
        cwd,
        environment,
        injection,
    })
}

/// Signals the call's supervisor, which passes SIGINT to the CLI's group and SIGTERM
/// to every descendant; a kill becomes SIGUSR1, on which the supervisor kills every
/// descendant (SIGKILL would end only the supervisor and orphan the rest). Never called
/// once the supervisor was reaped, so its pid cannot belong to anyone else.
fn signal_call(supervisor: Pid, signal: Signal) {
    let signal = if signal == Signal::SIGKILL {
        Signal::SIGUSR1
    } else {
        signal
    };
    let _ = nix::sys::signal::kill(supervisor, signal);
}

/// Kills the call's descendants if the call is dropped before its supervisor exited
/// (a panic or an aborted task).
struct SupervisorGuard(Option<Pid>);

impl Drop for SupervisorGuard {
    fn drop(&mut self) {
        if let Some(supervisor) = self.0 {
            signal_call(supervisor, Signal::SIGKILL);
        }
    }
}

/// How the streaming loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    Exited,
    TimedOut,
    Disconnected,
    Shutdown,
}

async fn run(
    state: &State,
    prepared: Prepared,
    frames: FramedRead<OwnedReadHalf, FrameCodec>,
    mut writer: OwnedWriteHalf,
    audit: &mut AuditLine,
) {
    let Prepared {
        registry,
        request,
        home,
        session_slot: _session_slot,
        cwd,
        environment,
        injection: _injection,
    } = prepared;
    let cli = &registry.clis[&request.cli];
    let relative_cwd = cwd
        .strip_prefix(&state.config.workspace_root)
        .ok()
        .filter(|relative| !relative.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    // The CLI runs under a supervisor started ahead of the call (see `supervisor`),
    // which enters the working directory itself, by a descriptor opened beneath the
    // workspace root.
    let launch = supervisor::Launch {
        root: state.config.workspace_root.clone(),
        cwd: relative_cwd.to_owned(),
        bin: cli.entry.bin.clone(),
        arguments: request.args.clone(),
        environment,
    };
    let started = match state.supervisors.take() {
        Ok(mut ready) => ready.launch(&launch).await.map(|()| ready),
        Err(error) => Err(error),
    };
    let (mut child, control) = match started {
        Ok(ready) => (ready.child, ready.control),
        Err(error) => {
            let message = format!("failed to start {}: {error}", request.cli);
            let _ = write_frame(
                &mut writer,
                &Frame::error(ErrorCode::Internal, message.clone()),
            )
            .await;
            audit.outcome = ErrorCode::Internal.as_str().to_owned();
            audit.reason = Some(message);
            let _ = tokio::task::spawn_blocking(move || home.remove()).await;
            return;
        }
    };
    let group = Pid::from_raw(
        child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .unwrap_or(0),
    );
    let mut guard = SupervisorGuard(Some(group));
    tracing::info!(cli = %request.cli, pid = group.as_raw(), uid = audit.peer.uid, "call started");

    let bytes_in = Arc::new(AtomicU64::new(0));
    let (disconnected_sender, mut disconnected) = oneshot::channel::<()>();
    let reader = tokio::spawn(forward_client(
        frames,
        // The CLI's stdin is the supervisor's socket; without stdin it sees EOF.
        request.stdin.then_some(control),
        group,
        bytes_in.clone(),
        disconnected_sender,
    ));

    let timeout = Duration::from_secs(cli.entry.timeout_seconds.max(1));
    let (stdout_pipe, stderr_pipe) = (
        child.stdout.take().expect("piped"),
        child.stderr.take().expect("piped"),
    );
    // Bigger pipes mean fewer wake-ups per megabyte; a refusal (pipe-max-size) is harmless.
    for pipe in [stdout_pipe.as_fd(), stderr_pipe.as_fd()] {
        let _ = nix::fcntl::fcntl(pipe, nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_SIZE));
    }
    let streams = Streams {
        stdout: stdout_pipe,
        stderr: stderr_pipe,
        secrets: registry.secrets.clone(),
    };
    let (ending, status, counts) = stream_until_done(
        state,
        &mut child,
        streams,
        &mut writer,
        group,
        timeout,
        &mut disconnected,
    )
    .await;
    reader.abort();
    if status.is_some() {
        // Reaped: the supervisor's pid is free for reuse and must not be signalled.
        guard.0 = None;
    }

    audit.bytes_stdout = counts.0;
    audit.bytes_stderr = counts.1;
    audit.bytes_stdin = bytes_in.load(Ordering::Relaxed);
    audit.exit = status.map(supervisor::exit_code);
    for (stream, count) in [
        ("stdout", counts.0),
        ("stderr", counts.1),
        ("stdin", audit.bytes_stdin),
    ] {
        state
            .metrics
            .bytes
            .get_or_create(&StreamLabels {
                cli: request.cli.clone(),
                stream: stream.to_owned(),
            })
            .inc_by(count);
    }
    let last_frame = match ending {
        Ending::Exited => {
            let code = audit.exit.unwrap_or(ErrorCode::Internal.exit_status());
            audit.outcome = if code == 0 { "ok" } else { "exit_nonzero" }.to_owned();
            Some(Frame::Exit { code })
        }
        Ending::TimedOut => {
            audit.outcome = ErrorCode::TimedOut.as_str().to_owned();
            audit.reason = Some(format!("killed after {} s", timeout.as_secs()));
            Some(Frame::error(
                ErrorCode::TimedOut,
                format!("{} timed out after {} s", request.cli, timeout.as_secs()),
            ))
        }
        Ending::Shutdown => {
            audit.outcome = "shutdown".to_owned();
            Some(Frame::error(
                ErrorCode::ShuttingDown,
                "porter is shutting down",
            ))
        }
        Ending::Disconnected => {
            audit.outcome = "disconnected".to_owned();
            None
        }
    };
    if let Some(frame) = last_frame {
        let _ = tokio::time::timeout(LAST_WRITE_TIMEOUT, async {
            let _ = write_frame(&mut writer, &frame).await;
            let _ = writer.shutdown().await;
        })
        .await;
    }
    // After the last frame, so the caller does not wait for it; the supervisor is gone
    // only after every process of the call, so nothing can still write to the home.
    let _ = tokio::task::spawn_blocking(move || home.remove()).await;
    tracing::info!(cli = %request.cli, outcome = %audit.outcome, exit = ?audit.exit, "call ended");
}

/// Reads the client's frames for the life of the call: stdin bytes, stdin EOF and
/// signals. Any end of the client stream (or garbage) counts as a disconnect.
async fn forward_client(
    mut frames: FramedRead<OwnedReadHalf, FrameCodec>,
    mut stdin: Option<tokio::net::UnixStream>,
    group: Pid,
    bytes_in: Arc<AtomicU64>,
    disconnected: oneshot::Sender<()>,
) {
    loop {
        match frames.next().await {
            Some(Ok(Frame::Stdin(data))) => {
                bytes_in.fetch_add(data.len() as u64, Ordering::Relaxed);
                if let Some(pipe) = stdin.as_mut()
                    && pipe.write_all(&data).await.is_err()
                {
                    // The child closed its stdin; later input has nowhere to go.
                    stdin = None;
                }
            }
            Some(Ok(Frame::StdinEof)) => stdin = None,
            Some(Ok(Frame::Signal(signal))) => {
                if let Ok(signal) = Signal::try_from(i32::from(signal.number())) {
                    signal_call(group, signal);
                }
            }
            Some(Ok(_))
            | Some(Err(CodecError::Io(_) | CodecError::Frame(_) | CodecError::Truncated))
            | None => {
                let _ = disconnected.send(());
                return;
            }
        }
    }
}

struct Streams {
    stdout: tokio::process::ChildStdout,
    stderr: tokio::process::ChildStderr,
    secrets: Arc<Secrets>,
}

/// Bytes read from one child pipe, redacted and framed.
struct Pump<R> {
    pipe: R,
    kind: FrameKind,
    redactor: StreamRedactor,
    redacting: bool,
    open: bool,
    count: u64,
    /// Read buffer with room for a frame header in front, so unredacted output is
    /// framed in place and written with one call.
    buffer: Vec<u8>,
    redacted: Vec<u8>,
    framed: Vec<u8>,
}

impl<R: AsyncRead + Unpin> Pump<R> {
    fn new(pipe: R, kind: FrameKind, secrets: Arc<Secrets>) -> Self {
        Self {
            pipe,
            kind,
            redacting: !secrets.is_empty(),
            redactor: StreamRedactor::new(secrets),
            open: true,
            count: 0,
            buffer: vec![0; HEADER_LEN + MAX_DATA_PAYLOAD],
            redacted: Vec::new(),
            framed: Vec::new(),
        }
    }

    /// Turns a read result into the frames to send (empty when nothing is safe yet).
    fn frames_for(&mut self, read: std::io::Result<usize>) -> &[u8] {
        self.redacted.clear();
        self.framed.clear();
        match read {
            Ok(0) | Err(_) => {
                self.open = false;
                self.redactor.finish(&mut self.redacted);
            }
            Ok(count) if !self.redacting => {
                self.count += count as u64;
                self.buffer[..HEADER_LEN].copy_from_slice(&FrameHeader::encode(self.kind, count));
                return &self.buffer[..HEADER_LEN + count];
            }
            Ok(count) => {
                self.count += count as u64;
                self.redactor.push(
                    &self.buffer[HEADER_LEN..HEADER_LEN + count],
                    &mut self.redacted,
                );
            }
        }
        encode_data(self.kind, &self.redacted, &mut self.framed);
        &self.framed
    }
}

/// Writes to the client unless it is gone; a client that stops reading must not hold
/// the call past `until` (its deadline), so a write still blocked then gives the client
/// up. Returns whether the write stalled.
async fn send(
    writer: &mut OwnedWriteHalf,
    bytes: &[u8],
    client_gone: &mut bool,
    until: tokio::time::Instant,
) -> bool {
    if *client_gone || bytes.is_empty() {
        return false;
    }
    match tokio::time::timeout_at(until, writer.write_all(bytes)).await {
        Ok(Ok(())) => false,
        Ok(Err(_)) => {
            *client_gone = true;
            false
        }
        Err(_) => {
            *client_gone = true;
            true
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn stream_until_done(
    state: &State,
    child: &mut Child,
    streams: Streams,
    writer: &mut OwnedWriteHalf,
    group: Pid,
    timeout: Duration,
    disconnected: &mut oneshot::Receiver<()>,
) -> (Ending, Option<ExitStatus>, (u64, u64)) {
    let mut stdout = Pump::new(streams.stdout, FrameKind::Stdout, streams.secrets.clone());
    let mut stderr = Pump::new(streams.stderr, FrameKind::Stderr, streams.secrets);
    let mut status: Option<ExitStatus> = None;
    let mut ending = Ending::Exited;
    let mut client_gone = false;
    let mut kill_at: Option<tokio::time::Instant> = None;
    let call_deadline = tokio::time::Instant::now() + timeout;
    let mut drain_until = call_deadline;
    let deadline = tokio::time::sleep_until(call_deadline);
    tokio::pin!(deadline);
    let drain_deadline = tokio::time::sleep(Duration::MAX / 4);
    tokio::pin!(drain_deadline);
    let kill_timer = tokio::time::sleep(Duration::MAX / 4);
    tokio::pin!(kill_timer);
    let mut terminating = false;

    // Ask the group to stop, and arm the SIGKILL that follows after the grace period.
    let terminate =
        |ending_now: Ending, ending: &mut Ending, kill_at: &mut Option<tokio::time::Instant>| {
            if *ending == Ending::Exited {
                *ending = ending_now;
            }
            if kill_at.is_none() {
                signal_call(group, Signal::SIGTERM);
                *kill_at = Some(tokio::time::Instant::now() + state.config.kill_grace);
            }
        };

    loop {
        if status.is_some() && !stdout.open && !stderr.open {
            break;
        }
        if let Some(at) = kill_at
            && !terminating
        {
            terminating = true;
            kill_timer.as_mut().reset(at);
        }
        tokio::select! {
            read = stdout.pipe.read(&mut stdout.buffer[HEADER_LEN..]), if stdout.open => {
                let bytes = stdout.frames_for(read);
                let until = if status.is_none() { call_deadline } else { drain_until };
                if send(writer, bytes, &mut client_gone, until).await {
                    terminate(Ending::TimedOut, &mut ending, &mut kill_at);
                } else if client_gone {
                    terminate(Ending::Disconnected, &mut ending, &mut kill_at);
                }
            }
            read = stderr.pipe.read(&mut stderr.buffer[HEADER_LEN..]), if stderr.open => {
                let bytes = stderr.frames_for(read);
                let until = if status.is_none() { call_deadline } else { drain_until };
                if send(writer, bytes, &mut client_gone, until).await {
                    terminate(Ending::TimedOut, &mut ending, &mut kill_at);
                } else if client_gone {
                    terminate(Ending::Disconnected, &mut ending, &mut kill_at);
                }
            }
            exited = child.wait(), if status.is_none() => {
                // The supervisor exits only after the last process of the call.
                status = exited.ok();
                drain_until = tokio::time::Instant::now() + DRAIN_AFTER_EXIT;
                drain_deadline.as_mut().reset(drain_until);
            }
            () = &mut drain_deadline, if status.is_some() => {
                break;
            }
            () = &mut deadline, if status.is_none() => {
                terminate(Ending::TimedOut, &mut ending, &mut kill_at);
            }
            () = &mut kill_timer, if terminating && status.is_none() => {
                signal_call(group, Signal::SIGKILL);
                kill_timer.as_mut().reset(tokio::time::Instant::now() + Duration::from_secs(3600));
            }
            _ = &mut *disconnected, if !client_gone => {
                client_gone = true;
                terminate(Ending::Disconnected, &mut ending, &mut kill_at);
            }
            () = state.force.cancelled(), if kill_at.is_none() => {
                terminate(Ending::Shutdown, &mut ending, &mut kill_at);
            }
        }
    }
    (ending, status, (stdout.count, stderr.count))
}

/// Where `file`, named relative to `cwd`, lies in the workspace: checked lexically and
/// opened beneath `root` by the kernel. A missing file passes (the CLI fails on it); a
/// directory passes (it is contained as much as a file); anything else the containment
/// refuses is an error.
fn file_argument(root: &Path, cwd: &Path, file: &str) -> Result<PathBuf, PathError> {
    let joined = cwd.join(file);
    let joined = joined
        .to_str()
        .ok_or_else(|| PathError::SuspiciousCharacters(file.to_string()))?;
    let path = WorkspacePath::parse(joined, root)?;
    match Workspace::open(root)?.exists(&path) {
        Ok(_) | Err(PathError::IsDirectory(_)) => Ok(root.join(path.as_str())),
        Err(error) => Err(error),
    }
}
