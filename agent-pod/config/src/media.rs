//! `media`: the services that turn a person's audio into text (and, beside it, any
//! later media service such as speech). No secrets: only environment variable names.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Environment variable of the agent container holding the transcription API key.
pub const TRANSCRIPTION_API_KEY_ENV: &str = "SAINT_TRANSCRIPTION_API_KEY";

/// Longest audio transcribed when the config does not say, in seconds.
pub const DEFAULT_TRANSCRIPTION_MAX_SECONDS: u32 = 600;
/// Largest audio file transcribed when the config does not say (the OpenAI API's own
/// limit is 25 MB).
pub const DEFAULT_TRANSCRIPTION_MAX_BYTES: u64 = 16 * 1024 * 1024;
/// How long one transcription request may take when the config does not say.
pub const DEFAULT_TRANSCRIPTION_TIMEOUT_SECONDS: u64 = 60;
/// Upper bounds the config may set (a turn waits for its transcription).
pub const MAX_TRANSCRIPTION_SECONDS: u32 = 3 * 60 * 60;
pub const MAX_TRANSCRIPTION_BYTES: u64 = 100 * 1024 * 1024;
pub const MAX_TRANSCRIPTION_TIMEOUT_SECONDS: u64 = 600;

/// Media services. Each is absent unless configured.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MediaConfig {
    /// Voice notes and audio files a person sends, transcribed for the model. Absent:
    /// the model is told a voice note arrived and could not be transcribed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcription: Option<TranscriptionConfig>,
}

impl MediaConfig {
    pub(crate) fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// An OpenAI-compatible transcription endpoint (`POST <baseUrl>/v1/audio/transcriptions`,
/// multipart `file` and `model`, answering JSON with `text`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TranscriptionConfig {
    /// Base URL of the API (`https://api.openai.com`, a local whisper server).
    pub base_url: String,
    /// Model name sent with each file (`whisper-1`); priced in `model.prices`
    /// (`perAudioMinute`).
    pub model: String,
    /// Environment variable of the agent container holding the API key; absent: no key
    /// is sent (a local server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Longer audio is not sent; the person is told why.
    #[serde(default = "default_max_seconds")]
    pub max_seconds: u32,
    /// Larger files are not sent; the person is told why.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// How long one request may take before it counts as failed.
    #[serde(default = "default_timeout_seconds")]
    pub timeout_seconds: u64,
}

fn default_max_seconds() -> u32 {
    DEFAULT_TRANSCRIPTION_MAX_SECONDS
}

fn default_max_bytes() -> u64 {
    DEFAULT_TRANSCRIPTION_MAX_BYTES
}

fn default_timeout_seconds() -> u64 {
    DEFAULT_TRANSCRIPTION_TIMEOUT_SECONDS
}

/// Checks `media`; the error names the field (`media.transcription.baseUrl`) and why.
pub(crate) fn check(media: &MediaConfig) -> Result<(), (String, String)> {
    let Some(transcription) = &media.transcription else {
        return Ok(());
    };
    let field = |name: &str| format!("media.transcription.{name}");
    let url = url::Url::parse(&transcription.base_url).map_err(|error| {
        (
            field("baseUrl"),
            format!("{:?} is not a URL: {error}", transcription.base_url),
        )
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err((
            field("baseUrl"),
            format!(
                "{:?} must be an http:// or https:// URL with a host",
                transcription.base_url
            ),
        ));
    }
    if transcription.model.trim().is_empty() {
        return Err((field("model"), "must not be empty".to_string()));
    }
    if transcription
        .api_key_env
        .as_deref()
        .is_some_and(|name| name.trim().is_empty())
    {
        return Err((field("apiKeyEnv"), "must not be empty".to_string()));
    }
    if !(1..=MAX_TRANSCRIPTION_SECONDS).contains(&transcription.max_seconds) {
        return Err((
            field("maxSeconds"),
            format!("must be between 1 and {MAX_TRANSCRIPTION_SECONDS}"),
        ));
    }
    if !(1..=MAX_TRANSCRIPTION_BYTES).contains(&transcription.max_bytes) {
        return Err((
            field("maxBytes"),
            format!("must be between 1 and {MAX_TRANSCRIPTION_BYTES}"),
        ));
    }
    if !(1..=MAX_TRANSCRIPTION_TIMEOUT_SECONDS).contains(&transcription.timeout_seconds) {
        return Err((
            field("timeoutSeconds"),
            format!("must be between 1 and {MAX_TRANSCRIPTION_TIMEOUT_SECONDS}"),
        ));
    }
    Ok(())
}
