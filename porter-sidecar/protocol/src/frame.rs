//! Frames on the wire: `[kind:u8][len:u32 BE][payload]`.
//!
//! Kinds 0, 1 and 2 are the file descriptors (stdin, stdout, stderr) in that order;
//! the rest are control frames. Every kind has its own payload limit, checked on the
//! header *before* any buffer is sized from the length field, so a hostile peer cannot
//! make either side allocate more than [`MAX_FRAME_PAYLOAD`].
//!
//! Pure: bytes in, bytes out. `sync_io` and `async_io` bring the I/O.

use thiserror::Error;

use crate::{
    browser::{BrowserReply, BrowserReplyError, MAX_BROWSER_REPLY},
    handshake::{self, HandshakeError},
    process::{MAX_PROCESS_REPLY, ProcessReply, ProcessReplyError},
    request::{Request, RequestError},
};

/// Bytes in a frame header.
pub const HEADER_LEN: usize = 5;

/// Largest stdin/stdout/stderr payload. Writers split larger chunks.
pub const MAX_DATA_PAYLOAD: usize = 256 * 1024;

/// Largest request payload (arguments and environment hints together).
pub const MAX_REQUEST_PAYLOAD: usize = 1024 * 1024;

/// Largest error message, in bytes (longer messages are cut on a char boundary).
pub const MAX_ERROR_MESSAGE: usize = 4096;

/// The largest payload of any kind; a decoder never holds more than this plus a header.
pub const MAX_FRAME_PAYLOAD: usize = MAX_REQUEST_PAYLOAD;

/// What a frame carries; the first byte of every frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameKind {
    /// Client → server: bytes for the child's stdin.
    Stdin = 0,
    /// Server → client: bytes the child wrote to stdout.
    Stdout = 1,
    /// Server → client: bytes the child wrote to stderr.
    Stderr = 2,
    /// Client → server: the child's stdin is finished (close it).
    StdinEof = 3,
    /// Client → server, first frame: magic and protocol version.
    Hello = 16,
    /// Server → client: the version the server speaks on this connection.
    Welcome = 17,
    /// Client → server, second frame: what to run (JSON).
    Request = 18,
    /// Client → server: deliver a signal to the child's process group.
    Signal = 19,
    /// Server → client, last frame: the child exited.
    Exit = 32,
    /// Server → client, last frame: the call was refused or failed.
    Error = 33,
    /// Server → client, last frame: the answer to a background-process request (JSON).
    Process = 34,
    Browser = 35,
}

impl FrameKind {
    /// Parses the kind byte.
    pub fn from_byte(byte: u8) -> Option<Self> {
        Some(match byte {
            0 => Self::Stdin,
            1 => Self::Stdout,
            2 => Self::Stderr,
            3 => Self::StdinEof,
            16 => Self::Hello,
            17 => Self::Welcome,
            18 => Self::Request,
            19 => Self::Signal,
            32 => Self::Exit,
            33 => Self::Error,
            34 => Self::Process,
            35 => Self::Browser,
            _ => return None,
        })
    }

    /// The largest payload this kind may carry.
    pub fn max_payload(self) -> usize {
        match self {
            Self::Stdin | Self::Stdout | Self::Stderr => MAX_DATA_PAYLOAD,
            Self::StdinEof => 0,
            Self::Hello => handshake::HELLO_LEN,
            Self::Welcome => 2,
            Self::Request => MAX_REQUEST_PAYLOAD,
            Self::Signal => 1,
            Self::Exit => 4,
            Self::Error => 1 + MAX_ERROR_MESSAGE,
            Self::Process => MAX_PROCESS_REPLY,
            Self::Browser => MAX_BROWSER_REPLY,
        }
    }
}

/// A signal the client may ask the server to deliver to the child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteSignal {
    /// SIGINT: the caller pressed Ctrl-C.
    Interrupt,
    /// SIGTERM: the caller was asked to stop.
    Terminate,
}

