//! `spec.media`: media services. `transcription` turns the voice notes people send into
//! text for the model; `speech` is the `tts` tool's engine:
//! an OpenAI-compatible `/v1/audio/speech` endpoint with its key in a Secret, or
//! espeak-ng in the agent's own image (`engine: local`). Rendered into the agent
//! config's `media.speech`; the key reaches only the `agent` container.

use kube::KubeSchema;
use saint_config::SpeechEngine;
use serde::{Deserialize, Serialize};

use super::{SecretKeyReference, secret_key_rule};

/// Media settings.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MediaSpec {
    /// An OpenAI-compatible transcription endpoint for voice notes and audio files
    /// people send. Absent: they are not transcribed (the model is told one arrived).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcription: Option<TranscriptionSpec>,
    /// Spoken replies: the engine the `tts` tool speaks with. Absent: no role is
    /// offered `tts`, whatever its tools allow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speech: Option<SpeechSpec>,
}

/// The speech engine and its limits.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(
    "self.engine == 'local' || (has(self.baseUrl) && has(self.model))"
).message("media.speech with engine openai needs baseUrl and model"))]
#[x_kube(validation = kube::core::Rule::new(
    "self.engine != 'local' || (!has(self.baseUrl) && !has(self.model) && !has(self.apiKeySecretRef) && !has(self.allowInsecure))"
).message("media.speech with engine local (espeak-ng in the agent image) takes no baseUrl, model, apiKeySecretRef or allowInsecure"))]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.baseUrl) || !self.baseUrl.startsWith('http://') || has(self.allowInsecure)"
).message("media.speech.baseUrl is plain http://: the text spoken and the API key would cross the network in clear text; use https://, or set media.speech.allowInsecure to say why clear text is acceptable here"))]
pub struct SpeechSpec {
    /// `openai`: an OpenAI-compatible `POST <baseUrl>/v1/audio/speech`, asked for Opus;
    /// `local`: espeak-ng and opusenc in the agent container (robotic, no service). The
    /// default agent image is distroless and has neither: there `local` leaves `tts`
    /// withheld, with a notice; use an image that adds Debian's espeak-ng and
    /// opus-tools.
    #[serde(default)]
    pub engine: SpeechEngine,
    /// The endpoint's base URL without `/v1` (`https://api.openai.com`); `openai` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = kube::core::Rule::new(format!("[self].all(v, {})", super::channel_rules::HTTP_URL))
        .message("media.speech.baseUrl must be an https:// URL with a host (http:// only with media.speech.allowInsecure)"))]
    pub base_url: Option<String>,
    /// Why clear text is acceptable for the speech endpoint: only with it may `baseUrl`
    /// be plain `http://`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub allow_insecure: Option<String>,
    /// The speech model (`gpt-4o-mini-tts`); `openai` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub model: Option<String>,
    /// The voice: the endpoint's voice name (`alloy`) or an espeak-ng voice (`en-us`,
    /// `hr`). Absent: `alloy`, or espeak-ng's `en`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 64),
        regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
    )]
    pub voice: Option<String>,
    /// Secret key holding the endpoint's API key; it reaches only the `agent` container
    /// (as `SAINT_SPEECH_API_KEY`). Absent: no key is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = secret_key_rule("media.speech.apiKeySecretRef"))]
    pub api_key_secret_ref: Option<SecretKeyReference>,
    /// Longest text spoken in one call, in characters. Absent: 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4096))]
    pub max_characters: Option<u32>,
    /// Largest audio kept from one call, in bytes. Absent: 8 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 16_777_216))]
    pub max_audio_bytes: Option<u64>,
    /// How long one call may take, in seconds. Absent: 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 600))]
    pub timeout_seconds: Option<u64>,
    /// Moved: speech is priced in `model.prices.<model>.perMillionCharacters` (the local
    /// engine under `espeak-ng`). Kept only so a manifest that still sets it is refused
    /// by name rather than pruned in silence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new("false").message("media.speech.pricePerMillionCharacters moved: price speech in model.prices.<media.speech.model>.perMillionCharacters (the local engine under model.prices.espeak-ng)"))]
    pub price_per_million_characters: Option<f64>,
}

/// An OpenAI-compatible `POST <baseUrl>/v1/audio/transcriptions` (multipart `file` and
/// `model`, answering JSON `text`): OpenAI, or a whisper server of your own.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(
    "!self.baseUrl.startsWith('http://') || has(self.allowInsecure)"
).message("media.transcription.baseUrl is plain http://: people's voice notes and the API key would cross the network in clear text; use https://, or set media.transcription.allowInsecure to say why clear text is acceptable here"))]
pub struct TranscriptionSpec {
    /// Base URL of the API (`https://api.openai.com`): `https://` with a host (plain
    /// `http://` only with `allowInsecure`).
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = kube::core::Rule::new(format!("[self].all(v, {})", super::channel_rules::HTTP_URL))
        .message("media.transcription.baseUrl must be an https:// URL with a host (http:// only with media.transcription.allowInsecure)"))]
    pub base_url: String,
    /// Why clear text is acceptable for this endpoint: only with it may `baseUrl` be
    /// plain `http://`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub allow_insecure: Option<String>,
    /// Model name sent with each file (`whisper-1`). Price it in `model.prices` with
    /// `perAudioMinute` (or set `budget.unpricedModels: allow`).
    #[schemars(length(min = 1, max = 253))]
    pub model: String,
    /// Secret key holding the API key; it reaches only the `agent` container (as
    /// `SAINT_TRANSCRIPTION_API_KEY`). Absent: no key is sent (a local server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = secret_key_rule("media.transcription.apiKeySecretRef"))]
    pub api_key_secret_ref: Option<SecretKeyReference>,
    /// Longest recording transcribed, in seconds (default 600); a longer one is refused
    /// and the person told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10800))]
    pub max_seconds: Option<u32>,
    /// Largest file transcribed, in bytes (default 16 MiB); a larger one is refused and
    /// the person told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 104857600))]
    pub max_bytes: Option<u64>,
    /// How long one request may take, in seconds (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 600))]
    pub timeout_seconds: Option<u64>,
}
