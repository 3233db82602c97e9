//! Serves one client connection: handshake, one `Exec` request, the command's output
//! as stdout/stderr frames, then an `Exit` frame (or an `Error` frame). A background
//! process request (`Spawn`, `Poll`, `Write`, `Kill`, `List`) is answered by
//! `background` and ends the connection with a `Process` frame; the process outlives it.
//!
//! Runs the command with `sh -c` (the sandbox is the boundary), in a new process group
//! that is killed on timeout, on client disconnect and when the command ends.

use std::{os::unix::process::ExitStatusExt, process::Stdio, sync::Arc, time::Duration};

use porter_protocol::{
    ExecRequest, RemoteSignal, Request, async_io::CodecError, handshake, process::ProcessReply,
};
use rustix::process::Signal;
use saint_config::ErrorChain;
use saint_paths::Directory;
use thiserror::Error;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::UnixStream,
    process::Command,
    time::Instant,
};

use crate::{
    background::{Polled, Refusal},
    command_env::command_environment,
    process_group::ProcessGroup,
    state::State,
    wire::{ErrorCode, Frame, FrameKind, FrameReader, FrameWriter, WireError},
};

/// How long a command may keep its output pipes open after its shell exited (a
/// leftover that escaped the group); after this the runner stops reading.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);

/// Grace between SIGTERM and SIGKILL on timeout.
const TERMINATE_GRACE: Duration = Duration::from_secs(2);

/// Why a connection ended early.
#[derive(Debug, Error)]
pub enum ConnectionError {
    #[error("failed to serve connection")]
    Wire(#[from] WireError),
    #[error("failed to serve connection: client sent {0:?} out of order")]
    OutOfOrder(FrameKind),
    #[error("failed to serve connection: client closed before sending a request")]
    ClosedEarly,
}

/// Serves one connection to completion.
pub async fn serve(stream: UnixStream, state: Arc<State>) -> Result<(), ConnectionError> {
    let (read_half, write_half) = stream.into_split();
    let mut reader = FrameReader::new(read_half);
    let mut writer = FrameWriter::new(write_half);

    match next_or_refuse(&mut reader, &mut writer).await? {
        Some(Frame::Hello { version }) if handshake::is_supported(version) => {
            writer.send(&Frame::Welcome { version }).await?;
        }
        Some(Frame::Hello { version }) => {
            let message = format!("protocol version {version} is not supported");
            writer
                .send(&Frame::error(ErrorCode::UnsupportedVersion, message))
                .await?;
            return Ok(());
        }
        Some(other) => return refuse_out_of_order(&mut writer, other.kind()).await,
        None => return Err(ConnectionError::ClosedEarly),
    }

    let request = match next_or_refuse(&mut reader, &mut writer).await? {
        Some(Frame::Request(request)) => request,
        Some(other) => return refuse_out_of_order(&mut writer, other.kind()).await,
        None => return Err(ConnectionError::ClosedEarly),
    };

    if !state.token_matches(request.token()) {
        writer
            .send(&Frame::error(ErrorCode::BadToken, "bad runner token"))
            .await?;
        return Ok(());
    }
    let request = match request {
        Request::Exec(request) => request,
        Request::Browser(browser) => return serve_browser(&browser, &state, &mut writer).await,
        background => return serve_background(background, &state, &mut writer).await,
    };
    let working_directory = match state.roots.open(&request.cwd) {
        Ok(directory) => directory,
        Err(error) => {
            let message = ErrorChain(&error).to_string();
            writer
                .send(&Frame::error(ErrorCode::BadCwd, message))
                .await?;
            return Ok(());
        }
    };
    run(
        &request,
        working_directory,
        &state,
        &mut reader,
        &mut writer,
    )
    .await
}

/// Answers one background-process request: the new output (poll, kill) as data frames,
/// then a `Process` frame, or an `Error` frame saying why not.
async fn serve_background<W: tokio::io::AsyncWrite + Unpin>(
    request: Request,
    state: &State,
    writer: &mut FrameWriter<W>,
) -> Result<(), ConnectionError> {
    let background = &state.background;
    let answer: Result<(Option<Polled>, ProcessReply), Refusal> = match request {
        Request::Spawn(spawn) => match state.roots.open(&spawn.cwd) {
            Ok(directory) => background
                .spawn(
                    &spawn,
                    directory,
                    &state.shell,
                    &state.roots.workspace,
                    Duration::from_secs(state.default_timeout_seconds),
                )
                .map(|id| (None, ProcessReply::Started { id })),
            Err(error) => Err(Refusal {
                code: ErrorCode::BadCwd,
                message: ErrorChain(&error).to_string(),
            }),
        },
        Request::Poll(target) => background.poll(&target.owner, &target.id).map(polled),
        Request::Kill(target) => background.kill(&target.owner, &target.id).await.map(polled),
        Request::Write(write) => background
            .write(&write.owner, &write.id, write.data.as_bytes(), write.close)
            .await
            .map(|status| (None, ProcessReply::Status { status })),
        Request::List(list) => Ok((
            None,
            ProcessReply::Listed {
                processes: background.list(&list.owner),
            },
        )),
        // Served by `run` and `serve_browser`; never routed here.
        Request::Exec(_) | Request::Browser(_) => Err(Refusal {
            code: ErrorCode::BadRequest,
            message: "not a background request".to_string(),
        }),
    };
    match answer {
        Ok((output, reply)) => {
            if let Some(output) = output {
                writer.send_data(FrameKind::Stdout, &output.stdout).await?;
                writer.send_data(FrameKind::Stderr, &output.stderr).await?;
            }
            writer.send(&Frame::Process(reply)).await?;
        }
        Err(Refusal { code, message }) => writer.send(&Frame::error(code, message)).await?,
    }
    Ok(())
}

/// Answers one browser action: its bytes (text or PNG) as data frames, then a
/// `Browser` frame, or an `Error` frame saying why not.
async fn serve_browser<W: tokio::io::AsyncWrite + Unpin>(
    request: &porter_protocol::browser::BrowserRequest,
    state: &State,
    writer: &mut FrameWriter<W>,
) -> Result<(), ConnectionError> {
    match state.browsers.act(request).await {
        Ok(acted) => {
            writer.send_data(FrameKind::Stdout, &acted.data).await?;
            writer.send(&Frame::Browser(acted.reply)).await?;
        }
        Err(Refusal { code, message }) => writer.send(&Frame::error(code, message)).await?,
    }
    Ok(())
}

/// A poll's answer: the output goes as data frames, the status as the reply.
fn polled(output: Polled) -> (Option<Polled>, ProcessReply) {
    let reply = ProcessReply::Status {
        status: output.status.clone(),
    };
    (Some(output), reply)
}

/// The next frame. One that does not decode (a client that does not speak the protocol,
/// or a corrupt frame) is answered with a `BadRequest` error frame saying why, and the
/// connection ends: nothing after it is read, so nothing runs.
async fn next_or_refuse<R, W>(
    reader: &mut FrameReader<R>,
    writer: &mut FrameWriter<W>,
) -> Result<Option<Frame>, ConnectionError>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    match reader.next().await {
        Err(WireError::Codec(CodecError::Frame(error))) => {
            let message = ErrorChain(&error).to_string();
            writer
                .send(&Frame::error(ErrorCode::BadRequest, message))
                .await?;
            Err(ConnectionError::Wire(WireError::Codec(CodecError::Frame(
                error,
            ))))
        }
        read => Ok(read?),
    }
}

