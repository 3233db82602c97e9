//! Per-call placeholders: random stand-ins for a secret that the CLI holds instead of
//! the secret, and their swap back to the secret in request headers.
//!
//! Pure apart from drawing random bytes.

use base64::{Engine, engine::general_purpose::STANDARD};

/// Every placeholder starts with this, so a header carrying one that is not the
/// current call's (a placeholder kept from an earlier call) is recognised and refused.
pub const PREFIX: &str = "porter_ph_";

/// Random hex characters after [`PREFIX`] (128 bits).
const RANDOM_HEX: usize = 32;

/// A fresh placeholder (or call key, with another prefix): `prefix` + 128 random bits.
pub fn fresh(prefix: &str) -> String {
    let mut bytes = [0_u8; RANDOM_HEX / 2];
    getrandom::fill(&mut bytes).expect("the kernel's random source");
    format!("{prefix}{}", hex::encode(bytes))
}

/// A header value that names a placeholder this call does not own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Foreign;

/// Replaces every placeholder of this call in `value` with its secret. `Ok(None)`: no
/// placeholder in it. A `Basic` credential is decoded first, because that is where git
/// and curl put a password.
pub fn swap(value: &[u8], placeholders: &[(String, String)]) -> Result<Option<Vec<u8>>, Foreign> {
    if let Some(encoded) = basic_credentials(value)
        && let Ok(decoded) = STANDARD.decode(encoded.trim_ascii())
        && let Some(swapped) = swap_literal(&decoded, placeholders)?
    {
        let mut header = b"Basic ".to_vec();
        header.extend_from_slice(STANDARD.encode(swapped).as_bytes());
        return Ok(Some(header));
    }
    swap_literal(value, placeholders)
}

fn basic_credentials(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(6)?;
    scheme.eq_ignore_ascii_case(b"basic ").then_some(rest)
}

fn swap_literal(
    value: &[u8],
    placeholders: &[(String, String)],
) -> Result<Option<Vec<u8>>, Foreign> {
    let prefix = PREFIX.as_bytes();
    if !contains(value, prefix) {
        return Ok(None);
    }
    let mut output = Vec::with_capacity(value.len() + 64);
    let mut rest = value;
    while let Some(start) = find(rest, prefix) {
        output.extend_from_slice(&rest[..start]);
        let candidate = &rest[start..];
        let (placeholder, secret) = placeholders
            .iter()
            .find(|(placeholder, _)| candidate.starts_with(placeholder.as_bytes()))
            .ok_or(Foreign)?;
        output.extend_from_slice(secret.as_bytes());
        rest = &candidate[placeholder.len()..];
    }
    output.extend_from_slice(rest);
    Ok(Some(output))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    find(haystack, needle).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs() -> Vec<(String, String)> {
        vec![(fresh(PREFIX), "ghp_real".to_owned())]
    }

    #[test]
    fn placeholders_are_random_and_prefixed() {
        let (one, two) = (fresh(PREFIX), fresh(PREFIX));
        assert_ne!(one, two);
        assert!(one.starts_with(PREFIX));
        assert_eq!(one.len(), PREFIX.len() + RANDOM_HEX);
    }

    #[test]
    fn token_and_bearer_headers_get_the_secret() {
        let pairs = pairs();
        let header = format!("token {}", pairs[0].0);
        assert_eq!(
            swap(header.as_bytes(), &pairs).unwrap().unwrap(),
            b"token ghp_real"
        );
        assert_eq!(swap(b"application/json", &pairs), Ok(None));
    }

    #[test]
    fn basic_credentials_are_swapped_inside_the_encoding() {
        let pairs = pairs();
        let header = format!(
            "basic {}",
            STANDARD.encode(format!("x-access-token:{}", pairs[0].0))
        );
        let swapped = swap(header.as_bytes(), &pairs).unwrap().unwrap();
        assert_eq!(
            swapped,
            format!("Basic {}", STANDARD.encode("x-access-token:ghp_real")).as_bytes()
        );
    }

    #[test]
    fn a_placeholder_of_another_call_is_foreign() {
        let stale = fresh(PREFIX);
        assert_eq!(
            swap(format!("token {stale}").as_bytes(), &pairs()),
            Err(Foreign)
        );
        let basic = format!("Basic {}", STANDARD.encode(format!("u:{stale}")));
        assert_eq!(swap(basic.as_bytes(), &pairs()), Err(Foreign));
    }
}
