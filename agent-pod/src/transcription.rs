//! Audio a person sent, as text: the client of an OpenAI-compatible transcription
//! endpoint (`POST <baseUrl>/v1/audio/transcriptions`, multipart `file` and `model`,
//! answered with JSON `{"text": …}`), and the length of an Ogg file (WhatsApp's and
//! Telegram's voice notes are Opus in Ogg) read from its last page, so a note too long
//! for the limit or the budget is refused before it is sent.
//!
//! Sends only the file and the model name; the key comes from the environment variable
//! the config names, like the model's. Reads nothing but the file it is given.

use std::{path::Path, time::Duration};

use saint_config::TranscriptionConfig;

use crate::runtime::EnvLookup;

/// How far from the end of an Ogg file its last page is looked for: a page is at most
/// 65,307 bytes.
const OGG_TAIL_BYTES: usize = 65_536 + 27;
/// Largest answer read from the endpoint.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// Longest transcript given to the model (three hours of speech is about 200,000).
const MAX_TRANSCRIPT_CHARS: usize = 100_000;
/// Opus granule positions count 48 kHz samples whatever the input rate (RFC 7845).
const OPUS_GRANULE_RATE: f64 = 48_000.0;

/// Why a file was not transcribed. Said to the person and the model; never a secret.
#[derive(Debug, thiserror::Error)]
pub enum TranscriptionError {
    #[error("voice notes cannot be transcribed here: transcription is not configured")]
    NotConfigured,
    #[error("the file is {bytes} bytes, over the {max}-byte limit for transcription")]
    TooLarge { bytes: u64, max: u64 },
    #[error(
        "the recording is {seconds:.0} seconds long, over the {max}-second limit for transcription"
    )]
    TooLong { seconds: f64, max: u32 },
    #[error("the file could not be read: {0}")]
    Unreadable(String),
    #[error(
        "the transcription API key is not configured (environment variable {0} is unset or empty)"
    )]
    MissingKey(String),
    #[error("the transcription service did not answer within {0} seconds")]
    Timeout(u64),
    #[error("the transcription service answered with status {0}")]
    Status(u16),
    #[error("the transcription service could not be reached")]
    Unreachable,
    #[error("the transcription service's answer held no text")]
    BadAnswer,
    #[error("transcribing it would pass your budget")]
    OverBudget,
}

impl TranscriptionError {
    /// The `outcome` of its usage line and metrics.
    pub fn outcome(&self) -> &'static str {
        match self {
            TranscriptionError::NotConfigured => "not_configured",
            TranscriptionError::TooLarge { .. } => "too_large",
            TranscriptionError::TooLong { .. } => "too_long",
            TranscriptionError::Unreadable(_) => "unreadable",
            TranscriptionError::MissingKey(_) => "missing_key",
            TranscriptionError::Timeout(_) => "timeout",
            TranscriptionError::Status(_) => "failed",
            TranscriptionError::Unreachable => "unreachable",
            TranscriptionError::BadAnswer => "bad_answer",
            TranscriptionError::OverBudget => "over_budget",
        }
    }
}

/// An audio file read and checked against the limits, ready to send.
#[derive(Debug)]
pub struct Audio {
    pub bytes: Vec<u8>,
    /// Its length, when the container tells it (Ogg Opus and Vorbis).
    pub seconds: Option<f64>,
    pub file_name: String,
    pub media_type: &'static str,
}

impl Audio {
    /// Reads `path` (at most `max_bytes`, so a larger file costs no more memory than the
    /// limit) and refuses it when it is too large or too long.
    pub async fn read(
        path: &Path,
        config: &TranscriptionConfig,
    ) -> Result<Self, TranscriptionError> {
        use tokio::io::AsyncReadExt;
        let file = tokio::fs::File::open(path)
            .await
            .map_err(|error| TranscriptionError::Unreadable(error.kind().to_string()))?;
        let size = file
            .metadata()
            .await
            .map_err(|error| TranscriptionError::Unreadable(error.kind().to_string()))?
            .len();
        if size > config.max_bytes {
            return Err(TranscriptionError::TooLarge {
                bytes: size,
                max: config.max_bytes,
            });
        }
        let mut bytes = Vec::with_capacity(size as usize);
        file.take(config.max_bytes + 1)
            .read_to_end(&mut bytes)
            .await
            .map_err(|error| TranscriptionError::Unreadable(error.kind().to_string()))?;
        if bytes.len() as u64 > config.max_bytes {
            return Err(TranscriptionError::TooLarge {
                bytes: bytes.len() as u64,
                max: config.max_bytes,
            });
        }
        let seconds = ogg_seconds(&bytes);
        if let Some(seconds) = seconds
            && seconds > f64::from(config.max_seconds)
        {
            return Err(TranscriptionError::TooLong {
                seconds,
                max: config.max_seconds,
            });
        }
        let file_name = path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| "audio".to_string());
        Ok(Self {
            media_type: media_type(&file_name, &bytes),
            bytes,
            seconds,
            file_name,
        })
    }
}

