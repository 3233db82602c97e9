//! `spec.media.speech` as the agent sees it: defaults filled in, the speech key only as
//! the name of the agent container's variable. Pure. (`transcription` renders
//! `spec.media.transcription`.)

use saint_config::{
    MediaConfig, SpeechConfig,
    media::{
        DEFAULT_SPEECH_MAX_AUDIO_BYTES, DEFAULT_SPEECH_MAX_CHARACTERS,
        DEFAULT_SPEECH_TIMEOUT_SECONDS, SPEECH_API_KEY_ENV,
    },
};

use super::ValidateError;
use crate::crd::{SecretKeyReference, media::MediaSpec};

/// The agent's `media` and the speech key's Secret, if any.
pub(super) fn render_media(
    spec: Option<&MediaSpec>,
) -> Result<(MediaConfig, Option<SecretKeyReference>), ValidateError> {
    let Some(speech) = spec.and_then(|media| media.speech.as_ref()) else {
        return Ok((MediaConfig::default(), None));
    };
    if speech.price_per_million_characters.is_some() {
        return Err(ValidateError::InvalidSetting {
            field: "spec.media.speech.pricePerMillionCharacters".to_string(),
            message: "moved: price speech in spec.model.prices.<media.speech.model>.\
                      perMillionCharacters (the local engine under espeak-ng)"
                .to_string(),
        });
    }
    if let Some(why) = speech
        .base_url
        .as_deref()
        .and_then(crate::saintbot_controller::build::network_policy::refused_endpoint)
    {
        return Err(ValidateError::InvalidSetting {
            field: "spec.media.speech.baseUrl".to_string(),
            message: format!("bot pods never reach {why}"),
        });
    }
    let config = SpeechConfig {
        engine: speech.engine,
        base_url: speech.base_url.clone(),
        model: speech.model.clone(),
        voice: speech.voice.clone(),
        api_key_env: speech
            .api_key_secret_ref
            .as_ref()
            .map(|_| SPEECH_API_KEY_ENV.to_string()),
        max_characters: speech
            .max_characters
            .unwrap_or(DEFAULT_SPEECH_MAX_CHARACTERS),
        max_audio_bytes: speech
            .max_audio_bytes
            .unwrap_or(DEFAULT_SPEECH_MAX_AUDIO_BYTES),
        timeout_seconds: speech
            .timeout_seconds
            .unwrap_or(DEFAULT_SPEECH_TIMEOUT_SECONDS),
    };
    // The agent's own checks, with the field named as the SaintBot spells it.
    let media = MediaConfig {
        speech: Some(config),
        ..MediaConfig::default()
    };
    saint_config::media::check(&media).map_err(|(field, message)| {
        ValidateError::InvalidSetting {
            field: format!("spec.{field}"),
            message,
        }
    })?;
    Ok((media, speech.api_key_secret_ref.clone()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn render(
        speech: serde_json::Value,
    ) -> Result<(MediaConfig, Option<SecretKeyReference>), ValidateError> {
        let spec: MediaSpec = serde_json::from_value(json!({"speech": speech})).unwrap();
        render_media(Some(&spec))
    }

    #[test]
    fn an_endpoint_is_rendered_with_its_key_as_an_env_name_and_defaults_filled_in() {
        let (media, key) = render(json!({
            "engine": "openai", "baseUrl": "https://speech.acme-ana.example", "model": "tts-1",
            "voice": "nova", "apiKeySecretRef": {"name": "acme-ana-speech", "key": "key"},
        }))
        .unwrap();
        assert_eq!(
            serde_json::to_value(&media).unwrap(),
            json!({"speech": {"engine": "openai", "baseUrl": "https://speech.acme-ana.example",
                "model": "tts-1", "voice": "nova", "apiKeyEnv": "SAINT_SPEECH_API_KEY",
                "maxCharacters": 1000, "maxAudioBytes": 8_388_608, "timeoutSeconds": 60}})
        );
        assert_eq!(key.unwrap().name, "acme-ana-speech");
    }

    #[test]
    fn the_old_place_of_the_price_is_refused_by_name() {
        let error = render(json!({"engine": "local", "pricePerMillionCharacters": 15.0}))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("spec.media.speech.pricePerMillionCharacters")
                && error.contains("perMillionCharacters"),
            "{error}"
        );
    }

    #[test]
    fn refusals_name_the_field_as_the_saintbot_spells_it() {
        let error =
            render(json!({"engine": "openai", "baseUrl": "https://speech.acme-ana.example"}))
                .unwrap_err()
                .to_string();
        assert!(error.contains("spec.media.speech.model"), "{error}");
        let error = render(json!({"engine": "local", "model": "tts-1"}))
            .unwrap_err()
            .to_string();
        assert!(error.contains("spec.media.speech.model"), "{error}");
        let error =
            render(json!({"engine": "openai", "baseUrl": "http://169.254.169.254", "model": "m"}))
                .unwrap_err()
                .to_string();
        assert!(error.contains("spec.media.speech.baseUrl"), "{error}");
    }

    #[test]
    fn no_speech_is_no_media() {
        assert_eq!(render_media(None).unwrap(), (MediaConfig::default(), None));
    }
}
