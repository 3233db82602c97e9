//! Contracts shared by Porter, the sandbox runner, the agent and the operator: the
//! registry format (`registry`), Porter's control socket (`control`), and the frame
//! protocol the agent speaks with a sandbox runner.
//!
//! A connection is: client `Hello` → server `Welcome` (or `Error`), client `Request`,
//! then the client's `Stdin`/`StdinEof`/`Signal` frames and the server's
//! `Stdout`/`Stderr` frames interleave until the server's last frame, `Exit` or `Error`.
//! A background-process request (`process`) is answered by `Stdout`/`Stderr` frames (the
//! new output, for `poll` and `kill`) and a last `Process` or `Error` frame; a `browser`
//! request by `Stdout` frames (the page's text or a screenshot) and a last `Browser` or
//! `Error` frame.
//!
//! Pure: no sockets, no processes. `sync_io` (std) and `async_io` (tokio, feature
//! `async`) read and write frames on streams the caller brings.

#[cfg(feature = "async")]
pub mod async_io;
pub mod browser;
pub mod control;
pub mod frame;
pub mod handshake;
pub mod process;
pub mod registry;
#[cfg(feature = "async")]
pub mod relay;
pub mod request;
pub mod sync_io;

pub use frame::{ErrorCode, Frame, FrameError, FrameHeader, FrameKind, RemoteSignal};
pub use handshake::PROTOCOL_VERSION;
pub use request::{ExecRequest, Request, RequestError};
