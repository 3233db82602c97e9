//! The HTTP client: sends one streaming model call, retries transient failures with
//! exponential backoff and jitter (honouring `retry-after`), enforces timeouts and stops
//! on cancellation. Knows nothing about roles, tools or sessions.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::{
    anthropic,
    assemble::Assembler,
    openai,
    types::{ChatRequest, ChatResponse, StreamEvent},
};

/// Which wire format the endpoint speaks: Anthropic Messages (`POST {base}/v1/messages`)
/// or OpenAI-compatible Chat Completions (`POST {base}/v1/chat/completions`). The same
/// enum the rendered config and the SaintBot CRD name the provider with.
pub use saint_config::ModelProvider as Provider;

/// Where the model lives. The key is held here and nowhere else.
#[derive(Clone)]
pub struct Endpoint {
    /// Wire format.
    pub provider: Provider,
    /// Base URL, with or without a trailing `/v1`.
    pub base_url: String,
    /// API key, if the endpoint needs one.
    pub api_key: Option<String>,
}

impl std::fmt::Debug for Endpoint {
    // Never print the key.
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Endpoint")
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Endpoint {
    /// The full URL of the streaming endpoint.
    pub fn url(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base);
        match self.provider {
            Provider::Anthropic => format!("{base}/v1/messages"),
            Provider::Openai => format!("{base}/v1/chat/completions"),
        }
    }
}

/// Timeouts and retry schedule.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// TCP/TLS connect timeout.
    pub connect_timeout: Duration,
    /// Time until response headers arrive.
    pub response_timeout: Duration,
    /// Longest silence allowed between two stream events.
    pub idle_timeout: Duration,
    /// Retries after the first attempt.
    pub max_retries: usize,
    /// First backoff delay.
    pub min_backoff: Duration,
    /// Backoff ceiling.
    pub max_backoff: Duration,
    /// Ceiling on a server-requested `retry-after`.
    pub max_retry_after: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(120),
            max_retries: 4,
            min_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// Why a model call failed.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("failed to build the http client: {0}")]
    Client(String),
    #[error("failed: model endpoint answered {status}: {body}")]
    Status {
        status: u16,
        retry_after: Option<Duration>,
        body: String,
    },
    #[error("failed to reach the model endpoint: {message}")]
    Transport { message: String, retryable: bool },
    #[error("failed: model endpoint timed out after {0:?}")]
    Timeout(Duration),
    #[error("failed: model call cancelled")]
    Cancelled,
    #[error("failed to decode the model stream: {0}")]
    Protocol(String),
    #[error("failed: model endpoint reported {kind}: {message}")]
    Provider {
        kind: String,
        message: String,
        retryable: bool,
    },
    #[error("failed: model stream ended before completion")]
    Incomplete,
}

impl LlmError {
    /// Whether another attempt may succeed (rate limits, overload, 5xx, transport).
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::Status { status, .. } => matches!(status, 408 | 409 | 429) || *status >= 500,
            LlmError::Transport { retryable, .. } | LlmError::Provider { retryable, .. } => {
                *retryable
            }
            LlmError::Timeout(_) | LlmError::Incomplete => true,
            LlmError::Client(_) | LlmError::Cancelled | LlmError::Protocol(_) => false,
        }
    }

    /// How long the server asked to wait before the next attempt (`retry-after`).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

fn transport(error: reqwest::Error) -> LlmError {
    let retryable =
        error.is_connect() || error.is_timeout() || error.is_body() || error.is_request();
    LlmError::Transport {
        message: error.to_string(),
        retryable,
    }
}

// `retry-after` is either seconds or an HTTP date; providers send seconds. A date is
// ignored (the backoff schedule still applies).
fn parse_retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    let seconds: f64 = value.trim().parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
}

/// A client for one endpoint. Cheap to clone.
#[derive(Clone, Debug)]
pub struct LlmClient {
    http: reqwest::Client,
    endpoint: Endpoint,
    options: ClientOptions,
}

impl LlmClient {
    /// Builds a client.
    pub fn new(endpoint: Endpoint, options: ClientOptions) -> Result<Self, LlmError> {
        let http = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .build()
            .map_err(|error| LlmError::Client(error.to_string()))?;
        Ok(Self {
            http,
            endpoint,
            options,
        })
    }

