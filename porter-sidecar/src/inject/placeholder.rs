//! Placeholders: random stand-ins for a secret, one per credential and command. A
//! command holds them instead of secrets; the proxy swaps them back only where the
//! credential is injected, and only while the command's key lives.
//!
//! Pure, apart from the kernel's random source.

/// Prefix of every placeholder (so the proxy recognises one wherever it appears).
pub const PREFIX: &str = "porter_ph_";

/// Random hex characters after the prefix (128 bits).
const RANDOM_HEX: usize = 32;

/// A fresh random value `<prefix><32 hex>`.
pub fn fresh(prefix: &str) -> String {
    let mut bytes = [0_u8; RANDOM_HEX / 2];
    getrandom::fill(&mut bytes).expect("the kernel's random source");
    format!("{prefix}{}", hex::encode(bytes))
}

/// Whether `value` holds any placeholder.
pub fn contains(value: &[u8]) -> bool {
    value
        .windows(PREFIX.len())
        .any(|window| window.eq_ignore_ascii_case(PREFIX.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_random_prefixed_and_found_in_any_case() {
        let (one, two) = (fresh(PREFIX), fresh(PREFIX));
        assert_ne!(one, two);
        assert!(one.starts_with(PREFIX));
        assert_eq!(one.len(), PREFIX.len() + RANDOM_HEX);
        assert!(contains(format!("token {one}").as_bytes()));
        assert!(contains(b"x PORTER_PH_abc"));
        assert!(!contains(b"application/json"));
    }
}
