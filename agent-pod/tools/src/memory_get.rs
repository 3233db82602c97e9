//! `memory_get`: reads lines of one memory file, refused outside the asker's memory
//! scope (checked on the path asked for and on the path after resolving symlinks).
//! Reads memory files only.

use std::sync::Arc;

use futures::future::BoxFuture;
use saint_config::ErrorChain;
use saint_memory::{MAX_LINES, MemoryFileError, MemoryIndex};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{Permit, ToolContext, ToolError, ToolOutput, TypedTool, memory_search::caller_scope};

/// Reads a memory file for the asker's role.
pub struct MemoryGetTool {
    index: Arc<MemoryIndex>,
}

impl MemoryGetTool {
    /// A tool reading files of `index`'s workspace.
    pub fn new(index: Arc<MemoryIndex>) -> Self {
        Self { index }
    }
}

/// What `memory_get` takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryGetInput {
    /// Workspace-relative path of a .md memory file.
    pub path: String,
    /// First line to read (1-based).
    #[schemars(range(min = 1))]
    pub from: Option<usize>,
    /// Number of lines to read.
    #[schemars(range(min = 1, max = MAX_LINES))]
    pub lines: Option<usize>,
}

impl TypedTool for MemoryGetTool {
    type Input = MemoryGetInput;
    const NAME: &'static str = "memory_get";
    const DESCRIPTION: &'static str = "Read lines of one memory file (a workspace-relative path such as \
         memory/shared/prices.md, usually from a memory_search result). `from` is the first \
         line (1-based, default 1), `lines` how many (default and maximum 400). Files outside \
         what the person you are helping may see are refused.";

