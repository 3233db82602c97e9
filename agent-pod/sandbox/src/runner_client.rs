//! Talks to a sandbox runner over its unix socket: handshake, one `Exec` request,
//! stdin, then the command's output as a stream of [`ExecEvent`]s; or one background
//! process request and its [`ProcessAnswer`].
//!
//! Touches only the runner socket it is given.

use futures::StreamExt;
use porter_protocol::{
    ErrorCode, Frame, PROTOCOL_VERSION, Request,
    async_io::{CodecError, FrameCodec, write_data, write_frame},
};
use saint_config::ErrorChain;
use tokio::{io::AsyncWrite, net::UnixStream};
use tokio_util::codec::FramedRead;

use super::{
    BrowserAnswer, ExecEvent, ExecRequest, ExecStream, ProcessAnswer, SandboxError, SandboxHandle,
};

fn protocol(error: CodecError) -> SandboxError {
    SandboxError::Protocol(ErrorChain(&error).to_string())
}

async fn send<W: AsyncWrite + Unpin>(writer: &mut W, frame: &Frame) -> Result<(), SandboxError> {
    write_frame(writer, frame).await.map_err(protocol)
}

/// Connects and says hello; a runner that closes during the handshake is as good as
/// gone ([`SandboxError::Unreachable`]).
async fn connect(
    handle: &SandboxHandle,
) -> Result<
    (
        FramedRead<tokio::net::unix::OwnedReadHalf, FrameCodec>,
        tokio::net::unix::OwnedWriteHalf,
    ),
    SandboxError,
> {
    let stream = UnixStream::connect(&handle.socket)
        .await
        .map_err(|source| SandboxError::Unreachable {
            path: handle.socket.clone(),
            source,
        })?;
    let (read_half, mut write_half) = stream.into_split();
    let mut frames = FramedRead::new(read_half, FrameCodec);
    send(
        &mut write_half,
        &Frame::Hello {
            version: PROTOCOL_VERSION,
        },
    )
    .await?;
    match frames.next().await.transpose().map_err(protocol)? {
        Some(Frame::Welcome { .. }) => Ok((frames, write_half)),
        Some(Frame::Error { code, message }) => Err(SandboxError::Refused {
            code: code.as_str(),
            message,
        }),
        None => {
            let source = std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "closed during handshake",
            );
            Err(SandboxError::Unreachable {
                path: handle.socket.clone(),
                source,
            })
        }
        Some(other) => Err(SandboxError::Protocol(format!(
            "expected welcome, got {:?}",
            other.kind()
        ))),
    }
}

/// Sends one background-process request (the handle's token filled in here) and
/// collects the answer: new output, then the runner's `Process` frame. The runner's
/// buffer cap bounds the output.
pub async fn process(
    handle: SandboxHandle,
    request: Request,
) -> Result<ProcessAnswer, SandboxError> {
    let (mut frames, mut write_half) = connect(&handle).await?;
    send(
        &mut write_half,
        &Frame::Request(request.with_token(&handle.token)),
    )
    .await?;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    loop {
        match frames.next().await.transpose().map_err(protocol)? {
            Some(Frame::Stdout(data)) => stdout.extend(data),
            Some(Frame::Stderr(data)) => stderr.extend(data),
            Some(Frame::Process(reply)) => {
                return Ok(ProcessAnswer {
                    stdout,
                    stderr,
                    reply,
                    lease: handle.lease,
                });
            }
            Some(Frame::Error { code, message }) => {
                return Err(SandboxError::Refused {
                    code: code.as_str(),
                    message,
                });
            }
            Some(other) => {
                return Err(SandboxError::Protocol(format!(
                    "unexpected {:?} frame from runner",
                    other.kind()
                )));
            }
            None => {
                return Err(SandboxError::Protocol(
                    "runner closed the connection before answering".to_string(),
                ));
            }
        }
    }
}

