//! The `tts` tool: the model turns text into a voice note that goes out with its reply.
//!
//! The engine is the bot's `media.speech`: an OpenAI-compatible `POST
//! <baseUrl>/v1/audio/speech` asked for Opus, or espeak-ng on this machine, its WAV
//! encoded by opus-tools' `opusenc`. The local programs run as children with an empty
//! environment, a private temporary directory, the text on stdin (never an argument)
//! and a deadline that kills them. Either way the result must be Ogg (`OggS`) within
//! `maxAudioBytes`; it is stored under `.saint/outbox/audio/` (runtime state, which no
//! sandbox view or file tool reaches) and the turn's reply carries it to the channel.
//!
//! Metered per character: the usage line has `characters`, `audioBytes` and, when
//! `model.prices` prices the speech model (`perMillionCharacters`; the local engine
//! under `espeak-ng`), `costUsd` (reserved against the caller's budget before the call
//! by the runtime).

use std::{path::Path, process::Stdio, time::Duration};

use futures::{StreamExt, future::BoxFuture};
use saint_config::{SpeechConfig, SpeechEngine};
use saint_tools::{Permit, Tool, ToolAudio, ToolContext, ToolError, ToolOutput, typed};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// The tool's name in roles and the catalog.
pub const TTS_TOOL: &str = "tts";

/// Where voice notes wait for their reply, relative to the workspace.
pub const AUDIO_DIRECTORY: &str = ".saint/outbox/audio";

/// The MIME type of every voice note made here.
pub const OGG_OPUS: &str = "audio/ogg";

/// Directories the local engine's programs are looked up in (the environment is
/// cleared, so no caller-controlled `PATH` applies).
const LOCAL_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Whether this machine has the local engine's programs (`espeak-ng`, `opusenc`),
/// looked up once. Without them `tts` is withheld from a bot whose engine is `local`
/// (the default agent image is distroless and has neither).
pub fn local_engine_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        ["espeak-ng", "opusenc"].iter().all(|program| {
            LOCAL_PATH
                .split(':')
                .any(|directory| Path::new(directory).join(program).is_file())
        })
    })
}

/// Whether `tts` can be offered under `config`: a speech engine is set, a local one is
/// installed, and a remote one's key variable is set (else every call would fail).
pub fn offered(config: &saint_config::BotConfig) -> bool {
    config
        .media
        .speech
        .as_ref()
        .is_some_and(|speech| unavailable(speech).is_none())
}

/// Why `speech` cannot speak on this machine, for the start-up notice; `None`: it can.
pub fn unavailable(speech: &saint_config::SpeechConfig) -> Option<String> {
    if speech.engine == SpeechEngine::Local && !local_engine_available() {
        return Some(
            "tts: off — media.speech.engine is local, but espeak-ng and opusenc are not \
             installed here (Debian espeak-ng, opus-tools)"
                .to_string(),
        );
    }
    let name = speech.api_key_env.as_ref()?;
    std::env::var_os(name)
        .is_none()
        .then(|| format!("tts: off — media.speech needs its API key in {name}, which is not set"))
}

/// What the model sends.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TtsInput {
    /// What to say.
    text: String,
}

/// Characters of `text` the tool speaks, as the budget prices them before the call.
pub fn characters(input: &Value) -> usize {
    input["text"]
        .as_str()
        .map_or(0, |text| text.trim().chars().count())
}

/// Speaks text into a voice note.
pub struct TtsTool {
    http: reqwest::Client,
}

impl Default for TtsTool {
    fn default() -> Self {
        Self::new()
    }
}

impl TtsTool {
    pub fn new() -> Self {
        Self {
            http: reqwest::Client::new(),
        }
    }

