//! `spec.media.transcription` as the agent sees it: defaults filled in, the API key
//! only as the name of the agent container's environment variable. Pure.

use saint_config::{
    TRANSCRIPTION_API_KEY_ENV, TranscriptionConfig, UnpricedModels,
    media::{
        DEFAULT_TRANSCRIPTION_MAX_BYTES, DEFAULT_TRANSCRIPTION_MAX_SECONDS,
        DEFAULT_TRANSCRIPTION_TIMEOUT_SECONDS,
    },
};

use super::ValidateError;
use crate::crd::{media::TranscriptionSpec, saintbot::SaintBotSpec};

fn invalid(field: &str, message: String) -> ValidateError {
    ValidateError::InvalidSetting {
        field: format!("spec.media.transcription.{field}"),
        message,
    }
}

/// The rendered `media.transcription`, refusing what the CRD's rules refuse (a server
/// without them still gets a clear error naming the field) and a transcription model no
/// budget could count.
pub(super) fn render_transcription(
    spec: &SaintBotSpec,
) -> Result<Option<TranscriptionConfig>, ValidateError> {
    let Some(transcription) = spec
        .media
        .as_ref()
        .and_then(|media| media.transcription.as_ref())
    else {
        return Ok(None);
    };
    check_transcription(spec, transcription)?;
    Ok(Some(TranscriptionConfig {
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
    }))
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

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::{Value, json};

    use super::*;
    use crate::{
        crd::{Role, SaintBot, SecretKeyReference},
        saintbot_controller::{
            build::{config_map::rendered_config_json, workload::deployment},
            dereference::Dereferenced,
            validate::validate,
        },
        settings::OperatorSettings,
    };

    fn bot(media: Value, prices: Value) -> SaintBot {
        serde_json::from_value(json!({
            "apiVersion": "saint.work/v1alpha1", "kind": "SaintBot",
            "metadata": {"name": "acme-ana", "namespace": "acme", "uid": "u-1"},
            "spec": {
                "model": {"provider": "anthropic", "name": "m", "prices": prices},
                "defaultRole": "visitor",
                "media": media,
            },
        }))
        .unwrap()
    }

    fn namespace() -> Dereferenced {
        let role: Role = serde_json::from_value(json!({
            "apiVersion": "saint.work/v1alpha1", "kind": "Role",
            "metadata": {"name": "visitor", "namespace": "acme", "uid": "u-2"},
            "spec": {"tools": {"allow": ["read"]}},
        }))
        .unwrap();
        Dereferenced {
            roles: vec![role],
            ..Dereferenced::default()
        }
    }

    fn priced() -> Value {
        json!({"m": {"inputPerMtok": 1.0, "outputPerMtok": 2.0},
               "whisper-1": {"inputPerMtok": 0.0, "outputPerMtok": 0.0, "perAudioMinute": 0.006}})
    }

    fn refused(media: Value, prices: Value) -> String {
        validate(
            &bot(media, prices),
            &namespace(),
            &OperatorSettings::with_tag("0.1.0"),
        )
        .unwrap_err()
        .to_string()
    }

    #[test]
    fn spec_media_transcription_renders_into_the_agent_config_and_its_key_reaches_only_the_agent() {
        let media = json!({"transcription": {
            "baseUrl": "https://stt.acme.example/", "model": "whisper-1",
            "apiKeySecretRef": {"name": "acme-stt", "key": "api-key"},
            "maxSeconds": 120, "timeoutSeconds": 30,
        }});
        let validated = validate(
            &bot(media, priced()),
            &namespace(),
            &OperatorSettings::with_tag("0.1.0"),
        )
        .expect("the bot renders");
        let rendered: Value = serde_json::from_str(&rendered_config_json(&validated)).unwrap();
        assert_eq!(
            rendered["media"],
            json!({"transcription": {
                "baseUrl": "https://stt.acme.example", "model": "whisper-1",
                "apiKeyEnv": "SAINT_TRANSCRIPTION_API_KEY",
                "maxSeconds": 120, "maxBytes": 16777216, "timeoutSeconds": 30,
            }})
        );
        assert_eq!(
            rendered["model"]["prices"]["whisper-1"],
            json!({"inputPerMtok": 0.0, "outputPerMtok": 0.0, "perAudioMinute": 0.006})
        );
        assert_eq!(
            validated.transcription_api_key,
            Some(SecretKeyReference {
                name: "acme-stt".into(),
                key: "api-key".into()
            })
        );
        let pod = serde_json::to_value(deployment(&validated)).unwrap();
        let containers = pod["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        let holders: Vec<(&str, &Value)> = containers
            .iter()
            .flat_map(|container| {
                container["env"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|variable| variable["name"] == TRANSCRIPTION_API_KEY_ENV)
                    .map(move |variable| (container["name"].as_str().unwrap(), variable))
            })
            .collect();
        assert_eq!(
            holders,
            vec![(
                "agent",
                &json!({"name": "SAINT_TRANSCRIPTION_API_KEY",
                        "valueFrom": {"secretKeyRef": {"name": "acme-stt", "key": "api-key"}}})
            )]
        );
    }

    #[test]
    fn without_spec_media_nothing_is_rendered() {
        let validated = validate(
            &bot(Value::Null, priced()),
            &namespace(),
            &OperatorSettings::with_tag("0.1.0"),
        )
        .unwrap();
        let rendered: Value = serde_json::from_str(&rendered_config_json(&validated)).unwrap();
        assert_eq!(rendered.get("media"), None);
        assert_eq!(validated.transcription_api_key, None);
    }

    #[test]
    fn a_clear_text_or_unpriced_transcription_endpoint_is_refused_naming_the_field() {
        assert_eq!(
            refused(
                json!({"transcription": {"baseUrl": "http://stt.acme.example", "model": "whisper-1"}}),
                priced()
            ),
            "failed to render spec.media.transcription.baseUrl: is plain http://: people's voice \
             notes and the API key would cross the network in clear text; use https://, or set \
             spec.media.transcription.allowInsecure to say why clear text is acceptable here"
        );
        // With a reason given, a local server in clear text is fine.
        validate(
            &bot(
                json!({"transcription": {"baseUrl": "http://10.0.0.7:9000", "model": "whisper-1",
                    "allowInsecure": "whisper server on the node, no key"}}),
                priced(),
            ),
            &namespace(),
            &OperatorSettings::with_tag("0.1.0"),
        )
        .expect("allowed with a reason");
        assert_eq!(
            refused(
                json!({"transcription": {"baseUrl": "stt.acme.example", "model": "whisper-1"}}),
                priced()
            ),
            "failed to render spec.media.transcription.baseUrl: \"stt.acme.example\" must be an \
             https:// URL with a host"
        );
        assert_eq!(
            refused(
                json!({"transcription": {"baseUrl": "https://stt.acme.example", "model": "whisper-1"}}),
                json!({"m": {"inputPerMtok": 1.0, "outputPerMtok": 2.0}})
            ),
            "failed to render spec.model.prices: the transcription model \"whisper-1\" \
             (spec.media.transcription.model) has no perAudioMinute price there, so no budget \
             could count its calls; add it (a free local server: 0) or set \
             spec.budget.unpricedModels: allow"
        );
    }
}
