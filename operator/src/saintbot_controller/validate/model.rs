//! The model and web tools as the agent sees them: defaults filled in, and API keys only
//! as the names of the agent container's environment variables. Pure.

use saint_config::{ModelConfig, ModelPrice, WebConfig, WebSearchConfig};

use super::{
    MODEL_API_KEY_ENV, WEB_SEARCH_API_KEY_ENV,
    defaults::{DEFAULT_BRAVE_SEARCH_URL, DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_OUTPUT_TOKENS},
};
use crate::crd::saintbot::{ModelSpec, WebSpec};

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
        prices: spec
            .prices
            .iter()
            .map(|(model, price)| {
                (
                    model.clone(),
                    ModelPrice {
                        input_per_mtok: price.input_per_mtok,
                        output_per_mtok: price.output_per_mtok,
                    },
                )
            })
            .collect(),
    }
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