/// Sends one browser action (the handle's token filled in here) and collects the
/// answer: the action's bytes (page text or PNG), then the runner's `Browser` frame.
pub async fn browser(
    handle: SandboxHandle,
    request: porter_protocol::browser::BrowserRequest,
    max_bytes: usize,
) -> Result<BrowserAnswer, SandboxError> {
    let (mut frames, mut write_half) = connect(&handle).await?;
    let request = Request::Browser(request).with_token(&handle.token);
    send(&mut write_half, &Frame::Request(request)).await?;
    let mut data = Vec::new();
    loop {
        match frames.next().await.transpose().map_err(protocol)? {
            Some(Frame::Stdout(chunk)) => {
                if data.len() + chunk.len() > max_bytes {
                    return Err(SandboxError::Protocol(format!(
                        "the browser's answer is larger than {max_bytes} bytes"
                    )));
                }
                data.extend(chunk);
            }
            Some(Frame::Browser(reply)) => return Ok(BrowserAnswer { data, reply }),
            Some(Frame::Error { code, message }) => {
                return Err(SandboxError::Refused {
                    code: code.as_str(),
                    message,
                });
            }
            Some(other) => {
                return Err(SandboxError::Protocol(format!(
                    "unexpected {:?} frame from runner",
                    other.kind()
                )));
            }
            None => {
                return Err(SandboxError::Protocol(
                    "runner closed the connection before answering".to_string(),
                ));
            }
        }
    }
}

/// Connects, sends the request (and its stdin) and returns the command's events. The
/// handle (and its lease) lives as long as the stream, so the sandbox is not reaped
/// while a command runs. An unreachable socket is [`SandboxError::Unreachable`], which
/// callers treat as a dead sandbox.
pub async fn start(
    handle: SandboxHandle,
    request: &ExecRequest,
) -> Result<ExecStream, SandboxError> {
    let (frames, mut write_half) = connect(&handle).await?;

    let exec = porter_protocol::ExecRequest {
        command: request.command.clone(),
        cwd: request.cwd.clone(),
        env: request.env.clone(),
        timeout_seconds: Some(request.timeout.as_secs().max(1)),
        token: handle.token.clone(),
        stdin: request.stdin.is_some(),
    };
    send(&mut write_half, &Frame::Request(Request::Exec(exec))).await?;
    if let Some(stdin) = &request.stdin {
        write_data(&mut write_half, porter_protocol::FrameKind::Stdin, stdin)
            .await
            .map_err(|error| SandboxError::Protocol(format!("failed to send stdin: {error}")))?;
        send(&mut write_half, &Frame::StdinEof).await?;
    }

    // The write half must stay open: closing it tells the runner the client left.
    let state = Some((frames, write_half, handle));
    let events = futures::stream::unfold(state, |state| async move {
        let (mut frames, write_half, handle) = state?;
        let event = match frames.next().await {
            Some(Ok(Frame::Stdout(data))) => Ok(ExecEvent::Stdout(data)),
            Some(Ok(Frame::Stderr(data))) => Ok(ExecEvent::Stderr(data)),
            Some(Ok(Frame::Exit { code })) => return Some((Ok(ExecEvent::Exit(code)), None)),
            Some(Ok(Frame::Error {
                code: ErrorCode::TimedOut,
                ..
            })) => {
                return Some((Ok(ExecEvent::TimedOut), None));
            }
            Some(Ok(Frame::Error { code, message })) => {
                return Some((
                    Err(SandboxError::Refused {
                        code: code.as_str(),
                        message,
                    }),
                    None,
                ));
            }
            Some(Ok(other)) => {
                let message = format!("unexpected {:?} frame from runner", other.kind());
                return Some((Err(SandboxError::Protocol(message)), None));
            }
            Some(Err(error)) => return Some((Err(protocol(error)), None)),
            None => {
                let message = "runner closed the connection before the command ended".to_string();
                return Some((Err(SandboxError::Protocol(message)), None));
            }
        };
        Some((event, Some((frames, write_half, handle))))
    });
    Ok(events.boxed())
}
