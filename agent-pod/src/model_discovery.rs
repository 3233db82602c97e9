//! Which model a bot started by `saint-agent up` talks to, found without editing its
//! config: the environment first, then a local Ollama, else none — and then the bot
//! still starts, and the log and the chat page say exactly what to set.
//!
//! The result is an overlay on the config's `model` section, applied on every (re)load,
//! so the bot file on disk stays what the user wrote.

use std::time::Duration;

use saint_config::{BotConfig, ModelConfig, ModelPrice, ModelProvider};
use serde::Deserialize;

use crate::runtime::EnvLookup;

/// Variable naming the model endpoint's base URL (`https://api.anthropic.com`,
/// `http://127.0.0.1:11434`).
pub const BASE_URL_ENV: &str = "SAINT_MODEL_BASE_URL";
/// Variable naming the wire format: `anthropic` or `openai`.
pub const PROVIDER_ENV: &str = "SAINT_MODEL_PROVIDER";
/// Variable naming the model every role uses.
pub const NAME_ENV: &str = "SAINT_MODEL_NAME";
/// Variable holding the API key.
pub const API_KEY_ENV: &str = "SAINT_MODEL_API_KEY";
/// Variable overriding where a local Ollama is looked for.
pub const OLLAMA_URL_ENV: &str = "SAINT_OLLAMA_URL";
/// Ollama's default address.
pub const OLLAMA_DEFAULT_URL: &str = "http://127.0.0.1:11434";

/// What to set when no model was found: the one message the log and the page show.
pub const NO_MODEL_ADVICE: &str = "no model endpoint: set SAINT_MODEL_API_KEY to an Anthropic \
     API key, or SAINT_MODEL_BASE_URL (with SAINT_MODEL_NAME, and SAINT_MODEL_API_KEY if it \
     needs one) to any OpenAI-compatible server, or start Ollama on 127.0.0.1:11434 with a \
     model pulled (`ollama pull llama3.2`), then start the bot again";

/// The model section the bot runs with, replacing the config's.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelOverlay {
    pub provider: ModelProvider,
    pub base_url: String,
    /// The model every role uses; `None` keeps the config's names (the roles' too).
    pub name: Option<String>,
    /// Variable holding the key; `None` for an endpoint that needs none.
    pub api_key_env: Option<String>,
    /// The endpoint is self-hosted (an Ollama, a server on loopback): the models the bot
    /// uses that its file does not price are declared free, so budgets apply to them and
    /// count nothing, instead of every call being refused for want of a price.
    pub self_hosted: bool,
}

impl ModelOverlay {
    /// Applies the overlay. A forced model name replaces the roles' own: they name
    /// models of the config's provider, which another endpoint does not serve.
    pub fn apply(&self, config: &mut BotConfig) {
        config.model.provider = self.provider;
        config.model.base_url = self.base_url.clone();
        config.model.api_key_env = self.api_key_env.clone();
        // The chain's other keys and endpoints belong to the endpoint replaced here.
        config.model.additional_api_key_envs.clear();
        config.model.fallbacks.clear();
        if let Some(name) = &self.name {
            config.model.name = name.clone();
            for role in config.roles.values_mut() {
                role.model = None;
            }
        }
        if self.self_hosted {
            // A price the bot file gives is kept: it may count a local model on purpose.
            let unpriced: Vec<String> = config
                .unpriced_models()
                .into_iter()
                .map(str::to_string)
                .collect();
            for model in unpriced {
                config.model.prices.insert(model, FREE);
            }
        }
    }
}

/// The price a self-hosted model is declared at.
const FREE: ModelPrice = ModelPrice {
    input_per_mtok: 0.0,
    output_per_mtok: 0.0,
    per_audio_minute: None,
    per_million_characters: None,
};

/// Where the model comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelChoice {
    /// The config's own model section, as written (its key is set).
    Config,
    /// An overlay from the environment or a local Ollama.
    Overlay(ModelOverlay),
    /// Nothing usable; the advice says what to set.
    Missing(String),
}