/// What the service heard, and how long the audio was by its account (when it says).
#[derive(Debug)]
pub struct Transcript {
    pub text: String,
    pub seconds: Option<f64>,
}

/// Posts `audio` to the configured endpoint.
pub async fn transcribe(
    config: &TranscriptionConfig,
    env: &EnvLookup,
    audio: &Audio,
) -> Result<Transcript, TranscriptionError> {
    let key = match &config.api_key_env {
        Some(name) => Some(env(name).ok_or_else(|| TranscriptionError::MissingKey(name.clone()))?),
        None => None,
    };
    let timeout = Duration::from_secs(config.timeout_seconds);
    let client = reqwest::Client::builder()
        .timeout(timeout)
        // The endpoint is the config's; a redirect would carry the audio elsewhere.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|_| TranscriptionError::Unreachable)?;
    let file = reqwest::multipart::Part::bytes(audio.bytes.clone())
        .file_name(audio.file_name.clone())
        .mime_str(audio.media_type)
        .map_err(|_| TranscriptionError::Unreachable)?;
    let form = reqwest::multipart::Form::new()
        .part("file", file)
        .text("model", config.model.clone())
        .text("response_format", "json");
    let url = format!(
        "{}/v1/audio/transcriptions",
        config.base_url.trim_end_matches('/')
    );
    let mut request = client.post(url).multipart(form);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let failed = |error: reqwest::Error| {
        if error.is_timeout() {
            TranscriptionError::Timeout(config.timeout_seconds)
        } else {
            TranscriptionError::Unreachable
        }
    };
    let mut response = request.send().await.map_err(failed)?;
    let status = response.status();
    if !status.is_success() {
        return Err(TranscriptionError::Status(status.as_u16()));
    }
    // Read under a cap: the answer is a few kilobytes of text, whatever the endpoint sends.
    let mut raw = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(failed)? {
        if raw.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(TranscriptionError::BadAnswer);
        }
        raw.extend_from_slice(&chunk);
    }
    let body: serde_json::Value =
        serde_json::from_slice(&raw).map_err(|_| TranscriptionError::BadAnswer)?;
    let text = body["text"]
        .as_str()
        .ok_or(TranscriptionError::BadAnswer)?
        .trim();
    let text = match text.char_indices().nth(MAX_TRANSCRIPT_CHARS) {
        Some((cut, _)) => format!(
            "{}\n[transcript cut at {MAX_TRANSCRIPT_CHARS} characters]",
            &text[..cut]
        ),
        None => text.to_string(),
    };
    Ok(Transcript {
        text,
        seconds: body["duration"].as_f64().filter(|seconds| *seconds >= 0.0),
    })
}

/// Whether a saved attachment is audio: by signature (Ogg, RIFF WAVE, FLAC, MP3 with an
/// ID3 tag) or, for containers without one, by the name the channel gave it.
pub fn is_audio(file_name: &str, head: &[u8]) -> bool {
    let signed = head.starts_with(b"OggS")
        || head.starts_with(b"fLaC")
        || head.starts_with(b"ID3")
        || (head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WAVE");
    let extension = file_name
        .rsplit_once('.')
        .map(|(_, extension)| extension.to_ascii_lowercase());
    signed
        || matches!(
            extension.as_deref(),
            Some("ogg" | "oga" | "opus" | "mp3" | "m4a" | "wav" | "flac" | "webm" | "mpga")
        )
}

fn media_type(file_name: &str, bytes: &[u8]) -> &'static str {
    if bytes.starts_with(b"OggS") {
        return "audio/ogg";
    }
    let extension = file_name
        .rsplit_once('.')
        .map(|(_, extension)| extension.to_ascii_lowercase());
    match extension.as_deref() {
        Some("mp3" | "mpga") => "audio/mpeg",
        Some("m4a") => "audio/mp4",
        Some("wav") => "audio/wav",
        Some("flac") => "audio/flac",
        Some("webm") => "audio/webm",
        _ => "application/octet-stream",
    }
}

