//! Which model endpoint to call and with which key: the config's `model` section plus the
//! environment, resolved once per endpoint and cached. The key is read from the
//! environment variable the config names and lives only inside the client.

use std::sync::{Arc, Mutex};

use saint_config::{ModelConfig, ModelProvider};
use saint_llm::{ClientOptions, Endpoint, LlmClient};

/// Looks up an environment variable (injected so tests need not mutate the process env).
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The process environment.
pub fn process_env() -> EnvLookup {
    Arc::new(|name| std::env::var(name).ok().filter(|value| !value.is_empty()))
}

/// Why no model can be called.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelSetupError {
    #[error(
        "failed: no model endpoint configured (set model.baseUrl in the config or SAINT_MODEL_BASE_URL)"
    )]
    NoEndpoint,
    #[error(
        "failed: the model API key is not configured (environment variable {0} is unset or empty)"
    )]
    MissingKey(String),
    #[error("failed to build the model client: {0}")]
    Client(String),
    #[error(
        "failed: model {0:?} has no price in the bot's model.prices, so no budget could count its calls; add its price there (a free local model: inputPerMtok 0, outputPerMtok 0) or set budget.unpricedModels: allow"
    )]
    Unpriced(String),
}

/// Resolves the endpoint for a model config.
pub fn endpoint_for(
    config: &ModelConfig,
    base_url_override: Option<&str>,
    env: &EnvLookup,
) -> Result<Endpoint, ModelSetupError> {
    let base_url = base_url_override
        .map(str::to_string)
        .or_else(|| env("SAINT_MODEL_BASE_URL"))
        .unwrap_or_else(|| config.base_url.clone());
    if base_url.trim().is_empty() {
        return Err(ModelSetupError::NoEndpoint);
    }
    let api_key = match &config.api_key_env {
        Some(name) => Some(env(name).ok_or_else(|| ModelSetupError::MissingKey(name.clone()))?),
        None => None,
    };
    Ok(Endpoint {
        provider: config.provider,
        base_url,
        api_key,
    })
}

#[derive(PartialEq)]
struct CacheKey {
    provider: ModelProvider,
    base_url: String,
    api_key_env: Option<String>,
}

/// Builds and caches the client for the config in force.
pub struct ModelAccess {
    base_url_override: Option<String>,
    env: EnvLookup,
    options: ClientOptions,
    cached: Mutex<Option<(CacheKey, LlmClient)>>,
}

impl ModelAccess {
    /// A new resolver.
    pub fn new(base_url_override: Option<String>, env: EnvLookup, options: ClientOptions) -> Self {
        Self {
            base_url_override,
            env,
            options,
            cached: Mutex::new(None),
        }
    }

    /// The client for `config`, reusing the cached one while the endpoint is unchanged.
    pub fn client(&self, config: &ModelConfig) -> Result<LlmClient, ModelSetupError> {
        let key = CacheKey {
            provider: config.provider,
            base_url: config.base_url.clone(),
            api_key_env: config.api_key_env.clone(),
        };
        let mut cached = self.cached.lock().expect("model cache lock");
        if let Some((existing, client)) = cached.as_ref()
            && *existing == key
        {
            return Ok(client.clone());
        }
        let endpoint = endpoint_for(config, self.base_url_override.as_deref(), &self.env)?;
        let client = LlmClient::new(endpoint, self.options.clone())
            .map_err(|error| ModelSetupError::Client(error.to_string()))?;
        *cached = Some((key, client.clone()));
        Ok(client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> ModelConfig {
        saint_config::BotConfig::from_json(include_str!(
            "../../config/tests/fixtures/acme-bot-config.json"
        ))
        .unwrap()
        .model
    }

    #[test]
    fn missing_key_names_the_variable() {
        let env: EnvLookup = Arc::new(|_| None);
        assert_eq!(
            endpoint_for(&model(), None, &env).unwrap_err(),
            ModelSetupError::MissingKey("SAINT_MODEL_API_KEY".into())
        );
    }

    #[test]
    fn environment_base_url_overrides_the_config() {
        let env: EnvLookup = Arc::new(|name| match name {
            "SAINT_MODEL_BASE_URL" => Some("http://127.0.0.1:9".into()),
            "SAINT_MODEL_API_KEY" => Some("k".into()),
            _ => None,
        });
        let endpoint = endpoint_for(&model(), None, &env).unwrap();
        assert_eq!(endpoint.base_url, "http://127.0.0.1:9");
        assert_eq!(endpoint.api_key.as_deref(), Some("k"));
    }

    #[test]
    fn empty_base_url_is_refused() {
        let mut config = model();
        config.base_url = " ".into();
        config.api_key_env = None;
        let env: EnvLookup = Arc::new(|_| None);
        assert_eq!(
            endpoint_for(&config, None, &env).unwrap_err(),
            ModelSetupError::NoEndpoint
        );
    }
}