impl RemoteSignal {
    /// The Linux signal number.
    pub fn number(self) -> u8 {
        match self {
            Self::Interrupt => 2,
            Self::Terminate => 15,
        }
    }

    fn from_number(number: u8) -> Option<Self> {
        match number {
            2 => Some(Self::Interrupt),
            15 => Some(Self::Terminate),
            _ => None,
        }
    }
}

/// Why the server refused or ended a call; the first payload byte of an `Error` frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ErrorCode {
    /// The client speaks a protocol version the server does not.
    UnsupportedVersion = 1,
    /// The frames were malformed or out of order.
    BadRequest = 2,
    /// No CLI of that exact name is registered.
    UnknownCli = 3,
    /// The token is missing, unknown, expired or revoked.
    BadToken = 4,
    /// The working directory is outside the workspace or does not exist.
    BadCwd = 5,
    /// The argument policy refused the call before anything ran.
    DeniedArgs = 6,
    /// A rate limit (per CLI or global) refused the call.
    RateLimited = 7,
    /// The child ran past its timeout and was killed.
    TimedOut = 8,
    /// The server failed (spawn failure, I/O error, ...).
    Internal = 9,
    /// The caller's peer credentials (uid) are not allowed.
    PeerDenied = 10,
    /// The server is shutting down and takes no new calls.
    ShuttingDown = 11,
    /// The request kind is not served here (e.g. `Exec` sent to Porter).
    Unsupported = 12,
    /// The owner already runs as many background processes as the request allows.
    LimitReached = 13,
    /// The owner has no background process of that id (never had, or it is gone).
    NoSuchProcess = 14,
}

impl ErrorCode {
    /// Parses the code byte.
    pub fn from_byte(byte: u8) -> Option<Self> {
        Some(match byte {
            1 => Self::UnsupportedVersion,
            2 => Self::BadRequest,
            3 => Self::UnknownCli,
            4 => Self::BadToken,
            5 => Self::BadCwd,
            6 => Self::DeniedArgs,
            7 => Self::RateLimited,
            8 => Self::TimedOut,
            9 => Self::Internal,
            10 => Self::PeerDenied,
            11 => Self::ShuttingDown,
            12 => Self::Unsupported,
            13 => Self::LimitReached,
            14 => Self::NoSuchProcess,
            _ => return None,
        })
    }

    /// A stable snake_case name for logs and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnsupportedVersion => "unsupported_version",
            Self::BadRequest => "bad_request",
            Self::UnknownCli => "unknown_cli",
            Self::BadToken => "bad_token",
            Self::BadCwd => "bad_cwd",
            Self::DeniedArgs => "denied_args",
            Self::RateLimited => "rate_limited",
            Self::TimedOut => "timed_out",
            Self::Internal => "internal",
            Self::PeerDenied => "peer_denied",
            Self::ShuttingDown => "shutting_down",
            Self::Unsupported => "unsupported",
            Self::LimitReached => "limit_reached",
            Self::NoSuchProcess => "no_such_process",
        }
    }

    /// The exit status a proxy uses for this error: 124 for a timeout (as `timeout(1)`),
    /// 126 for a refusal, 127 for an unknown CLI (as a shell's "command not found"),
    /// 125 for everything else.
    pub fn exit_status(self) -> i32 {
        match self {
            Self::TimedOut => 124,
            Self::UnknownCli => 127,
            Self::BadToken
            | Self::BadCwd
            | Self::DeniedArgs
            | Self::PeerDenied
            | Self::LimitReached => 126,
            _ => 125,
        }
    }
}

/// One decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    Stdin(Vec<u8>),
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    StdinEof,
    Hello { version: u16 },
    Welcome { version: u16 },
    Request(Request),
    Signal(RemoteSignal),
    Exit { code: i32 },
    Error { code: ErrorCode, message: String },
    Process(ProcessReply),
    Browser(BrowserReply),
}