    /// Asks the endpoint for Opus.
    async fn remote(&self, speech: &SpeechConfig, text: &str) -> Result<Vec<u8>, ToolError> {
        let base_url = speech.base_url.as_deref().unwrap_or_default();
        let url = format!("{}/v1/audio/speech", base_url.trim_end_matches('/'));
        let mut request = self
            .http
            .post(&url)
            .timeout(Duration::from_secs(speech.timeout_seconds))
            .json(&json!({
                "model": speech.model,
                "input": text,
                "voice": speech.voice.as_deref().unwrap_or("alloy"),
                "response_format": "opus",
            }));
        if let Some(name) = &speech.api_key_env {
            let key = std::env::var(name).map_err(|_| {
                tracing::error!(variable = %name, "the speech endpoint's key is not set");
                ToolError::Failed("speech is not set up on this bot".to_string())
            })?;
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|error| {
            tracing::warn!(%error, "the speech endpoint did not answer");
            ToolError::Failed("the speech service did not answer".to_string())
        })?;
        let status = response.status();
        if !status.is_success() {
            tracing::warn!(%status, "the speech endpoint refused a request");
            return Err(ToolError::Failed(format!(
                "the speech service answered HTTP {}",
                status.as_u16()
            )));
        }
        let limit = speech.max_audio_bytes;
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|error| {
                tracing::warn!(%error, "the speech endpoint's answer broke off");
                ToolError::Failed("the speech service's answer broke off".to_string())
            })?;
            if (body.len() + chunk.len()) as u64 > limit {
                return Err(too_long(limit));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

fn too_long(limit: u64) -> ToolError {
    ToolError::InvalidInput(format!(
        "the audio would be larger than {limit} bytes; say less"
    ))
}

/// espeak-ng → WAV → `opusenc` → Ogg, in a private directory, killed at the deadline.
async fn local(speech: &SpeechConfig, text: &str) -> Result<Vec<u8>, ToolError> {
    let directory = tempfile::tempdir()
        .map_err(|error| ToolError::Failed(format!("no temporary directory: {error}")))?;
    let (wav, ogg) = (
        directory.path().join("speech.wav"),
        directory.path().join("speech.ogg"),
    );
    let deadline = Duration::from_secs(speech.timeout_seconds);
    let voice = speech.voice.as_deref().unwrap_or("en");
    let speak = async {
        let mut espeak = tokio::process::Command::new("espeak-ng");
        espeak.args(["-v", voice, "-w"]).arg(&wav).arg("--stdin");
        run(espeak, directory.path(), Some(text)).await?;
        let mut opusenc = tokio::process::Command::new("opusenc");
        opusenc.arg("--quiet").arg(&wav).arg(&ogg);
        run(opusenc, directory.path(), None).await
    };
    match tokio::time::timeout(deadline, speak).await {
        Err(_) => return Err(ToolError::Timeout(speech.timeout_seconds)),
        Ok(result) => result?,
    }
    let size = tokio::fs::metadata(&ogg)
        .await
        .map_err(|_| ToolError::Failed("the speech engine made no audio".to_string()))?
        .len();
    if size > speech.max_audio_bytes {
        return Err(too_long(speech.max_audio_bytes));
    }
    tokio::fs::read(&ogg)
        .await
        .map_err(|error| ToolError::Failed(format!("the audio could not be read: {error}")))
}

/// Runs one program of the local engine with an empty environment in `directory`,
/// `stdin` written to it; the child dies with the future (a deadline).
async fn run(
    mut command: tokio::process::Command,
    directory: &Path,
    stdin: Option<&str>,
) -> Result<(), ToolError> {
    let program = command
        .as_std()
        .get_program()
        .to_string_lossy()
        .into_owned();
    command
        .env_clear()
        .env("PATH", LOCAL_PATH)
        .current_dir(directory)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|error| {
        tracing::error!(%program, %error, "the local speech engine could not start");
        ToolError::Failed(format!(
            "the local speech engine ({program}) is not installed on this bot"
        ))
    })?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .await
            .map_err(|error| ToolError::Failed(format!("{program} did not read: {error}")))?;
        drop(pipe);
    }
    let output = child
        .wait_with_output()
        .await
        .map_err(|error| ToolError::Failed(format!("{program} failed: {error}")))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        tracing::warn!(%program, status = %output.status, stderr = %stderr.chars().take(500).collect::<String>(),
            "the local speech engine failed");
        return Err(ToolError::Failed(format!(
            "{program} failed ({})",
            output.status
        )));
    }
    Ok(())
}

