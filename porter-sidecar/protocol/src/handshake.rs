//! The versioned handshake: the client's `Hello` and the server's `Welcome`.
//!
//! Pure: encodes and checks payloads only; the frame layer carries them.

use thiserror::Error;

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u16 = 1;

/// Versions a server built from this crate accepts.
pub const SUPPORTED_VERSIONS: &[u16] = &[PROTOCOL_VERSION];

/// Every `Hello` starts with these bytes, so a stray client (an HTTP probe, a shell
/// `cat` into the socket) is refused before anything is parsed as a request.
pub const MAGIC: &[u8; 6] = b"PORTER";

/// Length of a `Hello` payload: magic + big-endian version.
pub const HELLO_LEN: usize = MAGIC.len() + 2;

/// Why a handshake payload was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum HandshakeError {
    #[error("failed to read handshake: payload is {0} bytes, expected {HELLO_LEN}")]
    HelloLength(usize),
    #[error("failed to read handshake: bad magic (not a porter client)")]
    Magic,
    #[error("failed to read handshake: welcome payload is {0} bytes, expected 2")]
    WelcomeLength(usize),
}

/// Encodes a `Hello` payload for `version`.
pub fn encode_hello(version: u16) -> [u8; HELLO_LEN] {
    let mut payload = [0_u8; HELLO_LEN];
    payload[..MAGIC.len()].copy_from_slice(MAGIC);
    payload[MAGIC.len()..].copy_from_slice(&version.to_be_bytes());
    payload
}

/// Decodes a `Hello` payload into the version the client speaks.
pub fn decode_hello(payload: &[u8]) -> Result<u16, HandshakeError> {
    if payload.len() != HELLO_LEN {
        return Err(HandshakeError::HelloLength(payload.len()));
    }
    if &payload[..MAGIC.len()] != MAGIC {
        return Err(HandshakeError::Magic);
    }
    Ok(u16::from_be_bytes([
        payload[MAGIC.len()],
        payload[MAGIC.len() + 1],
    ]))
}

/// Decodes a `Welcome` payload into the version the server chose.
pub fn decode_welcome(payload: &[u8]) -> Result<u16, HandshakeError> {
    match payload {
        [high, low] => Ok(u16::from_be_bytes([*high, *low])),
        _ => Err(HandshakeError::WelcomeLength(payload.len())),
    }
}

/// Whether a server from this crate accepts a client speaking `version`.
pub fn is_supported(version: u16) -> bool {
    SUPPORTED_VERSIONS.contains(&version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips_and_checks_magic() {
        let payload = encode_hello(7);
        assert_eq!(decode_hello(&payload), Ok(7));
        let mut wrong = payload;
        wrong[0] = b'G';
        assert_eq!(decode_hello(&wrong), Err(HandshakeError::Magic));
        assert_eq!(decode_hello(b"PORTER"), Err(HandshakeError::HelloLength(6)));
    }

    #[test]
    fn welcome_needs_exactly_two_bytes() {
        assert_eq!(decode_welcome(&[0, 1]), Ok(1));
        assert_eq!(
            decode_welcome(&[0, 1, 2]),
            Err(HandshakeError::WelcomeLength(3))
        );
    }
}
