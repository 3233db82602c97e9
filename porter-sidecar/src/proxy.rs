//! `cliport-proxy`: the sandbox side. argv\[0\] names the CLI; the arguments, cwd, token
//! and stdin go to Porter over its unix socket; stdout/stderr frames come back to this
//! process's stdout/stderr; the exit code is the CLI's (124 timeout, 125+ Porter errors).
//!
//! Blocking std I/O only (no async runtime) so start-up stays in the sub-millisecond
//! range. Touches its own stdio, the socket and a token file.

use std::{
    ffi::OsString,
    fs::File,
    io::{self, Read, Write},
    os::fd::AsFd,
    os::unix::net::UnixStream,
    path::Path,
    sync::{Arc, Mutex},
};

use porter_protocol::{
    CliRequest, Frame, FrameHeader, FrameKind, PROTOCOL_VERSION, RemoteSignal, Request,
    frame::{HEADER_LEN, MAX_DATA_PAYLOAD},
    sync_io::{write_data, write_frame},
};
use saint_config::ErrorChain;

/// Where the socket is unless `CLIPORT_SOCKET` says otherwise.
pub const DEFAULT_SOCKET: &str = saint_config::sandbox_contract::PORTER_SOCKET_PATH;

/// The binary's own name: invoked under it, the first argument names the CLI.
pub const PROXY_NAME: &str = "cliport-proxy";

/// Exit status for Porter-side failures that have no error frame (no socket, broken
/// stream).
pub const EXIT_PORTER_FAILURE: i32 = 125;

/// Presentation hints forwarded from the caller's environment.
const HINTS: &[&str] = &["TERM", "COLUMNS", "LINES", "NO_COLOR", "CLICOLOR", "TZ"];

/// Runs the proxy with the process's arguments and environment; returns the exit code.
pub fn main() -> i32 {
    let mut arguments = std::env::args_os();
    let program = arguments.next().unwrap_or_default();
    let invoked_as = Path::new(&program)
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut rest: Vec<OsString> = arguments.collect();
    let cli = if invoked_as == PROXY_NAME || invoked_as.is_empty() {
        if rest.is_empty() {
            eprintln!(
                "{PROXY_NAME}: usage: {PROXY_NAME} CLI [ARGS...] (or call it through a symlink named after the CLI)"
            );
            return EXIT_PORTER_FAILURE;
        }
        rest.remove(0).to_string_lossy().into_owned()
    } else {
        invoked_as
    };
    match run(&cli, rest) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("{cli}: porter: {message}");
            EXIT_PORTER_FAILURE
        }
    }
}

/// The caller token: `CLIPORT_TOKEN`, else the file named by `CLIPORT_TOKEN_FILE`. There
/// is deliberately no default file: the directory the socket lives in is shared by every
/// sandbox of the bot, so a token there would be everyone's.
fn read_token() -> String {
    if let Ok(token) = std::env::var("CLIPORT_TOKEN") {
        return token;
    }
    std::env::var("CLIPORT_TOKEN_FILE")
        .ok()
        .and_then(|path| std::fs::read_to_string(path).ok())
        .map(|text| text.trim().to_owned())
        .unwrap_or_default()
}