/// Why bytes could not be decoded into a frame.
#[derive(Debug, Error)]
pub enum FrameError {
    #[error("failed to decode frame: unknown kind byte {0}")]
    UnknownKind(u8),
    #[error("failed to decode frame: {kind:?} payload of {len} bytes exceeds {max}")]
    TooLong {
        kind: FrameKind,
        len: usize,
        max: usize,
    },
    #[error("failed to decode frame: {kind:?} payload of {len} bytes is malformed")]
    Malformed { kind: FrameKind, len: usize },
    #[error("failed to decode frame: unknown error code {0}")]
    UnknownErrorCode(u8),
    #[error("failed to decode frame: unknown signal {0}")]
    UnknownSignal(u8),
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error(transparent)]
    Process(#[from] ProcessReplyError),
    #[error(transparent)]
    Browser(#[from] BrowserReplyError),
    #[error("failed to encode frame: {kind:?} payload of {len} bytes exceeds {max}")]
    EncodeTooLong {
        kind: FrameKind,
        len: usize,
        max: usize,
    },
}

/// A checked frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    pub kind: FrameKind,
    pub len: usize,
}

impl FrameHeader {
    /// Parses and bounds-checks a header. Callers size buffers only from a header that
    /// passed this check.
    pub fn parse(bytes: [u8; HEADER_LEN]) -> Result<Self, FrameError> {
        let kind = FrameKind::from_byte(bytes[0]).ok_or(FrameError::UnknownKind(bytes[0]))?;
        let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
        let max = kind.max_payload();
        if len > max {
            return Err(FrameError::TooLong { kind, len, max });
        }
        Ok(Self { kind, len })
    }

    /// Encodes a header; `len` must already be within the kind's limit.
    pub fn encode(kind: FrameKind, len: usize) -> [u8; HEADER_LEN] {
        debug_assert!(len <= kind.max_payload());
        let length = (len as u32).to_be_bytes();
        [kind as u8, length[0], length[1], length[2], length[3]]
    }
}

impl Frame {
    /// The frame's kind.
    pub fn kind(&self) -> FrameKind {
        match self {
            Frame::Stdin(_) => FrameKind::Stdin,
            Frame::Stdout(_) => FrameKind::Stdout,
            Frame::Stderr(_) => FrameKind::Stderr,
            Frame::StdinEof => FrameKind::StdinEof,
            Frame::Hello { .. } => FrameKind::Hello,
            Frame::Welcome { .. } => FrameKind::Welcome,
            Frame::Request(_) => FrameKind::Request,
            Frame::Signal(_) => FrameKind::Signal,
            Frame::Exit { .. } => FrameKind::Exit,
            Frame::Error { .. } => FrameKind::Error,
            Frame::Process(_) => FrameKind::Process,
            Frame::Browser(_) => FrameKind::Browser,
        }
    }

    /// An error frame; the message is cut to [`MAX_ERROR_MESSAGE`] bytes.
    pub fn error(code: ErrorCode, message: impl Into<String>) -> Self {
        let mut message = message.into();
        truncate_on_char_boundary(&mut message, MAX_ERROR_MESSAGE);
        Frame::Error { code, message }
    }

    /// Decodes a payload whose header already passed [`FrameHeader::parse`].
    pub fn decode(kind: FrameKind, payload: Vec<u8>) -> Result<Self, FrameError> {
        let len = payload.len();
        let malformed = || FrameError::Malformed { kind, len };
        Ok(match kind {
            FrameKind::Stdin => Frame::Stdin(payload),
            FrameKind::Stdout => Frame::Stdout(payload),
            FrameKind::Stderr => Frame::Stderr(payload),
            FrameKind::StdinEof if payload.is_empty() => Frame::StdinEof,
            FrameKind::StdinEof => return Err(malformed()),
            FrameKind::Hello => Frame::Hello {
                version: handshake::decode_hello(&payload)?,
            },
            FrameKind::Welcome => Frame::Welcome {
                version: handshake::decode_welcome(&payload)?,
            },
            FrameKind::Request => Frame::Request(Request::parse(&payload)?),
            FrameKind::Signal => match payload.as_slice() {
                [number] => Frame::Signal(
                    RemoteSignal::from_number(*number).ok_or(FrameError::UnknownSignal(*number))?,
                ),
                _ => return Err(malformed()),
            },
            FrameKind::Exit => match payload.as_slice() {
                [a, b, c, d] => Frame::Exit {
                    code: i32::from_be_bytes([*a, *b, *c, *d]),
                },
                _ => return Err(malformed()),
            },
            FrameKind::Error => match payload.split_first() {
                Some((code, message)) => Frame::Error {
                    code: ErrorCode::from_byte(*code).ok_or(FrameError::UnknownErrorCode(*code))?,
                    message: String::from_utf8_lossy(message).into_owned(),
                },
                None => return Err(malformed()),
            },
            FrameKind::Process => Frame::Process(ProcessReply::parse(&payload)?),
            FrameKind::Browser => Frame::Browser(BrowserReply::parse(&payload)?),
        })
    }

