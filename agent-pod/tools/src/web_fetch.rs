//! The `web_fetch` tool: fetches a public http(s) URL through the SSRF guard and returns
//! readable text, marked as untrusted external content.
//!
//! Touches the network only through [`crate::guard::ssrf::SsrfGuard`]; the bot's URL
//! blocklist comes from the config in force for the turn.

use std::sync::Arc;

use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{
    Permit, ToolContext, ToolError, ToolOutput, TypedTool, read::truncate_chars, untrusted,
};
use crate::guard::ssrf::{FetchLimits, Fetched, SsrfError, SsrfGuard};

/// Default and largest number of characters returned to the model.
const DEFAULT_MAX_CHARS: usize = 50_000;
const LARGEST_MAX_CHARS: usize = 200_000;

/// Fetches web pages.
#[derive(Clone, Debug)]
pub struct WebFetchTool {
    guard: Arc<SsrfGuard>,
    limits: FetchLimits,
}

impl WebFetchTool {
    /// A tool using `guard` with `limits`.
    pub fn new(guard: Arc<SsrfGuard>, limits: FetchLimits) -> Self {
        Self { guard, limits }
    }
}

impl Default for WebFetchTool {
    fn default() -> Self {
        Self::new(Arc::new(SsrfGuard::default()), FetchLimits::default())
    }
}

/// What `web_fetch` takes.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WebFetchInput {
    /// http or https URL
    pub url: String,
    /// Output style
    #[serde(default, alias = "extractMode")]
    pub extract_mode: ExtractMode,
    /// Most characters to return
    #[serde(alias = "maxChars")]
    #[schemars(range(min = 100))]
    pub max_chars: Option<u64>,
}

/// How a fetched HTML page is rendered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ExtractMode {
    // Markdown keeps links and headings.
    #[default]
    Markdown,
    Text,
}

impl TypedTool for WebFetchTool {
    type Input = WebFetchInput;
    const NAME: &'static str = "web_fetch";
    const DESCRIPTION: &'static str = "Fetch a public http or https URL and return its readable text (HTML is converted to \
         markdown). Internal, local and private addresses are refused.";

    fn run<'a>(
        &'a self,
        _permit: &'a Permit,
        context: &'a ToolContext,
        input: WebFetchInput,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let url = input.url;
            let plain = input.extract_mode == ExtractMode::Text;
            let max_chars = input.max_chars.map_or(DEFAULT_MAX_CHARS, |max| {
                (max as usize).clamp(100, LARGEST_MAX_CHARS)
            });
            let fetched = self
                .guard
                .fetch(&url, &context.config.web.url_blocklist, self.limits)
                .await
                .map_err(fetch_error)?;
            let text = render(&fetched, plain);
            let header = format!(
                "URL: {}\nStatus: {}{}\n\n",
                fetched.final_url,
                fetched.status,
                if fetched.truncated {
                    " (body truncated)"
                } else {
                    ""
                }
            );
            let mut output = ToolOutput {
                content: truncate_chars(
                    &untrusted::wrap("a web page", &format!("{header}{text}")),
                    max_chars,
                ),
                untrusted: true,
                ..ToolOutput::default()
            };
            output.metering.insert(
                "host".to_string(),
                fetched.final_url.host_str().unwrap_or_default().into(),
            );
            output
                .metering
                .insert("status".to_string(), fetched.status.into());
            output
                .metering
                .insert("bytes".to_string(), fetched.body.len().into());
            Ok(output)
        })
    }
}

fn fetch_error(error: SsrfError) -> ToolError {
    match error {
        SsrfError::Timeout(seconds) => ToolError::Timeout(seconds),
        SsrfError::InvalidUrl(_) | SsrfError::Scheme(_) => {
            ToolError::InvalidInput(error.to_string())
        }
        SsrfError::Resolve(_)
        | SsrfError::Fetch(_)
        | SsrfError::BadRedirect
        | SsrfError::TooManyRedirects(_) => ToolError::Failed(error.to_string()),
        refusal => ToolError::Denied(refusal.to_string()),
    }
}

/// Converts the body to text: HTML to markdown (or plain text), JSON pretty-printed,
/// anything textual as is, binary refused.
fn render(fetched: &Fetched, plain: bool) -> String {
    let content_type = fetched
        .content_type
        .as_deref()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let looks_like_html = content_type.contains("html")
        || (content_type.is_empty()
            && String::from_utf8_lossy(&fetched.body[..fetched.body.len().min(512)])
                .to_ascii_lowercase()
                .contains("<html"));
    if looks_like_html {
        let converted = if plain {
            html2text::config::plain().string_from_read(fetched.body.as_slice(), 100)
        } else {
            html2text::from_read(fetched.body.as_slice(), 100)
        };
        return converted.unwrap_or_else(|_| String::from_utf8_lossy(&fetched.body).into_owned());
    }
    if content_type.contains("json")
        && let Ok(value) = serde_json::from_slice::<serde_json::Value>(&fetched.body)
    {
        return serde_json::to_string_pretty(&value).unwrap_or_default();
    }
    match std::str::from_utf8(&fetched.body) {
        Ok(text) => text.to_string(),
        Err(_) if content_type.starts_with("text/") => {
            String::from_utf8_lossy(&fetched.body).into_owned()
        }
        Err(_) => format!(
            "[binary content of type {content_type:?}, {} bytes, not shown]",
            fetched.body.len()
        ),
    }
}