    fn run<'a>(
        &'a self,
        _permit: &'a Permit,
        context: &'a ToolContext,
        input: MemoryGetInput,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let scope = caller_scope(context);
            let index = Arc::clone(&self.index);
            let MemoryGetInput { path, from, lines } = input;
            let result = tokio::task::spawn_blocking(move || {
                index.read_memory_file(&scope, &path, from, lines)
            })
            .await
            .map_err(|_| ToolError::Failed("failed to read memory".to_string()))?;
            let text = result.map_err(|error| match error {
                MemoryFileError::OutOfScope(_) => ToolError::Denied(error.to_string()),
                MemoryFileError::InvalidPath(_) => ToolError::InvalidInput(error.to_string()),
                MemoryFileError::NotFound(_) => ToolError::NotFound(error.to_string()),
                MemoryFileError::Unreadable { .. } | MemoryFileError::Index(_) => {
                    tracing::warn!(error = %ErrorChain(&error), "memory_get failed");
                    ToolError::Failed("failed to read memory".to_string())
                }
            })?;
            Ok(ToolOutput::text(
                serde_json::to_string_pretty(&json!({
                    "path": text.path,
                    "from": text.start_line,
                    "to": text.end_line,
                    "totalLines": text.total_lines,
                    "text": text.text,
                }))
                .unwrap_or_default(),
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, OnceLock};

    use saint_config::MemoryScope;
    use saint_memory::{IndexOptions, LocalMiniLm, MemoryIndex, default_model_dir};
    use serde_json::json;

    use super::{super::memory_search::MemorySearchTool, *};
    use crate::{
        Tool,
        test_fixtures::{self, CallPermitted},
    };

    /// The real model, loaded once; a missing model fails with instructions.
    fn model() -> Arc<LocalMiniLm> {
        static MODEL: OnceLock<Arc<LocalMiniLm>> = OnceLock::new();
        MODEL
            .get_or_init(|| {
                Arc::new(LocalMiniLm::load(&default_model_dir()).unwrap_or_else(|error| {
                    panic!("memory tool tests need the model ({error}); run agent-pod/memory/fetch-model.sh")
                }))
            })
            .clone()
    }

    fn write(root: &std::path::Path, relative: &str, text: &str) {
        let path = root.join(relative);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    /// A workspace with shared, private and per-person notes, indexed.
    fn indexed_workspace() -> (tempfile::TempDir, Arc<MemoryIndex>) {
        let workspace = tempfile::tempdir().expect("tempdir");
        let root = workspace.path();
        write(
            root,
            "memory/shared/prices.md",
            "# Prices\n\nA city bike service costs EUR 45.\n",
        );
        write(
            root,
            "memory/private/salaries.md",
            "# Salaries\n\nThe bike mechanic earns EUR 2,400.\n",
        );
        for index in 0..30 {
            write(
                root,
                &format!("memory/private/bikes-{index}.md"),
                "# Bikes\n\nBike service pricing secrets.\n",
            );
        }
        write(
            root,
            "memory/users/acme-ivo/notes.md",
            "# Ivo\n\nIvo repairs bikes on Mondays.\n",
        );
        write(
            root,
            "memory/users/acme-marko/notes.md",
            "# Marko\n\nMarko prices bike services.\n",
        );
        let index = MemoryIndex::open(IndexOptions::new(root), model()).expect("open");
        index.reindex_all().expect("index");
        (workspace, Arc::new(index))
    }

    /// A context for `slug` whose role has `scopes` (the fixture's roles carry none).
    fn context_with(
        workspace: &std::path::Path,
        slug: &str,
        scopes: Vec<MemoryScope>,
    ) -> ToolContext {
        let mut context = test_fixtures::context(workspace, slug);
        let mut role = (*context.caller.role).clone();
        role.memory_scope = scopes;
        // The policy must let the role call the memory tools at all (the fixture's
        // roles name none); what these tests check is the scope inside the tool.
        role.tools.allow.push("memory_*".to_string());
        context.caller.role = Arc::new(role);
        context
    }

    fn result_paths(output: &ToolOutput) -> Vec<String> {
        let value: serde_json::Value = serde_json::from_str(&output.content).expect("json");
        value["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|hit| hit["path"].as_str().expect("path").to_string())
            .collect()
    }

    #[tokio::test]
    async fn memory_search_returns_only_the_callers_scope() {
        let (workspace, index) = indexed_workspace();
        let tool = MemorySearchTool::new(Arc::clone(&index));
        let employee = context_with(
            workspace.path(),
            "acme-ivo",
            vec![MemoryScope::Shared, MemoryScope::OwnUser],
        );
        let output = tool
            .call_permitted(
                &employee,
                json!({"query": "how much does a bike service cost", "k": 5}),
            )
            .await
            .expect("search");
        let paths = result_paths(&output);
        assert_eq!(paths.len(), 2, "{paths:?}");
        assert!(paths.contains(&"memory/shared/prices.md".to_string()));
        assert!(paths.contains(&"memory/users/acme-ivo/notes.md".to_string()));
        assert_eq!(output.metering["results"], json!(2));

        // A `paths` filter pointing outside the scope cannot widen it.
        let output = tool
            .call_permitted(
                &employee,
                json!({"query": "bike mechanic salary", "paths": ["memory/private/*", "*"]}),
            )
            .await
            .expect("search");
        assert!(
            result_paths(&output)
                .iter()
                .all(|path| !path.starts_with("memory/private/"))
        );

        let owner = context_with(
            workspace.path(),
            "acme-ana",
            vec![MemoryScope::Shared, MemoryScope::Private],
        );
        let output = tool
            .call_permitted(&owner, json!({"query": "bike mechanic salary", "k": 1}))
            .await
            .expect("search");
        assert_eq!(result_paths(&output), ["memory/private/salaries.md"]);

        let error = tool
            .call_permitted(&employee, json!({"query": " "}))
            .await
            .expect_err("empty query");
        assert!(matches!(error, ToolError::InvalidInput(_)));
        let error = tool
            .call_permitted(&employee, json!({"q": "x"}))
            .await
            .expect_err("unknown field");
        assert!(matches!(error, ToolError::InvalidInput(_)));
    }

    #[tokio::test]
    async fn memory_get_is_denied_outside_the_callers_scope() {
        let (workspace, index) = indexed_workspace();
        let tool = MemoryGetTool::new(index);
        let employee = context_with(
            workspace.path(),
            "acme-ivo",
            vec![MemoryScope::Shared, MemoryScope::OwnUser],
        );
        let output = tool
            .call_permitted(
                &employee,
                json!({"path": "memory/shared/prices.md", "from": 3, "lines": 1}),
            )
            .await
            .expect("read");
        let value: serde_json::Value = serde_json::from_str(&output.content).expect("json");
        assert_eq!(value["text"], "A city bike service costs EUR 45.");
        assert_eq!(
            (value["from"].as_u64(), value["to"].as_u64()),
            (Some(3), Some(3))
        );

        for path in [
            "memory/private/salaries.md",
            "memory/users/acme-marko/notes.md",
        ] {
            let error = tool
                .call_permitted(&employee, json!({"path": path}))
                .await
                .expect_err("outside scope");
            assert!(matches!(error, ToolError::Denied(_)), "{path}: {error:?}");
        }
        let error = tool
            .call_permitted(&employee, json!({"path": "../etc/passwd.md"}))
            .await
            .expect_err("escape");
        assert!(matches!(error, ToolError::InvalidInput(_)), "{error:?}");
        let error = tool
            .call_permitted(&employee, json!({"path": "memory/shared/none.md"}))
            .await
            .expect_err("missing");
        assert!(matches!(error, ToolError::NotFound(_)), "{error:?}");
        // A role with no memory scope reads nothing, not everything.
        let nobody = context_with(workspace.path(), "stranger", Vec::new());
        let error = tool
            .call_permitted(&nobody, json!({"path": "memory/shared/prices.md"}))
            .await
            .expect_err("no scope");
        assert!(matches!(error, ToolError::Denied(_)), "{error:?}");
    }

    #[test]
    fn schemas_name_the_required_fields() {
        let (_workspace, index) = indexed_workspace();
        assert_eq!(
            MemoryGetTool::new(Arc::clone(&index)).input_schema()["required"],
            json!(["path"])
        );
        assert_eq!(
            MemorySearchTool::new(index).input_schema()["required"],
            json!(["query"])
        );
    }
}
