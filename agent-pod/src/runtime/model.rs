//! Which model endpoints to call and with which keys: the config's `model` section (the
//! primary and its fallbacks) plus the environment, resolved into a [`ModelChain`] once
//! per config and cached with each entry's health and each key's rate limit. Keys are
//! read from the environment variables the config names and live only inside clients.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use parking_lot::Mutex;
use saint_config::{FailoverConfig, ModelConfig, ModelFallback, ModelProvider};
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

/// What a cached chain was built from: a change rebuilds it (and forgets its health).
#[derive(PartialEq)]
struct ChainKey {
    provider: ModelProvider,
    base_url: String,
    api_key_env: Option<String>,
    additional_api_key_envs: Vec<String>,
    fallbacks: Vec<ModelFallback>,
    failover: FailoverConfig,
}

impl ChainKey {
    fn of(config: &ModelConfig) -> Self {
        Self {
            provider: config.provider,
            base_url: config.base_url.clone(),
            api_key_env: config.api_key_env.clone(),
            additional_api_key_envs: config.additional_api_key_envs.clone(),
            fallbacks: config.fallbacks.clone(),
            failover: config.failover.clone(),
        }
    }
}

/// "Now" for cool-downs and rate-limited keys (injected so tests move it).
pub type Now = Arc<dyn Fn() -> Instant + Send + Sync>;

/// Builds and caches the failover chain for the config in force; the chain keeps each
/// entry's health and each key's rate limit across turns.
pub struct ModelAccess {
    base_url_override: Option<String>,
    env: EnvLookup,
    options: ClientOptions,
    now: Now,
    cached: Mutex<Option<(ChainKey, Arc<ModelChain>)>>,
}

impl ModelAccess {
    /// A new resolver.
    pub fn new(base_url_override: Option<String>, env: EnvLookup, options: ClientOptions) -> Self {
        Self {
            base_url_override,
            env,
            options,
            now: Arc::new(Instant::now),
            cached: Mutex::new(None),
        }
    }

    /// How the resolver reads the environment.
    pub(crate) fn env(&self) -> &EnvLookup {
        &self.env
    }

    /// The same resolver reading "now" from `now` for cool-downs and key rests.
    pub fn with_clock(mut self, now: Now) -> Self {
        self.now = now;
        self
    }

    /// The chain for `config`, reusing the cached one while its endpoints are unchanged.
    pub fn chain(&self, config: &ModelConfig) -> Result<Arc<ModelChain>, ModelSetupError> {
        let key = ChainKey::of(config);
        let mut cached = self.cached.lock();
        if let Some((existing, chain)) = cached.as_ref()
            && *existing == key
        {
            return Ok(chain.clone());
        }
        let chain = Arc::new(ModelChain::build(
            config,
            self.base_url_override.as_deref(),
            &self.env,
            &self.options,
            self.now.clone(),
        )?);
        *cached = Some((key, chain.clone()));
        Ok(chain)
    }

    /// `/readyz` lines for chain entries that are cooling down (none before the first
    /// call), refreshing the per-entry health gauge as they are read.
    pub fn health_lines(&self, metrics: &crate::metering::Metrics) -> Vec<String> {
        let chain = self.cached.lock().as_ref().map(|(_, chain)| chain.clone());
        chain.map_or_else(Vec::new, |chain| chain.health_lines(metrics))
    }
}

/// The primary and its fallbacks, in the order they are tried, with their health.
pub struct ModelChain {
    pub(crate) entries: Vec<ChainEntry>,
    /// Keys the environment does not hold, as `/readyz` lines.
    left_out: Vec<String>,
    pub(crate) failover: FailoverConfig,
    pub(crate) options: ClientOptions,
    now: Now,
}

/// One endpoint of the chain.
pub struct ChainEntry {
    /// `primary`, `fallback-1`, …: how metrics, logs and `/readyz` name it.
    pub label: String,
    /// The model called here (the primary's is replaced by a role's override).
    pub model: String,
    keys: Vec<LlmClient>,
    state: Mutex<EntryState>,
}

#[derive(Default)]
struct EntryState {
    /// Skipped until then, and why (a refused request or key).
    cooling: Option<(Instant, String)>,
    /// Per key: resting until then after a rate limit, and when it was last limited.
    limited_until: Vec<Option<Instant>>,
    limited_at: Vec<Option<Instant>>,
    /// Where round-robin continues among keys never limited.
    next_key: usize,
}