/// The choice and one line describing it, for the log and the page.
#[derive(Clone, Debug, PartialEq)]
pub struct Discovery {
    pub choice: ModelChoice,
    pub summary: String,
}

impl Discovery {
    /// Whether a model endpoint was found.
    pub fn found(&self) -> bool {
        !matches!(self.choice, ModelChoice::Missing(_))
    }

    /// What budgets do with the model found, for the log and the page: a self-hosted
    /// model the bot file does not price is declared free; any other model without a
    /// price is refused (or allowed, as `budget.unpricedModels` says) until the bot file
    /// prices it. `None` when every model in use has a price.
    pub fn pricing_notice(&self, config: &BotConfig) -> Option<String> {
        let mut config = config.clone();
        let overlay = match &self.choice {
            ModelChoice::Missing(_) => return None,
            ModelChoice::Config => None,
            ModelChoice::Overlay(overlay) => Some(overlay),
        };
        if let Some(overlay) = overlay {
            ModelOverlay {
                self_hosted: false,
                ..overlay.clone()
            }
            .apply(&mut config);
        }
        match overlay {
            Some(overlay) if overlay.self_hosted => {
                let unpriced = config.unpriced_models();
                (!unpriced.is_empty()).then(|| {
                    format!(
                        "budgets: {} runs on your own machine, so it is declared free (price 0): \
                         budgets count nothing for it and never stop it; give it a price in \
                         model.prices to count it",
                        unpriced.join(", ")
                    )
                })
            }
            _ => config
                .unpriced_models_warning()
                .map(|warning| format!("budgets: {warning}")),
        }
    }
}

/// Why the environment names a model that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("{PROVIDER_ENV}={0:?} is not a provider: use `anthropic` or `openai`")]
    Provider(String),
}

/// Finds the model: `SAINT_MODEL_BASE_URL` (+ provider, name, key) from the environment;
/// else the config's endpoint when its key variable is set; else a local Ollama that
/// answers with at least one model; else [`ModelChoice::Missing`].
pub async fn discover(
    config: &ModelConfig,
    env: &EnvLookup,
    http: &reqwest::Client,
) -> Result<Discovery, DiscoveryError> {
    if let Some(base_url) = env(BASE_URL_ENV) {
        return from_environment(config, env, http, base_url).await;
    }
    if let Some(name) = &config.api_key_env
        && env(name).is_some()
    {
        return Ok(Discovery {
            summary: format!(
                "model: {} {} at {} (key from {name})",
                provider_label(config.provider),
                config.name,
                config.base_url
            ),
            choice: ModelChoice::Config,
        });
    }
    let ollama = env(OLLAMA_URL_ENV).unwrap_or_else(|| OLLAMA_DEFAULT_URL.to_string());
    match ollama_models(http, &ollama).await {
        Some(models) if !models.is_empty() => {
            let name = env(NAME_ENV)
                .filter(|name| models.contains(name))
                .unwrap_or_else(|| models[0].clone());
            Ok(Discovery {
                summary: format!(
                    "model: {name} from the local Ollama at {ollama} (of {}; {NAME_ENV} picks another)",
                    models.join(", ")
                ),
                choice: ModelChoice::Overlay(ModelOverlay {
                    provider: ModelProvider::Openai,
                    base_url: ollama,
                    name: Some(name),
                    api_key_env: None,
                    self_hosted: true,
                }),
            })
        }
        Some(_) => Ok(missing(format!(
            "Ollama answers at {ollama} but has no model: run `ollama pull llama3.2` (or set \
             SAINT_MODEL_API_KEY or SAINT_MODEL_BASE_URL), then start the bot again"
        ))),
        None => Ok(missing(NO_MODEL_ADVICE.to_string())),
    }
}