    /// Appends the encoded frame (header and payload) to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), FrameError> {
        let kind = self.kind();
        let start = out.len();
        out.extend_from_slice(&[0; HEADER_LEN]);
        match self {
            Frame::Stdin(data) | Frame::Stdout(data) | Frame::Stderr(data) => {
                out.extend_from_slice(data)
            }
            Frame::StdinEof => {}
            Frame::Hello { version } => out.extend_from_slice(&handshake::encode_hello(*version)),
            Frame::Welcome { version } => out.extend_from_slice(&version.to_be_bytes()),
            Frame::Request(request) => out.extend_from_slice(&request.to_payload()),
            Frame::Signal(signal) => out.push(signal.number()),
            Frame::Exit { code } => out.extend_from_slice(&code.to_be_bytes()),
            Frame::Error { code, message } => {
                out.push(*code as u8);
                let mut message = message.clone();
                truncate_on_char_boundary(&mut message, MAX_ERROR_MESSAGE);
                out.extend_from_slice(message.as_bytes());
            }
            Frame::Process(reply) => out.extend_from_slice(&reply.to_payload()),
            Frame::Browser(reply) => out.extend_from_slice(&reply.to_payload()),
        }
        let len = out.len() - start - HEADER_LEN;
        let max = kind.max_payload();
        if len > max {
            out.truncate(start);
            return Err(FrameError::EncodeTooLong { kind, len, max });
        }
        out[start..start + HEADER_LEN].copy_from_slice(&FrameHeader::encode(kind, len));
        Ok(())
    }

    /// Encodes the frame into a new buffer.
    pub fn to_bytes(&self) -> Result<Vec<u8>, FrameError> {
        let mut out = Vec::new();
        self.encode_into(&mut out)?;
        Ok(out)
    }
}

/// Decodes one frame from the start of `buffer`: `Ok(None)` if more bytes are needed,
/// otherwise the frame and how many bytes it used. Never allocates more than the
/// checked payload length.
pub fn decode_prefix(buffer: &[u8]) -> Result<Option<(Frame, usize)>, FrameError> {
    let Some(header_bytes) = buffer.first_chunk::<HEADER_LEN>() else {
        return Ok(None);
    };
    let header = FrameHeader::parse(*header_bytes)?;
    let end = HEADER_LEN + header.len;
    if buffer.len() < end {
        return Ok(None);
    }
    let frame = Frame::decode(header.kind, buffer[HEADER_LEN..end].to_vec())?;
    Ok(Some((frame, end)))
}

/// Encodes stdout/stderr/stdin bytes of any length as as many data frames as needed.
pub fn encode_data(kind: FrameKind, data: &[u8], out: &mut Vec<u8>) {
    debug_assert!(matches!(
        kind,
        FrameKind::Stdin | FrameKind::Stdout | FrameKind::Stderr
    ));
    for chunk in data.chunks(MAX_DATA_PAYLOAD) {
        out.extend_from_slice(&FrameHeader::encode(kind, chunk.len()));
        out.extend_from_slice(chunk);
    }
}