impl ModelChain {
    fn build(
        config: &ModelConfig,
        base_url_override: Option<&str>,
        env: &EnvLookup,
        options: &ClientOptions,
        now: Now,
    ) -> Result<Self, ModelSetupError> {
        let client = |endpoint: Endpoint| {
            LlmClient::new(endpoint, options.clone())
                .map_err(|error| ModelSetupError::Client(error.to_string()))
        };
        // Only the primary's first key is required: a missing further key or fallback
        // key leaves that key out (and `/readyz` says so) rather than the whole bot.
        let mut left_out = Vec::new();
        let mut key = |label: &str, name: &String| {
            let value = env(name);
            if value.is_none() {
                left_out.push(format!(
                    "model {label}: a key is left out: environment variable {name} is unset or empty"
                ));
            }
            value
        };
        let primary = endpoint_for(config, base_url_override, env)?;
        let mut primary_keys = vec![client(primary.clone())?];
        for name in &config.additional_api_key_envs {
            if let Some(api_key) = key("primary", name) {
                primary_keys.push(client(Endpoint {
                    api_key: Some(api_key),
                    ..primary.clone()
                })?);
            }
        }
        let mut entries = vec![ChainEntry::new(
            "primary".into(),
            config.name.clone(),
            primary_keys,
        )];
        for (index, fallback) in config.fallbacks.iter().enumerate() {
            let label = format!("fallback-{}", index + 1);
            let names: Vec<&String> = fallback
                .api_key_env
                .iter()
                .chain(&fallback.additional_api_key_envs)
                .collect();
            let mut keys = Vec::new();
            for name in &names {
                if let Some(api_key) = key(&label, name) {
                    keys.push(client(Endpoint {
                        provider: fallback.provider,
                        base_url: fallback.base_url.clone(),
                        api_key: Some(api_key),
                    })?);
                }
            }
            if keys.is_empty() && !names.is_empty() {
                // Every key of this fallback is missing: it cannot be called.
                continue;
            }
            if keys.is_empty() {
                keys.push(client(Endpoint {
                    provider: fallback.provider,
                    base_url: fallback.base_url.clone(),
                    api_key: None,
                })?);
            }
            entries.push(ChainEntry::new(label, fallback.name.clone(), keys));
        }
        Ok(Self {
            entries,
            left_out,
            failover: config.failover.clone(),
            options: options.clone(),
            now,
        })
    }

    /// Now, by the chain's clock.
    pub fn now(&self) -> Instant {
        (self.now)()
    }

    /// The entries to try, in order: those not cooling down; when every entry is
    /// cooling down, all of them (trying beats certain failure).
    pub fn order(&self) -> Vec<usize> {
        let now = self.now();
        let usable: Vec<usize> = (0..self.entries.len())
            .filter(|index| !self.entries[*index].cooling_at(now))
            .collect();
        if usable.is_empty() {
            (0..self.entries.len()).collect()
        } else {
            usable
        }
    }

    /// `/readyz` lines for entries cooling down; sets each entry's health gauge.
    pub fn health_lines(&self, metrics: &crate::metering::Metrics) -> Vec<String> {
        let now = self.now();
        let mut lines = self.left_out.clone();
        for entry in &self.entries {
            let cooling = entry
                .state()
                .cooling
                .clone()
                .filter(|(until, _)| *until > now);
            metrics.llm_entry_health(&entry.label, &entry.model, cooling.is_none());
            if let Some((until, reason)) = cooling {
                lines.push(format!(
                    "model {} ({:?} at {}) is skipped for {}s more after it refused a call: {reason}",
                    entry.label,
                    entry.model,
                    entry.keys[0].endpoint().base_url,
                    until.saturating_duration_since(now).as_secs()
                ));
            }
        }
        lines
    }
}

impl ChainEntry {
    fn new(label: String, model: String, keys: Vec<LlmClient>) -> Self {
        let count = keys.len();
        Self {
            label,
            model,
            keys,
            state: Mutex::new(EntryState {
                limited_until: vec![None; count],
                limited_at: vec![None; count],
                ..EntryState::default()
            }),
        }
    }

    fn state(&self) -> parking_lot::MutexGuard<'_, EntryState> {
        self.state.lock()
    }

    fn cooling_at(&self, now: Instant) -> bool {
        self.state()
            .cooling
            .as_ref()
            .is_some_and(|(until, _)| *until > now)
    }

    /// The client of key `index`.
    pub fn client(&self, index: usize) -> &LlmClient {
        &self.keys[index]
    }

    /// The key to call with next and how long it must rest first (zero when one is
    /// free): the least recently rate-limited free key, round-robin among equals.
    pub fn pick_key(&self, now: Instant) -> (usize, Duration) {
        let mut state = self.state();
        let count = self.keys.len();
        let start = state.next_key % count;
        let free = (0..count)
            .map(|offset| (start + offset) % count)
            .filter(|index| state.limited_until[*index].is_none_or(|until| until <= now))
            .min_by_key(|index| state.limited_at[*index]);
        if let Some(index) = free {
            state.next_key = index + 1;
            return (index, Duration::ZERO);
        }
        let (index, until) = state
            .limited_until
            .iter()
            .enumerate()
            .filter_map(|(index, until)| until.map(|until| (index, until)))
            .min_by_key(|(_, until)| *until)
            .expect("every key is limited");
        (index, until.saturating_duration_since(now))
    }

    /// Key `index` was rate-limited at `now`: it rests until `until`.
    pub fn limited(&self, index: usize, now: Instant, until: Instant) {
        let mut state = self.state();
        state.limited_at[index] = Some(now);
        state.limited_until[index] = Some(until);
    }

    /// The entry refused a call (its request or key): skipped until `until`.
    pub fn cool_down(&self, until: Instant, reason: String) {
        self.state().cooling = Some((until, reason));
    }

    /// The entry answered: healthy again.
    pub fn answered(&self) {
        self.state().cooling = None;
    }

    /// Whether the entry is cooling down at `now`.
    pub fn is_cooling(&self, now: Instant) -> bool {
        self.cooling_at(now)
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