    /// The endpoint this client calls.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Runs one model call, streaming events to `on_event`, retrying transient failures
    /// that happen before any output was streamed (a retry after partial output would
    /// show the person the same words twice).
    pub async fn complete(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ChatResponse, LlmError> {
        let mut backoff = ExponentialBuilder::default()
            .with_min_delay(self.options.min_backoff)
            .with_max_delay(self.options.max_backoff)
            .with_max_times(self.options.max_retries)
            .with_jitter()
            .build();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut emitted = false;
            let error = match self.attempt(request, cancel, on_event, &mut emitted).await {
                Ok(response) => return Ok(response),
                Err(error) if error.is_retryable() && !emitted => error,
                Err(error) => return Err(error),
            };
            let Some(delay) = backoff.next() else {
                return Err(error);
            };
            let delay = match error.retry_after() {
                Some(after) => after.min(self.options.max_retry_after).max(delay),
                None => delay,
            };
            tracing::warn!(%error, delay_ms = delay.as_millis() as u64, "model call failed, retrying");
            on_event(StreamEvent::Retrying {
                error: error.to_string(),
                delay,
                attempt,
            });
            tokio::select! {
                _ = cancel.cancelled() => return Err(LlmError::Cancelled),
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Runs one attempt of a model call without retrying: whoever calls decides what
    /// follows a failure (the agent's failover chain retries, rotates keys and falls
    /// back). Events reach `on_event` as they stream in.
    pub async fn complete_once(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
    ) -> Result<ChatResponse, LlmError> {
        let mut emitted = false;
        self.attempt(request, cancel, on_event, &mut emitted).await
    }

    async fn attempt(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
        on_event: &mut (dyn FnMut(StreamEvent) + Send),
        emitted: &mut bool,
    ) -> Result<ChatResponse, LlmError> {
        let provider = self.endpoint.provider;
        let body = match provider {
            Provider::Anthropic => anthropic::request_body(request),
            Provider::Openai => openai::request_body(request),
        };
        let mut builder = self
            .http
            .post(self.endpoint.url())
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(&body);
        builder = match (provider, &self.endpoint.api_key) {
            (Provider::Anthropic, Some(key)) => builder.header("x-api-key", key),
            (Provider::Openai, Some(key)) => builder.bearer_auth(key),
            (_, None) => builder,
        };
        if provider == Provider::Anthropic {
            builder = builder.header("anthropic-version", anthropic::API_VERSION);
        }
        let response = tokio::select! {
            _ = cancel.cancelled() => return Err(LlmError::Cancelled),
            sent = tokio::time::timeout(self.options.response_timeout, builder.send()) => {
                sent.map_err(|_| LlmError::Timeout(self.options.response_timeout))?.map_err(transport)?
            }
        };
        let status = response.status();
        if !status.is_success() {
            let retry_after = parse_retry_after(response.headers());
            let body: String = response
                .text()
                .await
                .unwrap_or_default()
                .chars()
                .take(500)
                .collect();
            return Err(LlmError::Status {
                status: status.as_u16(),
                retry_after,
                body,
            });
        }
        let mut events = response.bytes_stream().eventsource();
        let mut assembler = Assembler::default();
        while !assembler.is_done() {
            let next = tokio::select! {
                _ = cancel.cancelled() => return Err(LlmError::Cancelled),
                next = tokio::time::timeout(self.options.idle_timeout, events.next()) => {
                    next.map_err(|_| LlmError::Timeout(self.options.idle_timeout))?
                }
            };
            let event = match next {
                None => return Err(LlmError::Incomplete),
                Some(Err(error)) => {
                    return Err(LlmError::Transport {
                        message: error.to_string(),
                        retryable: true,
                    });
                }
                Some(Ok(event)) => event,
            };
            let deltas = match provider {
                Provider::Anthropic => anthropic::decode(&event.event, &event.data)?,
                Provider::Openai => openai::decode(&event.data)?,
            };
            for delta in deltas {
                for stream_event in assembler.apply(delta) {
                    *emitted = true;
                    on_event(stream_event);
                }
            }
        }
        assembler.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_url_accepts_base_with_or_without_v1() {
        let endpoint = |base: &str, provider| Endpoint {
            provider,
            base_url: base.into(),
            api_key: None,
        };
        assert_eq!(
            endpoint("https://api.anthropic.com", Provider::Anthropic).url(),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(
            endpoint("http://h:11434/v1/", Provider::Openai).url(),
            "http://h:11434/v1/chat/completions"
        );
    }

    #[test]
    fn endpoint_debug_hides_the_key() {
        let endpoint = Endpoint {
            provider: Provider::Openai,
            base_url: "x".into(),
            api_key: Some("sk-secret".into()),
        };
        assert!(!format!("{endpoint:?}").contains("sk-secret"));
    }
}
