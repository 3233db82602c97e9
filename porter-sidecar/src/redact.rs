//! Credential redaction for output streams and log lines, including secrets that
//! straddle two reads of a stream.
//!
//! Pure: bytes in, bytes out.

use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};

/// What a secret is replaced with.
pub const PLACEHOLDER: &[u8] = b"[redacted]";

/// Values shorter than this are not redacted: replacing every `1` or `on` in the output
/// would destroy it, and a value that short is not a credential.
pub const MIN_SECRET_LEN: usize = 4;

/// The set of credential values Porter holds.
#[derive(Debug, Default)]
pub struct Secrets {
    matcher: Option<AhoCorasick>,
    values: Vec<Vec<u8>>,
}

impl Secrets {
    /// Builds the set; short and duplicate values are dropped.
    pub fn new(values: impl IntoIterator<Item = String>) -> Self {
        let mut values: Vec<Vec<u8>> = values
            .into_iter()
            .map(String::into_bytes)
            .filter(|value| value.len() >= MIN_SECRET_LEN)
            .collect();
        values.sort();
        values.dedup();
        let matcher = if values.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(&values)
                    .expect("literal patterns always build"),
            )
        };
        Self { matcher, values }
    }

    /// How many values are redacted.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether nothing is redacted.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Redacts a whole string (log lines, arguments).
    pub fn redact_str(&self, text: &str) -> String {
        match &self.matcher {
            Some(matcher) => matcher.replace_all(
                text,
                &vec![std::str::from_utf8(PLACEHOLDER).expect("ascii"); self.values.len()],
            ),
            None => text.to_owned(),
        }
    }

    /// Redacts a whole byte string.
    pub fn redact_bytes(&self, bytes: &[u8]) -> Vec<u8> {
        match &self.matcher {
            Some(matcher) => {
                matcher.replace_all_bytes(bytes, &vec![PLACEHOLDER; self.values.len()])
            }
            None => bytes.to_vec(),
        }
    }

    /// Length of the longest suffix of `bytes` that is a proper prefix of some secret:
    /// those bytes might become a secret with the next read, so they are held back.
    fn pending_suffix(&self, bytes: &[u8]) -> usize {
        let mut longest = 0;
        for value in &self.values {
            let most = (value.len() - 1).min(bytes.len());
            for length in (longest + 1..=most).rev() {
                if bytes[bytes.len() - length..] == value[..length] {
                    longest = length;
                    break;
                }
            }
        }
        longest
    }

    fn is_proper_prefix_of_another(&self, matched: &[u8]) -> bool {
        self.values
            .iter()
            .any(|value| value.len() > matched.len() && value.starts_with(matched))
    }
}

/// Redacts one output stream chunk by chunk. Holds back at most the longest secret's
/// length minus one byte, and only while those bytes could still start a secret, so
/// ordinary output is never delayed.
#[derive(Debug)]
pub struct StreamRedactor {
    secrets: Arc<Secrets>,
    carry: Vec<u8>,
}

impl StreamRedactor {
    /// A redactor over `secrets`.
    pub fn new(secrets: Arc<Secrets>) -> Self {
        Self {
            secrets,
            carry: Vec::new(),
        }
    }