fn missing(advice: String) -> Discovery {
    Discovery {
        summary: advice.clone(),
        choice: ModelChoice::Missing(advice),
    }
}

/// The server's root when `base_url` ends in the API version (`…/v1`, as most
/// OpenAI-compatible servers document their address): Saint adds `/v1/…` itself, so
/// kept as given the model list would be asked at `/v1/v1/models`.
fn without_version_suffix(base_url: &str) -> Option<String> {
    let trimmed = base_url.trim_end_matches('/');
    trimmed
        .strip_suffix("/v1")
        .filter(|root| root.contains("://") && !root.ends_with("://") && !root.ends_with('/'))
        .map(str::to_string)
}

async fn from_environment(
    config: &ModelConfig,
    env: &EnvLookup,
    http: &reqwest::Client,
    base_url: String,
) -> Result<Discovery, DiscoveryError> {
    let (base_url, version_note) = match without_version_suffix(&base_url) {
        Some(root) => {
            let note =
                format!("; {BASE_URL_ENV} ended in /v1, which Saint adds itself: using {root}");
            (root, note)
        }
        None => (base_url, String::new()),
    };
    let provider = match env(PROVIDER_ENV) {
        Some(value) => match value.trim().to_ascii_lowercase().as_str() {
            "anthropic" => ModelProvider::Anthropic,
            "openai" => ModelProvider::Openai,
            _ => return Err(DiscoveryError::Provider(value)),
        },
        // Self-hosted servers (Ollama, vLLM, llama.cpp, LM Studio) speak OpenAI's API.
        None if is_anthropic_host(&base_url) => ModelProvider::Anthropic,
        None => ModelProvider::Openai,
    };
    let api_key_env = env(API_KEY_ENV).map(|_| API_KEY_ENV.to_string());
    let name = match env(NAME_ENV) {
        Some(name) => Some(name),
        // Same provider: the config's model names (the roles' too) still apply.
        None if provider == config.provider => None,
        // Another provider does not serve the config's model names: ask the server.
        None => match openai_first_model(http, &base_url, env(API_KEY_ENV)).await {
            Some(name) => Some(name),
            None => {
                return Ok(missing(format!(
                    "{BASE_URL_ENV}={base_url} lists no model: set {NAME_ENV} to the model to use"
                )));
            }
        },
    };
    let key_note = match &api_key_env {
        Some(variable) => format!("key from {variable}"),
        None => "no key".to_string(),
    };
    let assumed = if env(PROVIDER_ENV).is_none() {
        format!(", {PROVIDER_ENV} unset so assumed")
    } else {
        String::new()
    };
    Ok(Discovery {
        summary: format!(
            "model: {} {} at {base_url} ({key_note}; from {BASE_URL_ENV}{assumed}{version_note})",
            provider_label(provider),
            name.as_deref().unwrap_or(&config.name),
        ),
        choice: ModelChoice::Overlay(ModelOverlay {
            self_hosted: is_loopback_host(&base_url),
            provider,
            base_url,
            name,
            api_key_env,
        }),
    })
}

fn provider_label(provider: ModelProvider) -> &'static str {
    match provider {
        ModelProvider::Anthropic => "anthropic",
        ModelProvider::Openai => "openai-compatible",
    }
}

fn is_anthropic_host(base_url: &str) -> bool {
    url_host(base_url)
        .is_some_and(|host| host == "anthropic.com" || host.ends_with(".anthropic.com"))
}

fn url_host(base_url: &str) -> Option<&str> {
    let rest = base_url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit('@').next()?;
    if let Some(bracketed) = host_port.strip_prefix('[') {
        return bracketed.split(']').next();
    }
    Some(host_port.split(':').next().unwrap_or(host_port))
}

/// Whether `base_url` names this machine (`localhost`, `127.0.0.0/8`, `::1`).
fn is_loopback_host(base_url: &str) -> bool {
    url_host(base_url).is_some_and(|host| {
        host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|address| address.is_loopback())
    })
}

