//! `spec.media` as the agent sees it: defaults filled in, the API key only as the name
//! of the agent container's environment variable. Pure.

use saint_config::{
    MediaConfig, TRANSCRIPTION_API_KEY_ENV, TranscriptionConfig, UnpricedModels,
    media::{
        DEFAULT_TRANSCRIPTION_MAX_BYTES, DEFAULT_TRANSCRIPTION_MAX_SECONDS,
        DEFAULT_TRANSCRIPTION_TIMEOUT_SECONDS,
    },
};

use super::ValidateError;
use crate::crd::saintbot::{SaintBotSpec, TranscriptionSpec};

fn invalid(field: &str, message: String) -> ValidateError {
    ValidateError::InvalidSetting {
        field: format!("spec.media.transcription.{field}"),
        message,
    }
}

/// The rendered `media`, refusing what the CRD's rules refuse (a server without them
/// still gets a clear error naming the field) and a transcription model no budget could
/// count.
pub(super) fn render_media(spec: &SaintBotSpec) -> Result<MediaConfig, ValidateError> {
    let Some(transcription) = spec
        .media
        .as_ref()
        .and_then(|media| media.transcription.as_ref())
    else {
        return Ok(MediaConfig::default());
    };
    check_transcription(spec, transcription)?;
    Ok(MediaConfig {
        transcription: Some(TranscriptionConfig {
            base_url: transcription.base_url.trim_end_matches('/').to_string(),
            model: transcription.model.clone(),
            api_key_env: transcription
                .api_key_secret_ref
                .as_ref()
                .map(|_| TRANSCRIPTION_API_KEY_ENV.to_string()),
            max_seconds: transcription
                .max_seconds
                .unwrap_or(DEFAULT_TRANSCRIPTION_MAX_SECONDS),
            max_bytes: transcription
                .max_bytes
                .unwrap_or(DEFAULT_TRANSCRIPTION_MAX_BYTES),
            timeout_seconds: transcription
                .timeout_seconds
                .unwrap_or(DEFAULT_TRANSCRIPTION_TIMEOUT_SECONDS),
        }),
    })
}

fn check_transcription(
    spec: &SaintBotSpec,
    transcription: &TranscriptionSpec,
) -> Result<(), ValidateError> {
    let url = url::Url::parse(&transcription.base_url)
        .ok()
        .filter(|url| matches!(url.scheme(), "http" | "https") && url.host_str().is_some())
        .ok_or_else(|| {
            invalid(
                "baseUrl",
                format!(
                    "{:?} must be an https:// URL with a host",
                    transcription.base_url
                ),
            )
        })?;
    if url.scheme() == "http" && transcription.allow_insecure.is_none() {
        return Err(invalid(
            "baseUrl",
            "is plain http://: people's voice notes and the API key would cross the network \
             in clear text; use https://, or set spec.media.transcription.allowInsecure to say \
             why clear text is acceptable here"
                .to_string(),
        ));
    }
    if transcription.model.trim().is_empty() {
        return Err(invalid("model", "must not be empty".to_string()));
    }
    if let Some(secret) = &transcription.api_key_secret_ref
        && (secret.name.is_empty() || secret.key.is_empty())
    {
        return Err(invalid(
            "apiKeySecretRef",
            "must name both a Secret (name) and a key in it (key)".to_string(),
        ));
    }
    let unpriced = spec
        .budget
        .as_ref()
        .map(|budget| budget.unpriced_models)
        .unwrap_or_default()
        == UnpricedModels::Refuse;
    let priced = spec
        .model
        .prices
        .get(&transcription.model)
        .is_some_and(|price| price.per_audio_minute.is_some());
    if unpriced && !priced {
        return Err(ValidateError::InvalidSetting {
            field: "spec.model.prices".to_string(),
            message: format!(
                "the transcription model {:?} (spec.media.transcription.model) has no \
                 perAudioMinute price there, so no budget could count its calls; add it (a \
                 free local server: 0) or set spec.budget.unpricedModels: allow",
                transcription.model
            ),
        });
    }
    Ok(())
}