/// The length of an Ogg Opus or Vorbis file in seconds: the granule position of its
/// last page (less Opus's pre-skip) over the stream's rate. `None` for anything else
/// or a file whose pages do not say.
pub fn ogg_seconds(bytes: &[u8]) -> Option<f64> {
    // The first page carries the identification header.
    let first = page_at(bytes, 0)?;
    let (rate, pre_skip) = if first.body.starts_with(b"OpusHead") && first.body.len() >= 19 {
        let pre_skip = u16::from_le_bytes([first.body[10], first.body[11]]);
        (OPUS_GRANULE_RATE, f64::from(pre_skip))
    } else if first.body.starts_with(b"\x01vorbis") && first.body.len() >= 16 {
        let rate = u32::from_le_bytes(first.body[12..16].try_into().ok()?);
        (f64::from(rate), 0.0)
    } else {
        return None;
    };
    if rate <= 0.0 {
        return None;
    }
    let serial = first.serial;
    // The last page of that stream: scan the tail for page starts.
    let tail_start = bytes.len().saturating_sub(OGG_TAIL_BYTES);
    let mut granule = None;
    let mut at = tail_start;
    while let Some(offset) = find(&bytes[at..], b"OggS") {
        let start = at + offset;
        if let Some(page) = page_at(bytes, start)
            && page.serial == serial
            && page.granule != u64::MAX
        {
            granule = Some(page.granule);
        }
        at = start + 4;
    }
    let samples = granule? as f64 - pre_skip;
    Some((samples / rate).max(0.0))
}

struct Page<'a> {
    granule: u64,
    serial: u32,
    body: &'a [u8],
}

/// The Ogg page starting at `start`, if a whole one does (RFC 3533 section 6).
fn page_at(bytes: &[u8], start: usize) -> Option<Page<'_>> {
    let header = bytes.get(start..start + 27)?;
    if &header[..4] != b"OggS" || header[4] != 0 {
        return None;
    }
    let granule = u64::from_le_bytes(header[6..14].try_into().ok()?);
    let serial = u32::from_le_bytes(header[14..18].try_into().ok()?);
    let segments = usize::from(header[26]);
    let table = bytes.get(start + 27..start + 27 + segments)?;
    let length: usize = table.iter().map(|&size| usize::from(size)).sum();
    let body_start = start + 27 + segments;
    let body = bytes.get(body_start..body_start + length)?;
    Some(Page {
        granule,
        serial,
        body,
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One Ogg page (no CRC: the reader does not check it).
    fn page(granule: u64, serial: u32, body: &[u8]) -> Vec<u8> {
        let mut page = b"OggS\0\0".to_vec();
        page.extend(granule.to_le_bytes());
        page.extend(serial.to_le_bytes());
        page.extend([0u8; 8]);
        let mut left = body.len();
        let mut table = Vec::new();
        while left >= 255 {
            table.push(255u8);
            left -= 255;
        }
        table.push(left as u8);
        page.push(table.len() as u8);
        page.extend(table);
        page.extend(body);
        page
    }

    fn opus_head(pre_skip: u16) -> Vec<u8> {
        let mut head = b"OpusHead\x01\x01".to_vec();
        head.extend(pre_skip.to_le_bytes());
        head.extend(48_000u32.to_le_bytes());
        head.extend([0, 0, 0]);
        head
    }

    #[test]
    fn an_opus_file_lasts_its_last_granule_less_the_pre_skip() {
        let mut file = page(0, 7, &opus_head(312));
        file.extend(page(0, 7, b"OpusTags"));
        file.extend(page(48_000 * 3, 7, &[1; 400]));
        file.extend(page(48_000 * 5 + 312, 7, &[1; 400]));
        assert_eq!(ogg_seconds(&file), Some(5.0));
    }

    #[test]
    fn a_page_of_another_stream_or_a_cut_page_does_not_count() {
        let mut file = page(0, 7, &opus_head(0));
        file.extend(page(48_000 * 2, 7, &[1; 10]));
        file.extend(page(48_000 * 900, 8, &[1; 10]));
        let mut cut = page(48_000 * 900, 7, &[1; 300]);
        cut.truncate(100);
        file.extend(cut);
        assert_eq!(ogg_seconds(&file), Some(2.0));
    }

    #[test]
    fn anything_but_ogg_has_no_length() {
        assert_eq!(ogg_seconds(b"ID3\x03rest of an mp3"), None);
        assert_eq!(ogg_seconds(b"OggS"), None);
        assert_eq!(ogg_seconds(&page(0, 1, b"\x80theora")), None);
    }

    #[test]
    fn audio_is_told_by_signature_or_name() {
        assert!(is_audio("voice.bin", b"OggS\0\x02"));
        assert!(is_audio("note.m4a", b"\0\0\0\x20ftypM4A "));
        assert!(!is_audio("scan.pdf", b"%PDF-1.4"));
    }
}
