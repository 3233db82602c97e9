//! Defence in depth on responses: an upstream that echoes a secret (in a header or a
//! body) gives the sandbox only a mask. Each secret is searched in its literal form,
//! standard and URL-safe base64 at every alignment (so it is found inside a longer
//! encoded value), lower- and upper-case hex and percent-encoding. Matches are masked
//! byte for byte with `*`, so lengths (and `Content-Length`) do not change.
//!
//! Pure: bytes in, bytes out.

use aho_corasick::{AhoCorasick, MatchKind};
use base64::{
    Engine,
    engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD},
};

/// Secrets shorter than this are not searched (masking every `1` would destroy bodies,
/// and a value that short is no credential).
pub const MIN_SECRET_LEN: usize = 6;

/// The mask byte.
const MASK: u8 = b'*';

/// Every encoded form of every secret.
#[derive(Debug, Default)]
pub struct Scrubber {
    matcher: Option<AhoCorasick>,
    longest: usize,
}

/// The base64 characters of `secret` that do not depend on what surrounds it, for each
/// of the three alignments it can have inside a longer encoded value.
fn base64_forms(secret: &[u8], engine: &impl Engine) -> Vec<Vec<u8>> {
    (0..3)
        .filter_map(|offset| {
            let mut padded = vec![0_u8; offset];
            padded.extend_from_slice(secret);
            let encoded = engine.encode(&padded).into_bytes();
            // Characters covering the leading filler bytes, and the last group if it
            // mixes in what follows, vary with the context: keep the stable middle.
            let start = (offset * 4).div_ceil(3);
            let stable_bytes = (padded.len() / 3) * 3;
            let end = stable_bytes / 3 * 4;
            (end > start + 4).then(|| encoded[start..end].to_vec())
        })
        .collect()
}

fn percent_forms(secret: &[u8]) -> Vec<Vec<u8>> {
    let upper: String = secret.iter().map(|byte| format!("%{byte:02X}")).collect();
    let lower: String = secret.iter().map(|byte| format!("%{byte:02x}")).collect();
    vec![upper.into_bytes(), lower.into_bytes()]
}

impl Scrubber {
    /// The scrubber for `secrets`; short ones are left out.
    pub fn new(secrets: &[String]) -> Self {
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        for secret in secrets.iter().map(String::as_bytes) {
            if secret.len() < MIN_SECRET_LEN {
                continue;
            }
            patterns.push(secret.to_vec());
            patterns.extend(base64_forms(secret, &STANDARD_NO_PAD));
            patterns.extend(base64_forms(secret, &URL_SAFE_NO_PAD));
            patterns.push(hex::encode(secret).into_bytes());
            patterns.push(hex::encode_upper(secret).into_bytes());
            patterns.extend(percent_forms(secret));
        }
        patterns.sort();
        patterns.dedup();
        let longest = patterns.iter().map(Vec::len).max().unwrap_or(0);
        let matcher = (!patterns.is_empty()).then(|| {
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .ascii_case_insensitive(false)
                .build(&patterns)
                .expect("literal patterns always build")
        });
        Self { matcher, longest }
    }

    /// Masks every match in `bytes`; returns whether anything was masked.
    pub fn scrub_in_place(&self, bytes: &mut [u8]) -> bool {
        let Some(matcher) = &self.matcher else {
            return false;
        };
        // Leftmost-longest, then again from each match's second byte, so two forms that
        // overlap (a literal inside a hex run) are both masked.
        let mut ranges = Vec::new();
        let mut start = 0;
        while start < bytes.len() {
            let Some(found) = matcher.find(aho_corasick::Input::new(&*bytes).range(start..)) else {
                break;
            };
            ranges.push(found.range());
            start = found.start() + 1;
        }
        for range in &ranges {
            bytes[range.clone()].fill(MASK);
        }
        !ranges.is_empty()
    }

    /// A stream scrubber for one body.
    pub fn stream(self: &std::sync::Arc<Self>) -> StreamScrubber {
        StreamScrubber {
            scrubber: self.clone(),
            carry: Vec::new(),
        }
    }
}

/// Scrubs one body chunk by chunk: holds back the last `longest - 1` bytes, which may
/// be the start of a match completed by the next chunk.
#[derive(Debug)]
pub struct StreamScrubber {
    scrubber: std::sync::Arc<Scrubber>,
    carry: Vec<u8>,
}

impl StreamScrubber {
    /// Scrubs `chunk` after what was held back; returns what is safe to send on.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.scrubber.matcher.is_none() {
            return chunk.to_vec();
        }
        let mut buffer = std::mem::take(&mut self.carry);
        buffer.extend_from_slice(chunk);
        self.scrubber.scrub_in_place(&mut buffer);
        let keep = self.scrubber.longest.saturating_sub(1).min(buffer.len());
        self.carry = buffer.split_off(buffer.len() - keep);
        buffer
    }

    /// The bytes still held back, at the end of the body.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut rest = std::mem::take(&mut self.carry);
        self.scrubber.scrub_in_place(&mut rest);
        rest
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    use proptest::prelude::*;

    use super::*;

    const SECRET: &str = "ghp_s3cr3t/with+odd?bytes=~";

    fn leaks(text: &[u8]) -> bool {
        let text = String::from_utf8_lossy(text);
        text.contains(SECRET)
            || text.contains(&hex::encode(SECRET))
            || text.contains(&STANDARD.encode(SECRET)[..8])
    }

    #[test]
    fn every_encoding_is_masked_at_every_alignment() {
        let scrubber = Scrubber::new(&[SECRET.to_owned()]);
        for prefix in ["", "a", "ab", "abc"] {
            let framed = format!("{prefix}{SECRET}!");
            for encoded in [
                framed.clone(),
                STANDARD.encode(&framed),
                URL_SAFE.encode(&framed),
                hex::encode(&framed),
                hex::encode_upper(&framed),
                percent_forms(framed.as_bytes())
                    .into_iter()
                    .map(|form| String::from_utf8(form).unwrap())
                    .collect::<String>(),
            ] {
                let mut bytes = encoded.clone().into_bytes();
                assert!(scrubber.scrub_in_place(&mut bytes), "{encoded}");
                assert_eq!(bytes.len(), encoded.len());
                let decoded_again = STANDARD
                    .decode(&bytes)
                    .or_else(|_| URL_SAFE.decode(&bytes))
                    .unwrap_or_default();
                assert!(!String::from_utf8_lossy(&decoded_again).contains(SECRET));
                assert!(
                    !leaks(&bytes),
                    "{encoded} → {}",
                    String::from_utf8_lossy(&bytes)
                );
            }
        }
        let mut clean = b"nothing to see".to_vec();
        assert!(!scrubber.scrub_in_place(&mut clean));
    }

    proptest! {
        #[test]
        fn a_secret_split_across_chunks_never_passes(cut in 0_usize..80, prefix in "[a-z]{0,20}") {
            let scrubber = Arc::new(Scrubber::new(&[SECRET.to_owned()]));
            let body = format!("{prefix}{SECRET} and {}", hex::encode(SECRET));
            let cut = cut.min(body.len());
            let mut stream = scrubber.stream();
            let mut output = stream.push(&body.as_bytes()[..cut]);
            output.extend(stream.push(&body.as_bytes()[cut..]));
            output.extend(stream.finish());
            prop_assert_eq!(output.len(), body.len());
            prop_assert!(!leaks(&output));
        }
    }
}