fn truncate_on_char_boundary(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::ExecRequest;

    fn round_trip(frame: Frame) {
        let bytes = frame.to_bytes().unwrap();
        let (decoded, used) = decode_prefix(&bytes).unwrap().unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(decoded, frame);
    }

    #[test]
    fn every_kind_round_trips() {
        round_trip(Frame::Stdin(b"in".to_vec()));
        round_trip(Frame::Stdout(b"out".to_vec()));
        round_trip(Frame::Stderr(Vec::new()));
        round_trip(Frame::StdinEof);
        round_trip(Frame::Hello { version: 1 });
        round_trip(Frame::Welcome { version: 1 });
        round_trip(Frame::Request(Request::Exec(ExecRequest {
            command: "gh pr list".into(),
            cwd: "/workspace".into(),
            ..Default::default()
        })));
        round_trip(Frame::Signal(RemoteSignal::Interrupt));
        round_trip(Frame::Exit { code: -9 });
        round_trip(Frame::error(
            ErrorCode::DeniedArgs,
            "gh auth token is denied",
        ));
        round_trip(Frame::Process(ProcessReply::Started { id: "p1".into() }));
        round_trip(Frame::Process(ProcessReply::Listed {
            processes: Vec::new(),
        }));
    }

    #[test]
    fn stdout_frame_has_the_documented_layout() {
        let bytes = Frame::Stdout(b"hi".to_vec()).to_bytes().unwrap();
        assert_eq!(bytes, [1, 0, 0, 0, 2, b'h', b'i']);
    }

    #[test]
    fn a_huge_length_is_refused_from_the_header_alone() {
        // Only the header arrives: the decoder must refuse rather than wait for 4 GiB.
        let header = [FrameKind::Stdout as u8, 0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            decode_prefix(&header),
            Err(FrameError::TooLong { .. })
        ));
        let control = [FrameKind::Exit as u8, 0, 0, 0, 5];
        assert!(matches!(
            decode_prefix(&control),
            Err(FrameError::TooLong { .. })
        ));
    }

    #[test]
    fn partial_frames_wait_for_more_bytes() {
        let bytes = Frame::Stdout(b"hello".to_vec()).to_bytes().unwrap();
        for cut in 0..bytes.len() {
            assert!(
                decode_prefix(&bytes[..cut]).unwrap().is_none(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn long_data_is_split_into_bounded_frames() {
        let data = vec![7_u8; MAX_DATA_PAYLOAD * 2 + 3];
        let mut out = Vec::new();
        encode_data(FrameKind::Stdout, &data, &mut out);
        let mut offset = 0;
        let mut joined = Vec::new();
        while let Some((frame, used)) = decode_prefix(&out[offset..]).unwrap() {
            let Frame::Stdout(chunk) = frame else {
                panic!("not stdout")
            };
            assert!(chunk.len() <= MAX_DATA_PAYLOAD);
            joined.extend(chunk);
            offset += used;
        }
        assert_eq!(joined, data);
    }

    #[test]
    fn error_codes_map_to_proxy_exit_statuses() {
        assert_eq!(ErrorCode::TimedOut.exit_status(), 124);
        assert_eq!(ErrorCode::Internal.exit_status(), 125);
        assert_eq!(ErrorCode::DeniedArgs.exit_status(), 126);
        assert_eq!(ErrorCode::UnknownCli.exit_status(), 127);
        for byte in 0..=255 {
            if let Some(code) = ErrorCode::from_byte(byte) {
                assert_eq!(code as u8, byte);
                assert!(code.exit_status() >= 124);
            }
        }
    }

    #[test]
    fn oversized_error_messages_are_cut_on_a_char_boundary() {
        let frame = Frame::error(ErrorCode::Internal, "é".repeat(MAX_ERROR_MESSAGE));
        let Frame::Error { message, .. } = &frame else {
            unreachable!()
        };
        assert!(message.len() <= MAX_ERROR_MESSAGE);
        round_trip(frame);
    }
}
