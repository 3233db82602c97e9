//! `media`: the services around a person's audio. `transcription` turns the voice
//! notes and audio files people send into text for the model; `speech` is the `tts`
//! tool's engine, for spoken replies. The operator renders both from the SaintBot's
//! `spec.media`. No secrets: the key of a remote service is only the name of an
//! environment variable of the agent container, like the model's.

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

/// The agent container's variable holding the speech endpoint's API key (the operator
/// sets it from `spec.media.speech.apiKeySecretRef`).
pub const SPEECH_API_KEY_ENV: &str = "SAINT_SPEECH_API_KEY";

/// Default of [`SpeechConfig::max_characters`].
pub const DEFAULT_SPEECH_MAX_CHARACTERS: u32 = 1_000;
/// Largest [`SpeechConfig::max_characters`] (OpenAI's limit for one request).
pub const MAX_SPEECH_CHARACTERS: u32 = 4_096;
/// Default of [`SpeechConfig::timeout_seconds`].
pub const DEFAULT_SPEECH_TIMEOUT_SECONDS: u64 = 60;
/// Default of [`SpeechConfig::max_audio_bytes`]: 8 MiB, under every channel's limit
/// for a voice message.
pub const DEFAULT_SPEECH_MAX_AUDIO_BYTES: u64 = 8 * 1024 * 1024;

/// Media services. Each is absent unless configured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MediaConfig {
    /// Voice notes and audio files a person sends, transcribed for the model. Absent:
    /// the model is told a voice note arrived and could not be transcribed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcription: Option<TranscriptionConfig>,
    /// Spoken replies (the `tts` tool); absent: no role gets the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speech: Option<SpeechConfig>,
}

impl MediaConfig {
    pub(crate) fn is_empty(&self) -> bool {
        self.transcription.is_none() && self.speech.is_none()
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
    #[serde(default = "default_transcription_max_seconds")]
    pub max_seconds: u32,
    /// Larger files are not sent; the person is told why.
    #[serde(default = "default_transcription_max_bytes")]
    pub max_bytes: u64,
    /// How long one request may take before it counts as failed.
    #[serde(default = "default_transcription_timeout_seconds")]
    pub timeout_seconds: u64,
}

fn default_transcription_max_seconds() -> u32 {
    DEFAULT_TRANSCRIPTION_MAX_SECONDS
}

fn default_transcription_max_bytes() -> u64 {
    DEFAULT_TRANSCRIPTION_MAX_BYTES
}

fn default_transcription_timeout_seconds() -> u64 {
    DEFAULT_TRANSCRIPTION_TIMEOUT_SECONDS
}

/// Which engine speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SpeechEngine {
    /// An OpenAI-compatible `POST <baseUrl>/v1/audio/speech`.
    #[default]
    Openai,
    /// espeak-ng on the agent's machine, encoded to Opus by opus-tools' `opusenc`.
    Local,
}

/// The speech engine and its limits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpeechConfig {
    /// `openai` (an endpoint) or `local` (espeak-ng).
    #[serde(default)]
    pub engine: SpeechEngine,
    /// The endpoint's base URL, without `/v1` (`https://api.openai.com`); `openai` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The speech model (`gpt-4o-mini-tts`); `openai` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The voice: the endpoint's voice name (`alloy`), or an espeak-ng voice (`en-us`,
    /// `hr`). Absent: the engine's default (`alloy`, `en`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voice: Option<String>,
    /// Environment variable of the agent container holding the endpoint's API key
    /// (absent: no key sent); `openai` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Longest text spoken in one call, in characters.
    #[serde(default = "default_max_characters")]
    pub max_characters: u32,
    /// Largest audio kept from one call, in bytes.
    #[serde(default = "default_max_audio_bytes")]
    pub max_audio_bytes: u64,
    /// How long one call may take.
    #[serde(default = "default_timeout_seconds")]
    pub timeout_seconds: u64,
}

fn default_max_characters() -> u32 {
    DEFAULT_SPEECH_MAX_CHARACTERS
}