async fn refuse_out_of_order<W: tokio::io::AsyncWrite + Unpin>(
    writer: &mut FrameWriter<W>,
    kind: FrameKind,
) -> Result<(), ConnectionError> {
    let message = format!("unexpected {kind:?} frame");
    writer
        .send(&Frame::error(ErrorCode::BadRequest, message))
        .await?;
    Err(ConnectionError::OutOfOrder(kind))
}

/// How the command's run ended.
enum Ending {
    Exited(i32),
    TimedOut,
    ClientGone,
}

async fn run(
    request: &ExecRequest,
    working_directory: Directory,
    state: &State,
    reader: &mut FrameReader<tokio::net::unix::OwnedReadHalf>,
    writer: &mut FrameWriter<tokio::net::unix::OwnedWriteHalf>,
) -> Result<(), ConnectionError> {
    let mut command = shell_command(request, &working_directory, state);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            let message = format!("failed to start command: {error}");
            writer
                .send(&Frame::error(ErrorCode::Internal, message))
                .await?;
            return Ok(());
        }
    };
    let group = ProcessGroup::new(child.id().unwrap_or_default());
    let _registration = state.register_group(&group);

    let pipes = Pipes {
        stdin: child.stdin.take(),
        stdout: child.stdout.take().expect("stdout is piped"),
        stderr: child.stderr.take().expect("stderr is piped"),
    };
    let timeout = Duration::from_secs(
        request
            .timeout_seconds
            .unwrap_or(state.default_timeout_seconds),
    );
    let ending = relay(&mut child, &group, pipes, timeout, reader, writer).await;

    match ending {
        Ending::Exited(code) => {
            writer.send(&Frame::Exit { code }).await?;
        }
        Ending::TimedOut => {
            group.signal(Signal::TERM);
            let _ = tokio::time::timeout(TERMINATE_GRACE, child.wait()).await;
            group.kill();
            let _ = child.wait().await;
            let message = format!(
                "command timed out after {} s and was killed",
                timeout.as_secs()
            );
            writer
                .send(&Frame::error(ErrorCode::TimedOut, message))
                .await?;
        }
        Ending::ClientGone => {
            group.kill();
            let _ = child.wait().await;
        }
    }
    Ok(())
}

