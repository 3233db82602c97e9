//! The `web_search` tool: queries the Brave Search API and returns titles, URLs and
//! snippets, marked as untrusted external content.
//!
//! Touches the network only at the configured search base URL (trusted operator
//! config, so it does not go through the SSRF guard); the API key is read from the
//! environment variable the config names and never shown to the model.

use std::{sync::Arc, time::Duration};

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{Permit, ToolContext, ToolError, ToolOutput, TypedTool, untrusted};

/// Looks up a secret by environment variable name.
pub type SecretLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Searches the web.
#[derive(Clone)]
pub struct WebSearchTool {
    client: reqwest::Client,
    secrets: SecretLookup,
}

impl std::fmt::Debug for WebSearchTool {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("WebSearchTool")
            .finish_non_exhaustive()
    }
}

impl WebSearchTool {
    /// A tool reading the API key through `secrets`.
    pub fn new(secrets: SecretLookup) -> Self {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self { client, secrets }
    }

    /// A tool reading the API key from the process environment.
    pub fn from_environment() -> Self {
        Self::new(Arc::new(|name: &str| std::env::var(name).ok()))
    }
}

/// What `web_search` takes.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WebSearchInput {
    /// Search query
    #[serde(alias = "q")]
    pub query: String,
    /// Number of results (1-10)
    #[schemars(range(min = 1, max = 10))]
    pub count: Option<u64>,
}

impl TypedTool for WebSearchTool {
    type Input = WebSearchInput;
    const NAME: &'static str = "web_search";
    const DESCRIPTION: &'static str =
        "Search the web. Returns titles, URLs and snippets of the top results.";

    fn run<'a>(
        &'a self,
        _permit: &'a Permit,
        context: &'a ToolContext,
        input: WebSearchInput,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let query = input.query;
            if query.trim().is_empty() {
                return Err(ToolError::InvalidInput(
                    "query must not be empty".to_string(),
                ));
            }
            let count = input.count.unwrap_or(5).clamp(1, 10);
            let Some(search) = &context.config.web.search else {
                return Err(ToolError::Failed("web search is not available".to_string()));
            };
            let Some(key) = (self.secrets)(&search.api_key_env).filter(|key| !key.is_empty())
            else {
                return Err(ToolError::Failed("web search is not available".to_string()));
            };
            let endpoint = url::Url::parse_with_params(
                &format!(
                    "{}/res/v1/web/search",
                    search.base_url.trim_end_matches('/')
                ),
                &[("q", query.as_str()), ("count", &count.to_string())],
            )
            .map_err(|_| ToolError::Failed("web search is not available".to_string()))?;
            let response = self
                .client
                .get(endpoint)
                .header("Accept", "application/json")
                .header("X-Subscription-Token", key)
                .send()
                .await
                .map_err(|error| {
                    if error.is_timeout() {
                        ToolError::Timeout(20)
                    } else {
                        ToolError::Failed("failed to reach the search service".to_string())
                    }
                })?;
            if !response.status().is_success() {
                return Err(ToolError::Failed(format!(
                    "the search service answered {}",
                    response.status().as_u16()
                )));
            }
            let body: serde_json::Value = response
                .json()
                .await
                .map_err(|_| ToolError::Failed("failed to read the search results".to_string()))?;
            let results = format_results(&body, count as usize);
            let mut output = ToolOutput {
                content: untrusted::wrap("web search results", &results),
                untrusted: true,
                ..ToolOutput::default()
            };
            output.metering.insert("query".to_string(), query.into());
            Ok(output)
        })
    }
}

fn format_results(body: &serde_json::Value, count: usize) -> String {
    let results = body
        .pointer("/web/results")
        .and_then(serde_json::Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if results.is_empty() {
        return "No results.".to_string();
    }
    results
        .iter()
        .take(count)
        .enumerate()
        .map(|(index, result)| {
            let field = |name: &str| {
                result
                    .get(name)
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default()
            };
            format!(
                "{}. {}\n   {}\n   {}",
                index + 1,
                field("title"),
                field("url"),
                field("description")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