fn default_max_audio_bytes() -> u64 {
    DEFAULT_SPEECH_MAX_AUDIO_BYTES
}

fn default_timeout_seconds() -> u64 {
    DEFAULT_SPEECH_TIMEOUT_SECONDS
}

/// The key in `model.prices` that prices the local speech engine.
pub const LOCAL_SPEECH_PRICE_KEY: &str = "espeak-ng";

impl SpeechConfig {
    /// The `model.prices` key that prices this engine's speech: the endpoint's model,
    /// or [`LOCAL_SPEECH_PRICE_KEY`] for the local engine.
    pub fn price_key(&self) -> &str {
        match self.engine {
            SpeechEngine::Openai => self.model.as_deref().unwrap_or_default(),
            SpeechEngine::Local => LOCAL_SPEECH_PRICE_KEY,
        }
    }

    /// What speaking `characters` characters costs in USD, at the price
    /// `model.prices.<price key>.perMillionCharacters` names; `None` when it names none.
    pub fn price(
        &self,
        prices: &std::collections::BTreeMap<String, crate::ModelPrice>,
        characters: usize,
    ) -> Option<f64> {
        prices
            .get(self.price_key())
            .and_then(|price| price.per_million_characters)
            .map(|per_million| per_million * characters as f64 / 1_000_000.0)
    }
}

/// Whether `voice` is a plain voice name (letters, digits, `-`, `_`, `+`, `.`): it is
/// passed to an engine as one argument and must never read as an option.
pub fn is_voice_name(voice: &str) -> bool {
    (1..=64).contains(&voice.len())
        && voice
            .chars()
            .next()
            .is_some_and(|first| first.is_ascii_alphanumeric())
        && voice
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '+' | '.'))
}

/// Checks `media`; each message names its field (`media.transcription.baseUrl`,
/// `media.speech.voice`) and why.
pub fn check(media: &MediaConfig) -> Result<(), (String, String)> {
    check_transcription(media)?;
    check_speech(media)
}