    /// Redacts `chunk` (after whatever was held back) and appends what is safe to emit.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        let Some(matcher) = &self.secrets.matcher else {
            out.extend_from_slice(chunk);
            return;
        };
        let mut buffer = std::mem::take(&mut self.carry);
        buffer.extend_from_slice(chunk);
        let mut emitted = 0;
        let mut hold_from = None;
        for found in matcher.find_iter(&buffer) {
            if found.end() == buffer.len()
                && self
                    .secrets
                    .is_proper_prefix_of_another(&buffer[found.range()])
            {
                // A shorter secret at the very end may be the start of a longer one.
                hold_from = Some(found.start());
                break;
            }
            out.extend_from_slice(&buffer[emitted..found.start()]);
            out.extend_from_slice(PLACEHOLDER);
            emitted = found.end();
        }
        let hold_from = hold_from
            .unwrap_or_else(|| buffer.len() - self.secrets.pending_suffix(&buffer[emitted..]));
        out.extend_from_slice(&buffer[emitted..hold_from]);
        self.carry = buffer.split_off(hold_from);
    }

    /// Emits whatever is still held back: the stream ended, so it is not a secret.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let carry = std::mem::take(&mut self.carry);
        // The carry can still contain a complete short secret (held as a possible
        // prefix of a longer one): redact it now.
        out.extend_from_slice(&self.secrets.redact_bytes(&carry));
    }

    /// Bytes currently held back.
    pub fn held(&self) -> usize {
        self.carry.len()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn redact_in_pieces(secrets: &Arc<Secrets>, pieces: &[&[u8]]) -> Vec<u8> {
        let mut redactor = StreamRedactor::new(secrets.clone());
        let mut out = Vec::new();
        for piece in pieces {
            redactor.push(piece, &mut out);
        }
        redactor.finish(&mut out);
        out
    }

    #[test]
    fn a_secret_split_across_reads_is_redacted() {
        let secrets = Arc::new(Secrets::new(["ghp_CANARY123".to_owned()]));
        let out = redact_in_pieces(&secrets, &[b"token: ghp_CA", b"NARY123 done"]);
        assert_eq!(out, b"token: [redacted] done");
        let out = redact_in_pieces(&secrets, &[b"g", b"h", b"p", b"_CANARY12", b"3"]);
        assert_eq!(out, b"[redacted]");
    }

    #[test]
    fn ordinary_output_is_not_held_back() {
        let secrets = Arc::new(Secrets::new(["ghp_CANARY123".to_owned()]));
        let mut redactor = StreamRedactor::new(secrets);
        let mut out = Vec::new();
        redactor.push(b"first line\n", &mut out);
        assert_eq!(out, b"first line\n");
        redactor.push(b"almost gh", &mut out);
        assert_eq!(redactor.held(), 2);
    }

    #[test]
    fn a_short_secret_that_prefixes_a_longer_one_waits() {
        let secrets = Arc::new(Secrets::new(["abcd".to_owned(), "abcdefgh".to_owned()]));
        assert_eq!(
            redact_in_pieces(&secrets, &[b"xabcd", b"efgh!"]),
            b"x[redacted]!"
        );
        assert_eq!(
            redact_in_pieces(&secrets, &[b"xabcd", b"!"]),
            b"x[redacted]!"
        );
        assert_eq!(redact_in_pieces(&secrets, &[b"xabcd"]), b"x[redacted]");
    }

    #[test]
    fn short_values_are_not_secrets() {
        let secrets = Secrets::new(["1".to_owned(), "on".to_owned()]);
        assert!(secrets.is_empty());
        assert_eq!(secrets.redact_str("on 1"), "on 1");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn no_split_leaks_a_secret(
            prefix in "[a-zA-Z_ ]{0,20}",
            suffix in "[a-zA-Z_ ]{0,20}",
            cuts in proptest::collection::vec(0_usize..60, 0..6),
        ) {
            let secret = "CANARY_s3cr3t_v4lue";
            let secrets = Arc::new(Secrets::new([secret.to_owned(), "CANARY_other".to_owned()]));
            let text = format!("{prefix}{secret}{suffix}{secret}");
            let bytes = text.as_bytes();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|cut| cut.min(bytes.len())).collect();
            cuts.sort();
            let mut pieces = Vec::new();
            let mut last = 0;
            for cut in cuts {
                pieces.push(&bytes[last..cut]);
                last = cut;
            }
            pieces.push(&bytes[last..]);
            let out = String::from_utf8(redact_in_pieces(&secrets, &pieces)).unwrap();
            prop_assert!(!out.contains(secret), "leaked in {out:?}");
            prop_assert_eq!(out, secrets.redact_str(&text));
        }
    }
}