fn run(cli: &str, arguments: Vec<OsString>) -> Result<i32, String> {
    let args = arguments
        .into_iter()
        .map(|argument| {
            argument
                .into_string()
                .map_err(|argument| format!("argument {argument:?} is not UTF-8"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // `CLIPORT_CWD` stands in for the working directory where the caller's path is not
    // the sandbox path (tests, local runs); Porter validates it like any other cwd.
    let cwd = match std::env::var("CLIPORT_CWD") {
        Ok(cwd) => cwd,
        Err(_) => {
            let cwd = std::env::current_dir()
                .map_err(|error| format!("failed to read the working directory: {error}"))?;
            cwd.to_str()
                .ok_or("the working directory is not UTF-8")?
                .to_owned()
        }
    };
    let env = HINTS
        .iter()
        .filter_map(|name| {
            std::env::var(name)
                .ok()
                .map(|value| ((*name).to_owned(), value))
        })
        .collect();
    let request = Request::Cli(CliRequest {
        cli: cli.to_owned(),
        args,
        cwd,
        token: read_token(),
        env,
        stdin: true,
    });

    let socket_path = std::env::var("CLIPORT_SOCKET").unwrap_or_else(|_| DEFAULT_SOCKET.to_owned());
    let stream = UnixStream::connect(&socket_path)
        .map_err(|error| format!("failed to connect to {socket_path}: {error}"))?;
    let mut opening = Frame::Hello {
        version: PROTOCOL_VERSION,
    }
    .to_bytes()
    .map_err(|error| ErrorChain(&error).to_string())?;
    Frame::Request(request)
        .encode_into(&mut opening)
        .map_err(|error| ErrorChain(&error).to_string())?;
    let writer = Arc::new(Mutex::new(
        stream.try_clone().map_err(|error| error.to_string())?,
    ));
    // Hello and request go out together: no round trip before the request. Porter
    // may refuse the connection (peer not allowed, shutting down) and close it before
    // the request is written; its Error frame is still readable, so a closed pipe here
    // is not the error to report: `receive` reads Porter's own reason.
    if let Err(error) = writer.lock().expect("socket lock").write_all(&opening)
        && !matches!(
            error.kind(),
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
        )
    {
        return Err(format!("failed to send the request: {error}"));
    }

    spawn_stdin_forwarder(writer.clone());
    spawn_signal_forwarder(writer)?;
    receive(cli, stream)
}

/// Forwards this process's stdin as stdin frames, then stdin EOF.
fn spawn_stdin_forwarder(writer: Arc<Mutex<UnixStream>>) {
    std::thread::spawn(move || {
        let mut stdin = io::stdin().lock();
        let mut buffer = vec![0_u8; MAX_DATA_PAYLOAD / 4];
        loop {
            match stdin.read(&mut buffer) {
                Ok(0) | Err(_) => {
                    let _ =
                        write_frame(&mut *writer.lock().expect("socket lock"), &Frame::StdinEof);
                    return;
                }
                Ok(count) => {
                    if write_data(
                        &mut *writer.lock().expect("socket lock"),
                        FrameKind::Stdin,
                        &buffer[..count],
                    )
                    .is_err()
                    {
                        return;
                    }
                }
            }
        }
    });
}

/// SIGINT/SIGTERM/SIGHUP: the first is forwarded to the remote process group; a
/// second one ends the proxy at once (closing the socket, so Porter kills the child).
fn spawn_signal_forwarder(writer: Arc<Mutex<UnixStream>>) -> Result<(), String> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|error| error.to_string())?;
    std::thread::spawn(move || {
        let mut forwarded = false;
        for signal in signals.forever() {
            if forwarded {
                std::process::exit(128 + signal);
            }
            forwarded = true;
            let remote = if signal == SIGINT {
                RemoteSignal::Interrupt
            } else {
                RemoteSignal::Terminate
            };
            let sent = writer
                .lock()
                .map(|mut stream| write_frame(&mut *stream, &Frame::Signal(remote)).is_ok())
                .unwrap_or(false);
            if !sent {
                std::process::exit(128 + signal);
            }
        }
    });
    Ok(())
}

/// Writes data frames to stdout/stderr until the exit or error frame. Data is written
/// straight from the socket buffer as it arrives (even part of a frame), so output is
/// neither delayed nor copied twice.
fn receive(cli: &str, mut stream: UnixStream) -> Result<i32, String> {
    let duplicate = |fd: std::os::fd::BorrowedFd<'_>| {
        fd.try_clone_to_owned()
            .map(File::from)
            .map_err(|error| error.to_string())
    };
    // Unbuffered handles on fds 1 and 2: every byte is written as soon as it arrives.
    let mut stdout = duplicate(io::stdout().as_fd())?;
    let mut stderr = duplicate(io::stderr().as_fd())?;
    let mut buffer = vec![0_u8; 2 * (MAX_DATA_PAYLOAD + HEADER_LEN)];
    let (mut start, mut end) = (0_usize, 0_usize);
    // A data frame whose payload is still arriving: its kind and the bytes left.
    let mut pending: Option<(FrameKind, usize)> = None;
    loop {
        loop {
            if let Some((kind, remaining)) = pending {
                let available = (end - start).min(remaining);
                if available == 0 && remaining > 0 {
                    break;
                }
                let target = if kind == FrameKind::Stdout {
                    &mut stdout
                } else {
                    &mut stderr
                };
                if let Err(error) = target.write_all(&buffer[start..start + available]) {
                    // Our reader went away (`gh ... | head`): stop; closing the socket ends the child.
                    if error.kind() == io::ErrorKind::BrokenPipe {
                        return Ok(141);
                    }
                    return Err(format!("failed to write output: {error}"));
                }
                start += available;
                pending = (remaining > available).then_some((kind, remaining - available));
                continue;
            }
            let Some(header_bytes) = buffer[start..end].first_chunk::<HEADER_LEN>() else {
                break;
            };
            let header = FrameHeader::parse(*header_bytes)
                .map_err(|error| ErrorChain(&error).to_string())?;
            if matches!(header.kind, FrameKind::Stdout | FrameKind::Stderr) {
                start += HEADER_LEN;
                pending = Some((header.kind, header.len));
                continue;
            }
            if !matches!(
                header.kind,
                FrameKind::Welcome | FrameKind::Exit | FrameKind::Error
            ) {
                return Err(format!("unexpected {:?} frame from porter", header.kind));
            }
            if end - start < HEADER_LEN + header.len {
                break;
            }
            let payload = buffer[start + HEADER_LEN..start + HEADER_LEN + header.len].to_vec();
            start += HEADER_LEN + header.len;
            match Frame::decode(header.kind, payload)
                .map_err(|error| ErrorChain(&error).to_string())?
            {
                Frame::Welcome { .. } => {}
                Frame::Exit { code } => {
                    return Ok(if (0..=255).contains(&code) {
                        code
                    } else {
                        EXIT_PORTER_FAILURE
                    });
                }
                Frame::Error { code, message } => {
                    eprintln!("{cli}: porter: {message}");
                    return Ok(code.exit_status());
                }
                other => return Err(format!("unexpected {:?} frame from porter", other.kind())),
            }
        }
        // Keep the unread tail at the front; the buffer holds at least one whole
        // control frame (every kind's limit is below its size) after compaction.
        buffer.copy_within(start..end, 0);
        end -= start;
        start = 0;
        let count = loop {
            match stream.read(&mut buffer[end..]) {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                other => {
                    break other.map_err(|error| format!("failed to read from porter: {error}"))?;
                }
            }
        };
        if count == 0 {
            return Err("porter closed the connection before the command finished".to_owned());
        }
        end += count;
    }
}
