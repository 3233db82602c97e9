//! `memory_search`: hybrid (meaning + keyword) search over the bot's memory notes,
//! limited inside the SQL to the asker's memory scope. Reads the memory index only.

use std::sync::Arc;

use futures::future::BoxFuture;
use saint_config::ErrorChain;
use saint_memory::{MAX_RESULTS, MemoryIndex, Scope, SearchRequest};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{Permit, ToolContext, ToolError, ToolOutput, TypedTool};

/// Hits returned when the model does not say.
const DEFAULT_RESULTS: usize = 5;

/// Searches memory for the asker's role.
pub struct MemorySearchTool {
    index: Arc<MemoryIndex>,
}

impl MemorySearchTool {
    /// A tool searching `index`.
    pub fn new(index: Arc<MemoryIndex>) -> Self {
        Self { index }
    }
}

/// What `memory_search` takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemorySearchInput {
    /// What to look for, in natural language or exact terms.
    pub query: String,
    /// How many passages to return (default 5).
    #[schemars(range(min = 1, max = MAX_RESULTS))]
    pub k: Option<usize>,
    /// Optional path globs that narrow the search.
    #[serde(default)]
    pub paths: Vec<String>,
}

/// The asker's scope: the role's memory scopes with `<self>` = the asker's slug.
pub fn caller_scope(context: &ToolContext) -> Scope {
    Scope::for_role(&context.caller.role.memory_scope, &context.caller.slug)
}

impl TypedTool for MemorySearchTool {
    type Input = MemorySearchInput;
    const NAME: &'static str = "memory_search";
    const DESCRIPTION: &'static str = "Search the memory notes (MEMORY.md and memory/**/*.md) by meaning and by keyword. \
         Returns the best matching passages with file path, line range, score and a snippet; \
         use memory_get to read more lines of a file. Only notes the person you are helping \
         may see are searched. `paths` (optional SQLite GLOB patterns such as \
         \"memory/shared/*\") narrows the search further.";

    fn run<'a>(
        &'a self,
        _permit: &'a Permit,
        context: &'a ToolContext,
        input: MemorySearchInput,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            if input.query.trim().is_empty() {
                return Err(ToolError::InvalidInput(
                    "query must not be empty".to_string(),
                ));
            }
            let k = input.k.unwrap_or(DEFAULT_RESULTS).clamp(1, MAX_RESULTS);
            let scope = caller_scope(context)
                .narrowed(&input.paths)
                .map_err(|error| ToolError::InvalidInput(error.to_string()))?;
            let index = Arc::clone(&self.index);
            let query = input.query;
            // Embedding and SQLite are blocking work: keep them off the async workers.
            let outcome = tokio::task::spawn_blocking(move || {
                index.search_or_keywords(&SearchRequest {
                    query: &query,
                    k,
                    scope: &scope,
                })
            })
            .await
            .map_err(|_| ToolError::Failed("memory search failed".to_string()))?
            .map_err(|error| {
                tracing::warn!(error = %ErrorChain(&error), "memory search failed");
                ToolError::Failed("memory search failed".to_string())
            })?;
            let hits = &outcome.hits;
            let results: Vec<serde_json::Value> = hits
                .iter()
                .map(|hit| {
                    json!({
                        "path": hit.path,
                        "startLine": hit.start_line,
                        "endLine": hit.end_line,
                        "score": (hit.score * 1000.0).round() / 1000.0,
                        "snippet": hit.snippet,
                    })
                })
                .collect();
            let mut body = json!({ "results": results });
            if let Some(reason) = &outcome.keyword_only {
                // Said in the result, so the model (and the person) know matches may
                // be missing, rather than trusting an incomplete answer.
                body["note"] = json!(format!(
                    "keyword-only results: semantic search is unavailable right now ({reason})"
                ));
            }
            let mut output =
                ToolOutput::text(serde_json::to_string_pretty(&body).unwrap_or_default());
            if outcome.keyword_only.is_some() {
                output
                    .metering
                    .insert("keywordOnly".to_string(), json!(true));
            }
            output
                .metering
                .insert("results".to_string(), json!(hits.len()));
            Ok(output)
        })
    }
}
