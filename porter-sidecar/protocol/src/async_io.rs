//! Frame I/O for tokio: a `tokio_util` codec and small read/write helpers.
//!
//! May touch only the streams it is given.

use std::io;

use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::{
    bytes::{Buf, BytesMut},
    codec::{Decoder, Encoder},
};

use crate::frame::{Frame, FrameError, FrameHeader, FrameKind, HEADER_LEN, MAX_DATA_PAYLOAD};

/// Why a frame could not be read or written.
#[derive(Debug, Error)]
pub enum CodecError {
    #[error("failed to transfer frame")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("failed to read frame: connection closed inside a frame")]
    Truncated,
}

/// A `tokio_util` codec for [`Frame`]s, for `FramedRead`/`FramedWrite`.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameCodec;

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = CodecError;

    fn decode(&mut self, source: &mut BytesMut) -> Result<Option<Frame>, CodecError> {
        let Some(header_bytes) = source.first_chunk::<HEADER_LEN>() else {
            return Ok(None);
        };
        let header = FrameHeader::parse(*header_bytes)?;
        let end = HEADER_LEN + header.len;
        if source.len() < end {
            // Bounded: the header passed the kind's limit.
            source.reserve(end - source.len());
            return Ok(None);
        }
        source.advance(HEADER_LEN);
        let payload = source.split_to(header.len).to_vec();
        Ok(Some(Frame::decode(header.kind, payload)?))
    }

    fn decode_eof(&mut self, source: &mut BytesMut) -> Result<Option<Frame>, CodecError> {
        match self.decode(source)? {
            Some(frame) => Ok(Some(frame)),
            None if source.is_empty() => Ok(None),
            None => Err(CodecError::Truncated),
        }
    }
}

impl Encoder<Frame> for FrameCodec {
    type Error = CodecError;

    fn encode(&mut self, frame: Frame, destination: &mut BytesMut) -> Result<(), CodecError> {
        let bytes = frame.to_bytes()?;
        destination.extend_from_slice(&bytes);
        Ok(())
    }
}

/// Reads one frame; `None` on a clean end of stream between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Option<Frame>, CodecError> {
    let mut header_bytes = [0_u8; HEADER_LEN];
    let mut filled = 0;
    while filled < HEADER_LEN {
        let count = reader.read(&mut header_bytes[filled..]).await?;
        if count == 0 {
            return if filled == 0 {
                Ok(None)
            } else {
                Err(CodecError::Truncated)
            };
        }
        filled += count;
    }
    let header = FrameHeader::parse(header_bytes)?;
    let mut payload = vec![0_u8; header.len];
    reader
        .read_exact(&mut payload)
        .await
        .map_err(|error| match error.kind() {
            io::ErrorKind::UnexpectedEof => CodecError::Truncated,
            _ => CodecError::Io(error),
        })?;
    Ok(Some(Frame::decode(header.kind, payload)?))
}

/// Writes one frame with a single `write_all`.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    frame: &Frame,
) -> Result<(), CodecError> {
    let bytes = frame.to_bytes()?;
    writer.write_all(&bytes).await?;
    Ok(())
}

/// Writes `data` as data frames of `kind`, one `write_all` per frame.
pub async fn write_data<W: AsyncWrite + Unpin>(
    writer: &mut W,
    kind: FrameKind,
    data: &[u8],
) -> io::Result<()> {
    let mut out = Vec::with_capacity(data.len().min(MAX_DATA_PAYLOAD) + HEADER_LEN);
    for chunk in data.chunks(MAX_DATA_PAYLOAD) {
        out.clear();
        out.extend_from_slice(&FrameHeader::encode(kind, chunk.len()));
        out.extend_from_slice(chunk);
        writer.write_all(&out).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn helpers_and_codec_agree() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            write_frame(&mut client, &Frame::Hello { version: 1 })
                .await
                .unwrap();
            write_data(&mut client, FrameKind::Stdin, &[9_u8; 1000])
                .await
                .unwrap();
            write_frame(&mut client, &Frame::StdinEof).await.unwrap();
        });
        assert_eq!(
            read_frame(&mut server).await.unwrap(),
            Some(Frame::Hello { version: 1 })
        );
        assert_eq!(
            read_frame(&mut server).await.unwrap(),
            Some(Frame::Stdin(vec![9; 1000]))
        );
        assert_eq!(
            read_frame(&mut server).await.unwrap(),
            Some(Frame::StdinEof)
        );
        assert!(read_frame(&mut server).await.unwrap().is_none());
        writer.await.unwrap();

        let mut buffer = BytesMut::new();
        FrameCodec
            .encode(Frame::Exit { code: 0 }, &mut buffer)
            .unwrap();
        let mut half = buffer.split_to(3);
        assert!(FrameCodec.decode(&mut half).unwrap().is_none());
        half.unsplit(buffer);
        assert_eq!(
            FrameCodec.decode(&mut half).unwrap(),
            Some(Frame::Exit { code: 0 })
        );
    }
}
