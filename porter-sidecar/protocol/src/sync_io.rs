//! Blocking frame I/O over `std::io` readers and writers, for small clients without an
//! async runtime (`cliport-proxy`).
//!
//! May touch only the reader/writer it is given.

use std::io::{self, ErrorKind, Read, Write};

use thiserror::Error;

use crate::frame::{Frame, FrameError, FrameHeader, FrameKind, HEADER_LEN};

/// Why a frame could not be read.
#[derive(Debug, Error)]
pub enum ReadError {
    #[error("failed to read frame")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("failed to read frame: connection closed inside a frame")]
    Truncated,
}

/// Reads one frame header and its payload into `payload` (reusing its capacity).
/// Returns `None` on a clean end of stream between frames.
pub fn read_raw_frame<R: Read>(
    reader: &mut R,
    payload: &mut Vec<u8>,
) -> Result<Option<FrameHeader>, ReadError> {
    let mut header_bytes = [0_u8; HEADER_LEN];
    let mut filled = 0;
    while filled < HEADER_LEN {
        match reader.read(&mut header_bytes[filled..]) {
            Ok(0) if filled == 0 => return Ok(None),
            Ok(0) => return Err(ReadError::Truncated),
            Ok(count) => filled += count,
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) => return Err(error.into()),
        }
    }
    // The length is bounded by the kind's limit before the buffer is sized from it.
    let header = FrameHeader::parse(header_bytes)?;
    payload.clear();
    payload.resize(header.len, 0);
    reader
        .read_exact(payload)
        .map_err(|error| match error.kind() {
            ErrorKind::UnexpectedEof => ReadError::Truncated,
            _ => ReadError::Io(error),
        })?;
    Ok(Some(header))
}

/// Reads and decodes one frame; `None` on a clean end of stream between frames.
pub fn read_frame<R: Read>(reader: &mut R) -> Result<Option<Frame>, ReadError> {
    let mut payload = Vec::new();
    match read_raw_frame(reader, &mut payload)? {
        Some(header) => Ok(Some(Frame::decode(header.kind, payload)?)),
        None => Ok(None),
    }
}

/// Encodes and writes one frame (one `write_all`, so frames from one writer never
/// interleave partially when the writer is shared behind a lock).
pub fn write_frame<W: Write>(writer: &mut W, frame: &Frame) -> io::Result<()> {
    let bytes = frame
        .to_bytes()
        .map_err(|error| io::Error::new(ErrorKind::InvalidInput, error))?;
    writer.write_all(&bytes)
}

/// Writes `data` as one or more data frames of `kind` without copying it into a
/// `Frame` first.
pub fn write_data<W: Write>(writer: &mut W, kind: FrameKind, data: &[u8]) -> io::Result<()> {
    let mut out = Vec::with_capacity(data.len().min(crate::frame::MAX_DATA_PAYLOAD) + HEADER_LEN);
    for chunk in data.chunks(crate::frame::MAX_DATA_PAYLOAD) {
        out.clear();
        out.extend_from_slice(&FrameHeader::encode(kind, chunk.len()));
        out.extend_from_slice(chunk);
        writer.write_all(&out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    #[test]
    fn frames_written_are_read_back_in_order() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &Frame::Hello { version: 1 }).unwrap();
        write_data(&mut wire, FrameKind::Stdout, b"abc").unwrap();
        write_frame(&mut wire, &Frame::Exit { code: 3 }).unwrap();
        let mut reader = Cursor::new(wire);
        assert_eq!(
            read_frame(&mut reader).unwrap(),
            Some(Frame::Hello { version: 1 })
        );
        assert_eq!(
            read_frame(&mut reader).unwrap(),
            Some(Frame::Stdout(b"abc".to_vec()))
        );
        assert_eq!(
            read_frame(&mut reader).unwrap(),
            Some(Frame::Exit { code: 3 })
        );
        assert!(read_frame(&mut reader).unwrap().is_none());
    }

    #[test]
    fn a_stream_cut_inside_a_frame_is_an_error_not_an_end() {
        let bytes = Frame::Stdout(b"abcdef".to_vec()).to_bytes().unwrap();
        for cut in 1..bytes.len() {
            let result = read_frame(&mut Cursor::new(&bytes[..cut]));
            assert!(matches!(result, Err(ReadError::Truncated)), "cut at {cut}");
        }
    }
}