const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the model check waits for an answer (a remote API across the world).
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// What a check of the model endpoint found: one line for the log and the page.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ModelCheck {
    /// The bot can expect answers: the address answered, took the key and serves the
    /// model (or keeps no list to check against).
    pub ok: bool,
    /// What was asked of whom and what came back.
    pub message: String,
}

/// Asks the endpoint the bot calls for its models (`GET /v1/models`, served by
/// Anthropic's API and by OpenAI-compatible servers, and free), with the key the bot
/// sends: whether the address answers, takes the key and serves `model`, before the
/// first person writes rather than in their first turn.
pub async fn check_model(
    endpoint: &saint_llm::Endpoint,
    model: &str,
    http: &reqwest::Client,
) -> ModelCheck {
    let root = endpoint.base_url.trim_end_matches('/');
    let root = root.strip_suffix("/v1").unwrap_or(root);
    // Anthropic pages its list (20 by default); ask for all of it.
    let url = match endpoint.provider {
        ModelProvider::Anthropic => format!("{root}/v1/models?limit=1000"),
        ModelProvider::Openai => format!("{root}/v1/models"),
    };
    let shown = format!("{root}/v1/models");
    let mut request = http.get(&url).timeout(CHECK_TIMEOUT);
    request = match (&endpoint.api_key, endpoint.provider) {
        (Some(key), ModelProvider::Anthropic) => request
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01"),
        (Some(key), ModelProvider::Openai) => request.bearer_auth(key),
        (None, _) => request,
    };
    let started = std::time::Instant::now();
    let response = match request.send().await {
        Ok(response) => response,
        Err(error) => {
            return ModelCheck {
                ok: false,
                message: format!(
                    "model check: no answer from {shown}: {}",
                    saint_config::ErrorChain(&error)
                ),
            };
        }
    };
    let elapsed = started.elapsed().as_millis();
    let status = response.status();
    if status.is_success() {
        let listed: Vec<String> = match response.json::<OpenaiModels>().await {
            Ok(models) => models.data.into_iter().map(|model| model.id).collect(),
            Err(_) => Vec::new(),
        };
        return listed_check(&shown, model, elapsed, &listed);
    }
    let body: String = response
        .text()
        .await
        .unwrap_or_default()
        .chars()
        .take(200)
        .collect();
    match status.as_u16() {
        401 | 403 => ModelCheck {
            ok: false,
            message: format!(
                "model check: {shown} refused the key ({status}){}: check the key the bot sends",
                if body.is_empty() {
                    String::new()
                } else {
                    format!(": {body}")
                }
            ),
        },
        // Some servers keep no list; the first turn will tell.
        404 | 405 => ModelCheck {
            ok: true,
            message: format!(
                "model check: {shown} answered in {elapsed} ms but keeps no model list \
                 ({status}), so {model} is not confirmed"
            ),
        },
        _ => ModelCheck {
            ok: false,
            message: format!("model check: {shown} answered {status}: {body}"),
        },
    }
}

/// Whether `model` is among the ids listed (or an alias of one: Anthropic lists
/// `claude-sonnet-4-5-20250929` for `claude-sonnet-4-5`).
fn listed_check(shown: &str, model: &str, elapsed: u128, listed: &[String]) -> ModelCheck {
    let served = listed.iter().any(|id| {
        id == model
            || id
                .strip_prefix(model)
                .is_some_and(|rest| rest.starts_with('-'))
    });
    if listed.is_empty() {
        return ModelCheck {
            ok: true,
            message: format!(
                "model check: {shown} answered in {elapsed} ms but lists no model, so {model} \
                 is not confirmed"
            ),
        };
    }
    if served {
        return ModelCheck {
            ok: true,
            message: format!("model check: {shown} answered in {elapsed} ms and serves {model}"),
        };
    }
    let mut some: Vec<&str> = listed.iter().map(String::as_str).take(8).collect();
    if listed.len() > some.len() {
        some.push("…");
    }
    ModelCheck {
        ok: false,
        message: format!(
            "model check: {shown} answers but does not serve {model} (it lists {}): set \
             {NAME_ENV}, or model.name in the bot file",
            some.join(", ")
        ),
    }
}