/// `sh -c <command>` with only the request's environment, in the checked working
/// directory and a process group of its own.
fn shell_command(request: &ExecRequest, working_directory: &Directory, state: &State) -> Command {
    let environment = command_environment(&state.roots.workspace, &request.env);
    let mut command = Command::new(&state.shell);
    command
        .arg("-c")
        .arg(&request.command)
        .env_clear()
        .envs(&environment)
        // The checked directory itself, not whatever its name points at by now (a
        // command of this sandbox may have swapped it for a symlink meanwhile).
        .current_dir(working_directory.entry_path())
        // A new process group: timeout and disconnect kill every process the command
        // started, not just the shell.
        .process_group(0)
        .stdin(if request.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// The command's standard streams, taken from the child.
struct Pipes {
    /// Closed (`None`) once the client sent EOF or the command stopped reading.
    stdin: Option<tokio::process::ChildStdin>,
    stdout: tokio::process::ChildStdout,
    stderr: tokio::process::ChildStderr,
}

/// Relays output to the client and the client's stdin and signals to the command until
/// the command has exited and its output is drained, the deadline passes, or the client
/// goes away.
async fn relay(
    child: &mut tokio::process::Child,
    group: &ProcessGroup,
    pipes: Pipes,
    timeout: Duration,
    reader: &mut FrameReader<tokio::net::unix::OwnedReadHalf>,
    writer: &mut FrameWriter<tokio::net::unix::OwnedWriteHalf>,
) -> Ending {
    let Pipes {
        mut stdin,
        mut stdout,
        mut stderr,
    } = pipes;
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let drain_deadline = tokio::time::sleep(Duration::MAX / 4);
    tokio::pin!(drain_deadline);

    let mut stdout_buffer = vec![0_u8; 64 * 1024];
    let mut stderr_buffer = vec![0_u8; 64 * 1024];
    let (mut stdout_open, mut stderr_open, mut client_open) = (true, true, true);
    let mut exit_code: Option<i32> = None;

    loop {
        if exit_code.is_some() && !stdout_open && !stderr_open {
            break Ending::Exited(exit_code.unwrap_or_default());
        }
        tokio::select! {
            read = stdout.read(&mut stdout_buffer), if stdout_open => match read {
                Ok(0) | Err(_) => stdout_open = false,
                Ok(count) => {
                    if writer.send_data(FrameKind::Stdout, &stdout_buffer[..count]).await.is_err() {
                        break Ending::ClientGone;
                    }
                }
            },
            read = stderr.read(&mut stderr_buffer), if stderr_open => match read {
                Ok(0) | Err(_) => stderr_open = false,
                Ok(count) => {
                    if writer.send_data(FrameKind::Stderr, &stderr_buffer[..count]).await.is_err() {
                        break Ending::ClientGone;
                    }
                }
            },
            frame = reader.next(), if client_open => match frame {
                Ok(Some(Frame::Stdin(data))) => {
                    if let Some(pipe) = stdin.as_mut() {
                        // A command that stopped reading its stdin is not an error here.
                        if pipe.write_all(&data).await.is_err() {
                            stdin = None;
                        }
                    }
                }
                Ok(Some(Frame::StdinEof)) => stdin = None,
                Ok(Some(Frame::Signal(signal))) => group.signal(match signal {
                    RemoteSignal::Interrupt => Signal::INT,
                    RemoteSignal::Terminate => Signal::TERM,
                }),
                Ok(Some(_)) | Err(_) => break Ending::ClientGone,
                // The client went away: nobody reads the output, so nothing may keep running.
                Ok(None) => {
                    if exit_code.is_some() {
                        client_open = false;
                    } else {
                        break Ending::ClientGone;
                    }
                }
            },
            status = child.wait(), if exit_code.is_none() => {
                let status = status.ok();
                let code = status
                    .and_then(|status| status.code().or_else(|| status.signal().map(|signal| 128 + signal)))
                    .unwrap_or(-1);
                exit_code = Some(code);
                // Whatever the command left in its group (`sleep 100 &`) ends with it.
                group.kill();
                drain_deadline.as_mut().reset(Instant::now() + DRAIN_AFTER_EXIT);
            },
            () = &mut deadline, if exit_code.is_none() => break Ending::TimedOut,
            () = &mut drain_deadline, if exit_code.is_some() => {
                break Ending::Exited(exit_code.unwrap_or_default());
            },
        }
    }
}