/// Stores `audio` under [`AUDIO_DIRECTORY`]; returns its workspace-relative path.
async fn store(workspace: &Path, audio: &[u8]) -> Result<String, ToolError> {
    let name: String = {
        use rand::Rng;
        let mut random = rand::thread_rng();
        (0..16)
            .map(|_| format!("{:02x}", random.r#gen::<u8>()))
            .collect()
    };
    let relative = format!("{AUDIO_DIRECTORY}/{name}.ogg");
    let failed = |error: std::io::Error| {
        tracing::error!(%error, "failed to store a voice note");
        ToolError::Failed("the voice note could not be stored".to_string())
    };
    tokio::fs::create_dir_all(workspace.join(AUDIO_DIRECTORY))
        .await
        .map_err(failed)?;
    // Written under a temporary name and renamed: a reply never carries half a file.
    let target = workspace.join(&relative);
    let partial = target.with_extension("partial");
    tokio::fs::write(&partial, audio).await.map_err(failed)?;
    tokio::fs::rename(&partial, &target).await.map_err(failed)?;
    Ok(relative)
}

impl Tool for TtsTool {
    fn name(&self) -> &'static str {
        TTS_TOOL
    }

    fn description(&self) -> &str {
        "Say something as a voice note: `text` is spoken and the audio is sent to the \
         person with your reply (on channels that carry audio). Keep it short and plain: \
         no Markdown, no links."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "What to say, as plain text"},
            },
            "required": ["text"],
            "additionalProperties": false,
        })
    }

    fn call<'a>(
        &'a self,
        permit: &'a Permit,
        context: &'a ToolContext,
        input: Value,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            permit.covers(TTS_TOOL, &context.caller)?;
            let input: TtsInput = typed::decode(input)?;
            let Some(speech) = context.config.media.speech.clone() else {
                return Err(ToolError::Failed(
                    "speech is not set up on this bot".to_string(),
                ));
            };
            let text = input.text.trim();
            let characters = text.chars().count();
            if characters == 0 {
                return Err(ToolError::InvalidInput("text is empty".to_string()));
            }
            if characters > speech.max_characters as usize {
                return Err(ToolError::InvalidInput(format!(
                    "text has {characters} characters; at most {} are spoken at once",
                    speech.max_characters
                )));
            }
            let audio = match speech.engine {
                SpeechEngine::Openai => self.remote(&speech, text).await?,
                SpeechEngine::Local => local(&speech, text).await?,
            };
            // Whatever the engine says it made, only Ogg goes out as a voice note.
            if !audio.starts_with(b"OggS") {
                return Err(ToolError::Failed(
                    "the speech engine did not return Ogg audio".to_string(),
                ));
            }
            let path = store(&context.workspace, &audio).await?;
            let mut output = ToolOutput::text(format!(
                "voice note made ({characters} characters, {} bytes); it is sent with your reply",
                audio.len()
            ));
            output
                .metering
                .insert("characters".to_string(), json!(characters));
            output
                .metering
                .insert("audioBytes".to_string(), json!(audio.len()));
            output.metering.insert(
                "engine".to_string(),
                json!(match speech.engine {
                    SpeechEngine::Openai => "openai",
                    SpeechEngine::Local => "local",
                }),
            );
            if let Some(cost) = speech.price(&context.config.model.prices, characters) {
                output.metering.insert("costUsd".to_string(), json!(cost));
            }
            output.audio = Some(ToolAudio {
                path,
                mime_type: OGG_OPUS.to_string(),
            });
            Ok(output)
        })
    }
}

#[cfg(test)]
mod tests {
    use saint_config::{SpeechConfig, SpeechEngine};

    use super::unavailable;

    fn endpoint(key_variable: Option<&str>) -> SpeechConfig {
        serde_json::from_value(serde_json::json!({
            "engine": "openai",
            "baseUrl": "https://speech.acme.example",
            "model": "gpt-4o-mini-tts",
            "apiKeyEnv": key_variable,
        }))
        .unwrap()
    }

    #[test]
    fn a_remote_engine_without_its_key_is_withheld_with_the_variable_named() {
        // `PATH` is always set; the other name never is.
        assert_eq!(unavailable(&endpoint(Some("PATH"))), None);
        assert_eq!(
            unavailable(&endpoint(None)),
            None,
            "a local server needs no key"
        );
        let missing = "SAINT_TEST_SPEECH_KEY_THAT_IS_NEVER_SET";
        let notice = unavailable(&endpoint(Some(missing))).expect("withheld");
        assert!(notice.contains(missing), "{notice}");
        let local: SpeechConfig =
            serde_json::from_value(serde_json::json!({"engine": "local"})).unwrap();
        assert_eq!(local.engine, SpeechEngine::Local);
        assert_eq!(
            unavailable(&local).is_none(),
            super::local_engine_available()
        );
    }
}