#[derive(Deserialize)]
struct OllamaTags {
    #[serde(default)]
    models: Vec<OllamaModel>,
}

#[derive(Deserialize)]
struct OllamaModel {
    name: String,
}

/// The models a local Ollama has pulled (`GET /api/tags`), or `None` when nothing
/// answers there as Ollama.
async fn ollama_models(http: &reqwest::Client, base_url: &str) -> Option<Vec<String>> {
    let url = format!("{}/api/tags", base_url.trim_end_matches('/'));
    let response = http.get(url).timeout(PROBE_TIMEOUT).send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let tags: OllamaTags = response.json().await.ok()?;
    Some(tags.models.into_iter().map(|model| model.name).collect())
}

#[derive(Deserialize)]
struct OpenaiModels {
    #[serde(default)]
    data: Vec<OpenaiModel>,
}

#[derive(Deserialize)]
struct OpenaiModel {
    id: String,
}

/// The first model an OpenAI-compatible server lists (`GET /v1/models`).
async fn openai_first_model(
    http: &reqwest::Client,
    base_url: &str,
    api_key: Option<String>,
) -> Option<String> {
    let url = format!("{}/v1/models", base_url.trim_end_matches('/'));
    let mut request = http.get(url).timeout(PROBE_TIMEOUT);
    if let Some(key) = api_key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let models: OpenaiModels = response.json().await.ok()?;
    models.data.into_iter().next().map(|model| model.id)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use saint_scripted::llm::ScriptedLlm;

    use super::*;

    fn endpoint(
        provider: ModelProvider,
        base_url: String,
        key: Option<&str>,
    ) -> saint_llm::Endpoint {
        saint_llm::Endpoint {
            provider,
            base_url,
            api_key: key.map(str::to_string),
        }
    }

    #[tokio::test]
    async fn the_model_check_confirms_a_served_model_and_names_what_else_is_served() {
        let server = ScriptedLlm::start().await.expect("scripted server");
        let http = reqwest::Client::new();
        server.set_models(&["claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001"]);
        // An alias of a dated id counts, with the /v1 suffix people paste.
        let anthropic = endpoint(
            ModelProvider::Anthropic,
            format!("{}/v1", server.base_url()),
            Some("sk-test"),
        );
        let check = check_model(&anthropic, "claude-sonnet-4-5", &http).await;
        assert!(check.ok, "{check:?}");
        assert!(
            check.message.contains("serves claude-sonnet-4-5"),
            "{check:?}"
        );

        server.set_models(&["llama3.2", "qwen3"]);
        let openai = endpoint(ModelProvider::Openai, server.base_url(), None);
        let check = check_model(&openai, "mistral", &http).await;
        assert!(!check.ok, "{check:?}");
        for part in ["does not serve mistral", "llama3.2, qwen3", NAME_ENV] {
            assert!(check.message.contains(part), "{part}: {check:?}");
        }
    }

    #[tokio::test]
    async fn the_model_check_says_when_nothing_answers_or_the_key_is_refused() {
        let http = reqwest::Client::new();
        let closed = {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            listener.local_addr().unwrap()
        };
        let check = check_model(
            &endpoint(ModelProvider::Openai, format!("http://{closed}"), None),
            "m",
            &http,
        )
        .await;
        assert!(!check.ok);
        assert!(
            check.message.starts_with(&format!(
                "model check: no answer from http://{closed}/v1/models"
            )),
            "{check:?}"
        );

        // A server that refuses the key, recording what it was sent.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let served = tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buffer = [0u8; 4096];
            while !request.ends_with(b"\r\n\r\n") {
                let read = stream.read(&mut buffer).await.unwrap();
                assert!(read > 0, "the request ended early");
                request.extend_from_slice(&buffer[..read]);
            }
            let body = r#"{"error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
            let response = format!(
                "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(response.as_bytes()).await.unwrap();
            String::from_utf8(request).unwrap().to_ascii_lowercase()
        });
        let check = check_model(
            &endpoint(
                ModelProvider::Anthropic,
                format!("http://{address}"),
                Some("sk-wrong"),
            ),
            "claude-sonnet-4-5",
            &http,
        )
        .await;
        let request = served.await.unwrap();
        assert!(
            request.starts_with("get /v1/models?limit=1000 "),
            "{request}"
        );
        assert!(
            request.contains("x-api-key: sk-wrong") && request.contains("anthropic-version:"),
            "{request}"
        );
        assert!(!check.ok);
        assert!(
            check.message.contains("refused the key (401 Unauthorized)"),
            "{check:?}"
        );
        assert!(check.message.contains("invalid x-api-key"), "{check:?}");
    }

    #[test]
    fn a_version_suffix_is_dropped_and_nothing_else() {
        let root = |url: &str| without_version_suffix(url);
        assert_eq!(root("http://h:8000/v1").as_deref(), Some("http://h:8000"));
        assert_eq!(root("http://h:8000/v1/").as_deref(), Some("http://h:8000"));
        assert_eq!(
            root("https://h/openai/v1").as_deref(),
            Some("https://h/openai")
        );
        assert_eq!(root("http://h:8000"), None);
        assert_eq!(root("http://h:8000/v10"), None);
        assert_eq!(root("http://h:8000/apiv1"), None);
        // Nothing left but a scheme, or an empty path segment: not a server root.
        assert_eq!(root("http:///v1"), None);
        assert_eq!(root("http://h//v1"), None);
        assert_eq!(root("v1"), None);
    }

    #[tokio::test]
    async fn an_address_ending_in_v1_finds_the_model_and_says_it_dropped_the_suffix() {
        let server = ScriptedLlm::start().await.expect("scripted server");
        server.set_models(&["served-model"]);
        let given = format!("{}/v1", server.base_url());
        let env: EnvLookup = {
            let given = given.clone();
            Arc::new(move |name: &str| match name {
                BASE_URL_ENV => Some(given.clone()),
                PROVIDER_ENV => Some("openai".to_string()),
                _ => None,
            })
        };
        // Another provider than the environment's: the name is asked of the server.
        let config = ModelConfig {
            provider: ModelProvider::Anthropic,
            name: "claude-x".to_string(),
            base_url: "https://api.anthropic.com".to_string(),
            api_key_env: None,
            context_window: saint_config::DEFAULT_CONTEXT_WINDOW,
            max_output_tokens: saint_config::DEFAULT_MAX_OUTPUT_TOKENS,
            prices: Default::default(),
            additional_api_key_envs: Vec::new(),
            fallbacks: Vec::new(),
            failover: Default::default(),
        };
        let discovery = discover(&config, &env, &reqwest::Client::new())
            .await
            .expect("discovery");
        let ModelChoice::Overlay(overlay) = discovery.choice else {
            panic!("no model found behind {given}: {}", discovery.summary);
        };
        assert_eq!(overlay.base_url, server.base_url());
        assert_eq!(overlay.name.as_deref(), Some("served-model"), "{overlay:?}");
        assert!(
            discovery.summary.contains("ended in /v1"),
            "{}",
            discovery.summary
        );
        // The chat requests go where the server serves them.
        let endpoint = saint_llm::Endpoint {
            provider: overlay.provider,
            base_url: overlay.base_url.clone(),
            api_key: None,
        };
        assert_eq!(
            endpoint.url(),
            format!("{}/v1/chat/completions", server.base_url())
        );
    }

    fn unpriced_config() -> BotConfig {
        let mut config = BotConfig::from_json(include_str!(
            "../config/tests/fixtures/acme-bot-config.json"
        ))
        .unwrap();
        config.model.prices.remove("claude-sonnet-4-5");
        config
    }

    #[test]
    fn a_self_hosted_model_is_declared_free_and_a_remote_one_is_left_unpriced() {
        let overlay = |base_url: &str, self_hosted| ModelOverlay {
            provider: ModelProvider::Openai,
            base_url: base_url.to_string(),
            name: Some("llama3.2:latest".to_string()),
            api_key_env: None,
            self_hosted,
        };
        let ollama = overlay(OLLAMA_DEFAULT_URL, true);
        let mut config = unpriced_config();
        config.model.prices.insert(
            "llama3.2:latest".into(),
            ModelPrice {
                input_per_mtok: 0.5,
                output_per_mtok: 1.0,
                per_audio_minute: None,
                per_million_characters: None,
            },
        );
        let priced_by_the_file = config.clone();
        ollama.apply(&mut config);
        assert_eq!(
            config.model.prices["llama3.2:latest"].output_per_mtok, 1.0,
            "a price the bot file gives is kept"
        );
        let mut config = unpriced_config();
        ollama.apply(&mut config);
        assert_eq!(config.model.prices["llama3.2:latest"], FREE);
        assert_eq!(config.unpriced_models(), Vec::<&str>::new());
        let discovery = |overlay: ModelOverlay| Discovery {
            choice: ModelChoice::Overlay(overlay),
            summary: String::new(),
        };
        let notice = discovery(ollama.clone())
            .pricing_notice(&unpriced_config())
            .unwrap();
        assert!(
            notice.contains("llama3.2:latest runs on your own machine")
                && notice.contains("model.prices"),
            "{notice}"
        );
        assert_eq!(discovery(ollama).pricing_notice(&priced_by_the_file), None);

        let remote = overlay("https://llm.example.com", false);
        let mut config = unpriced_config();
        remote.apply(&mut config);
        assert_eq!(config.unpriced_models(), vec!["llama3.2:latest"]);
        let notice = discovery(remote)
            .pricing_notice(&unpriced_config())
            .unwrap();
        assert!(
            notice.contains("\"llama3.2:latest\"")
                && notice.contains("refused")
                && notice.contains("model.prices")
                && notice.contains("budget.unpricedModels: allow"),
            "{notice}"
        );
        // The bot file's own model, unpriced: the same advice.
        let own = Discovery {
            choice: ModelChoice::Config,
            summary: String::new(),
        };
        assert!(
            own.pricing_notice(&unpriced_config())
                .unwrap()
                .contains("\"claude-sonnet-4-5\""),
        );
    }

    #[test]
    fn loopback_hosts_are_this_machine() {
        assert!(is_loopback_host("http://127.0.0.1:8000"));
        assert!(is_loopback_host("http://127.1.2.3"));
        assert!(is_loopback_host("http://localhost:1234/v1"));
        assert!(is_loopback_host("http://[::1]:8000"));
        assert!(!is_loopback_host("http://192.168.1.20:11434"));
        assert!(!is_loopback_host("https://api.openai.com"));
        assert!(!is_loopback_host("http://127.0.0.1.evil.test/"));
    }

    #[test]
    fn hosts_are_read_from_urls_without_being_fooled_by_user_info_or_paths() {
        assert!(is_anthropic_host("https://api.anthropic.com"));
        assert!(is_anthropic_host("https://api.anthropic.com:443/"));
        assert!(!is_anthropic_host("http://127.0.0.1:11434"));
        assert!(!is_anthropic_host("http://anthropic.com.evil.test/"));
        assert!(!is_anthropic_host("http://evil.test/api.anthropic.com"));
        assert!(is_anthropic_host("https://user@api.anthropic.com/"));
        assert!(!is_anthropic_host("not a url"));
    }
}
