//! Reads and writes Porter protocol frames on a tokio stream.
//!
//! I/O glue only: the frame layout, its limits and the codec live in `porter_protocol`.

use futures::StreamExt;
use porter_protocol::async_io::{CodecError, FrameCodec, write_data, write_frame};
pub use porter_protocol::{ErrorCode, Frame, FrameKind};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::FramedRead;

/// Why a frame could not be read or written.
#[derive(Debug, Error)]
pub enum WireError {
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error("failed to write frame")]
    Write(#[source] std::io::Error),
}

/// Yields whole frames. `next` is cancellation safe (the codec keeps partial frames
/// buffered), so it can sit in a `select!` next to the child's pipes.
pub struct FrameReader<R> {
    inner: FramedRead<R, FrameCodec>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Wraps a read half.
    pub fn new(inner: R) -> Self {
        Self {
            inner: FramedRead::new(inner, FrameCodec),
        }
    }

    /// The next frame, or `None` when the peer closed cleanly between frames.
    pub async fn next(&mut self) -> Result<Option<Frame>, WireError> {
        Ok(self.inner.next().await.transpose()?)
    }
}

/// Writes frames, one `write_all` per frame so frames never interleave.
pub struct FrameWriter<W> {
    inner: W,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    /// Wraps a write half.
    pub fn new(inner: W) -> Self {
        Self { inner }
    }

    /// Encodes and sends one frame.
    pub async fn send(&mut self, frame: &Frame) -> Result<(), WireError> {
        Ok(write_frame(&mut self.inner, frame).await?)
    }

    /// Sends stdout or stderr bytes of any length as bounded data frames.
    pub async fn send_data(&mut self, kind: FrameKind, data: &[u8]) -> Result<(), WireError> {
        write_data(&mut self.inner, kind, data)
            .await
            .map_err(WireError::Write)
    }
}