/// Checks `media.transcription`; the error names the field
/// (`media.transcription.baseUrl`) and why.
fn check_transcription(media: &MediaConfig) -> Result<(), (String, String)> {
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

/// Checks `media.speech`; each message names its field.
fn check_speech(media: &MediaConfig) -> Result<(), (String, String)> {
    let Some(speech) = &media.speech else {
        return Ok(());
    };
    let field = |name: &str| format!("media.speech.{name}");
    match speech.engine {
        SpeechEngine::Openai => {
            let base_url = speech.base_url.as_deref().unwrap_or_default();
            let parsed = url::Url::parse(base_url);
            if !parsed.is_ok_and(|url| matches!(url.scheme(), "http" | "https") && url.has_host()) {
                return Err((
                    field("baseUrl"),
                    format!("{base_url:?} must be an http:// or https:// URL for engine openai"),
                ));
            }
            if speech
                .model
                .as_deref()
                .is_none_or(|model| model.trim().is_empty())
            {
                return Err((field("model"), "is required for engine openai".to_string()));
            }
        }
        SpeechEngine::Local => {
            // A setting the local engine would not honour is refused, not ignored.
            for (name, set) in [
                ("baseUrl", speech.base_url.is_some()),
                ("model", speech.model.is_some()),
                ("apiKeyEnv", speech.api_key_env.is_some()),
            ] {
                if set {
                    return Err((
                        field(name),
                        "is for engine openai; engine local (espeak-ng) has none".to_string(),
                    ));
                }
            }
        }
    }
    if let Some(voice) = &speech.voice
        && !is_voice_name(voice)
    {
        return Err((
            field("voice"),
            format!("{voice:?} is not a voice name (letters, digits, - _ + . only)"),
        ));
    }
    if !(1..=MAX_SPEECH_CHARACTERS).contains(&speech.max_characters) {
        return Err((
            field("maxCharacters"),
            format!("must be between 1 and {MAX_SPEECH_CHARACTERS}"),
        ));
    }
    if speech.max_audio_bytes == 0 {
        return Err((field("maxAudioBytes"), "must be at least 1".to_string()));
    }
    if !(1..=600).contains(&speech.timeout_seconds) {
        return Err((
            field("timeoutSeconds"),
            "must be between 1 and 600".to_string(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn speech(value: serde_json::Value) -> Result<(), (String, String)> {
        let media: MediaConfig = serde_json::from_value(json!({"speech": value})).unwrap();
        check(&media)
    }

    #[test]
    fn an_endpoint_needs_a_url_and_a_model() {
        assert_eq!(
            speech(
                json!({"engine": "openai", "baseUrl": "https://api.example.com", "model": "tts-1"})
            ),
            Ok(())
        );
        let (field, _) = speech(json!({"model": "tts-1"})).unwrap_err();
        assert_eq!(field, "media.speech.baseUrl");
        let (field, _) =
            speech(json!({"baseUrl": "file:///etc/passwd", "model": "tts-1"})).unwrap_err();
        assert_eq!(field, "media.speech.baseUrl");
        let (field, _) = speech(json!({"baseUrl": "https://api.example.com"})).unwrap_err();
        assert_eq!(field, "media.speech.model");
    }

    #[test]
    fn the_local_engine_refuses_endpoint_settings_it_would_not_honour() {
        assert_eq!(speech(json!({"engine": "local", "voice": "en-us"})), Ok(()));
        let (field, message) = speech(json!({"engine": "local", "model": "tts-1"})).unwrap_err();
        assert_eq!(field, "media.speech.model");
        assert!(message.contains("engine local"), "{message}");
        let (field, _) = speech(json!({"engine": "local", "apiKeyEnv": "K"})).unwrap_err();
        assert_eq!(field, "media.speech.apiKeyEnv");
    }

    #[test]
    fn a_voice_never_reads_as_an_option_and_limits_are_bounded() {
        for voice in ["--path=/tmp", "-w", "en us", "a;b", ""] {
            let (field, _) = speech(json!({"engine": "local", "voice": voice})).unwrap_err();
            assert_eq!(field, "media.speech.voice", "{voice:?}");
        }
        let (field, _) = speech(json!({"engine": "local", "maxCharacters": 5000})).unwrap_err();
        assert_eq!(field, "media.speech.maxCharacters");
        let (field, _) = speech(json!({"engine": "local", "timeoutSeconds": 0})).unwrap_err();
        assert_eq!(field, "media.speech.timeoutSeconds");
    }

    #[test]
    fn speech_is_priced_per_million_characters_in_model_prices_under_its_model() {
        let prices: std::collections::BTreeMap<String, crate::ModelPrice> =
            serde_json::from_value(json!({
                "gpt-4o-mini-tts": {"inputPerMtok": 0, "outputPerMtok": 0, "perMillionCharacters": 15.0},
                "espeak-ng": {"inputPerMtok": 0, "outputPerMtok": 0, "perMillionCharacters": 0.5}
            }))
            .unwrap();
        let endpoint: SpeechConfig = serde_json::from_value(json!({
            "engine": "openai", "baseUrl": "https://api.example.com", "model": "gpt-4o-mini-tts"
        }))
        .unwrap();
        assert_eq!(endpoint.price(&prices, 200_000), Some(3.0));
        let local: SpeechConfig = serde_json::from_value(json!({"engine": "local"})).unwrap();
        assert_eq!(local.price_key(), "espeak-ng");
        assert_eq!(local.price(&prices, 2_000_000), Some(1.0));
        let unpriced: SpeechConfig = serde_json::from_value(json!({
            "engine": "openai", "baseUrl": "https://api.example.com", "model": "tts-1"
        }))
        .unwrap();
        assert_eq!(unpriced.price(&prices, 1), None);
        // The old place of the price is refused by name, never ignored.
        let moved = serde_json::from_value::<SpeechConfig>(
            json!({"engine": "local", "pricePerMillionCharacters": 15.0}),
        )
        .unwrap_err();
        assert!(
            moved.to_string().contains("pricePerMillionCharacters"),
            "{moved}"
        );
    }
}
