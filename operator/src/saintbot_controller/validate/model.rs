//! The model and web tools as the agent sees them: defaults filled in, and API keys only
//! as the names of the agent container's environment variables. Pure.

use saint_config::{
    FailoverConfig, ModelConfig, ModelFallback, ModelPrice, WebConfig, WebSearchConfig,
};

use super::{
    MODEL_API_KEY_ENV, WEB_SEARCH_API_KEY_ENV,
    defaults::{DEFAULT_BRAVE_SEARCH_URL, DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_OUTPUT_TOKENS},
};
use crate::crd::{
    SecretKeyReference,
    saintbot::{ModelFallbackSpec, ModelSpec, WebSpec},
};

pub(super) fn render_model(spec: &ModelSpec) -> ModelConfig {
    ModelConfig {
        provider: spec.provider,
        name: spec.name.clone(),
        base_url: spec
            .base_url
            .clone()
            .unwrap_or_else(|| spec.provider.default_base_url().to_string()),
        api_key_env: spec
            .api_key_secret_ref
            .as_ref()
            .map(|_| MODEL_API_KEY_ENV.to_string()),
        context_window: spec.context_window.unwrap_or(DEFAULT_CONTEXT_WINDOW),
        max_output_tokens: spec.max_output_tokens.unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS),
        additional_api_key_envs: (1..=spec.additional_api_key_secret_refs.len())
            .map(|key| saint_config::model_api_key_env(0, key))
            .collect(),
        fallbacks: spec
            .fallbacks
            .iter()
            .enumerate()
            .map(|(index, fallback)| render_fallback(index + 1, fallback))
            .collect(),
        failover: spec
            .failover
            .as_ref()
            .map(|failover| FailoverConfig {
                deadline_seconds: failover
                    .deadline_seconds
                    .unwrap_or(saint_config::DEFAULT_FAILOVER_DEADLINE_SECONDS),
                cool_down_seconds: failover
                    .cool_down_seconds
                    .unwrap_or(saint_config::DEFAULT_COOL_DOWN_SECONDS),
            })
            .unwrap_or_default(),
        prices: spec
            .prices
            .iter()
            .map(|(model, price)| {
                (
                    model.clone(),
                    ModelPrice {
                        input_per_mtok: price.input_per_mtok,
                        output_per_mtok: price.output_per_mtok,
                        per_audio_minute: price.per_audio_minute,
                        per_million_characters: price.per_million_characters,
                    },
                )
            })
            .collect(),
    }
}

/// Chain entry `entry` (1 for the first fallback) with its keys' variable names.
fn render_fallback(entry: usize, spec: &ModelFallbackSpec) -> ModelFallback {
    ModelFallback {
        provider: spec.provider,
        name: spec.name.clone(),
        base_url: spec
            .base_url
            .clone()
            .unwrap_or_else(|| spec.provider.default_base_url().to_string()),
        api_key_env: spec
            .api_key_secret_ref
            .as_ref()
            .map(|_| saint_config::model_api_key_env(entry, 0)),
        additional_api_key_envs: (1..=spec.additional_api_key_secret_refs.len())
            .map(|key| saint_config::model_api_key_env(entry, key))
            .collect(),
    }
}

/// The model keys besides the primary's first, as (agent env var, Secret key) in chain
/// order: the names [`render_model`] gives the agent.
pub(super) fn model_key_secrets(spec: &ModelSpec) -> Vec<(String, SecretKeyReference)> {
    let mut secrets: Vec<(String, SecretKeyReference)> = spec
        .additional_api_key_secret_refs
        .iter()
        .enumerate()
        .map(|(index, secret)| {
            (
                saint_config::model_api_key_env(0, index + 1),
                secret.clone(),
            )
        })
        .collect();
    for (index, fallback) in spec.fallbacks.iter().enumerate() {
        let entry = index + 1;
        let keys = fallback
            .api_key_secret_ref
            .iter()
            .chain(&fallback.additional_api_key_secret_refs);
        for (key, secret) in keys.enumerate() {
            secrets.push((saint_config::model_api_key_env(entry, key), secret.clone()));
        }
    }
    secrets
}

pub(super) fn render_web(spec: &WebSpec) -> WebConfig {
    WebConfig {
        url_blocklist: spec.url_blocklist.clone(),
        search: spec
            .search_api_key_secret_ref
            .as_ref()
            .map(|_| WebSearchConfig {
                base_url: DEFAULT_BRAVE_SEARCH_URL.to_string(),
                api_key_env: WEB_SEARCH_API_KEY_ENV.to_string(),
            }),
    }
}
