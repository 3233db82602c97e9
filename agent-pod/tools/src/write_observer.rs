//! Tells memory about the agent's own writes: wraps the `write`, `edit` and
//! `apply_patch` tools and, after a successful call, hands the memory files it wrote
//! (`MEMORY.md`, `memory/…`) to an observer, so they are searchable on the next turn
//! without waiting for the file watcher. Touches no file and no database itself.

use std::sync::Arc;

use futures::future::BoxFuture;

use super::{Permit, Tool, ToolContext, ToolError, ToolOutput};

/// Called with the workspace-relative memory paths a tool call wrote; runs on a
/// blocking thread and reports its own failures (a failed re-index never fails the
/// write, which already happened; the watcher catches up).
pub type WriteObserver = Arc<dyn Fn(&[String]) + Send + Sync>;

/// The tools whose writes are observed.
pub const OBSERVED_TOOLS: [&str; 3] = ["write", "edit", "apply_patch"];

/// Whether a workspace-relative path belongs to memory.
pub fn is_memory_path(relative: &str) -> bool {
    relative == "MEMORY.md" || relative.starts_with("memory/")
}

/// The paths a successful call reports in its metering: `path` (write, edit) and
/// `paths` (apply_patch, which may touch several files).
fn written_paths(output: &ToolOutput) -> Vec<String> {
    let mut paths: Vec<String> = Vec::new();
    if let Some(path) = output.metering.get("path").and_then(|value| value.as_str()) {
        paths.push(path.to_string());
    }
    if let Some(list) = output
        .metering
        .get("paths")
        .and_then(|value| value.as_array())
    {
        paths.extend(
            list.iter()
                .filter_map(|value| value.as_str())
                .map(String::from),
        );
    }
    paths
}

/// A write tool whose successful memory writes are passed to an observer.
pub struct ObservedWrites {
    inner: Arc<dyn Tool>,
    observer: WriteObserver,
}

impl ObservedWrites {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Tool>, observer: WriteObserver) -> Self {
        Self { inner, observer }
    }
}

impl Tool for ObservedWrites {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn description(&self) -> &str {
        self.inner.description()
    }

    fn input_schema(&self) -> serde_json::Value {
        self.inner.input_schema()
    }

    fn call<'a>(
        &'a self,
        permit: &'a Permit,
        context: &'a ToolContext,
        input: serde_json::Value,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let output = self.inner.call(permit, context, input).await?;
            let memory: Vec<String> = written_paths(&output)
                .into_iter()
                .filter(|path| is_memory_path(path))
                .collect();
            if !memory.is_empty() {
                // Awaited, so the next turn's memory_search already sees the file.
                let observer = Arc::clone(&self.observer);
                if let Err(error) = tokio::task::spawn_blocking(move || observer(&memory)).await {
                    tracing::warn!(%error, "memory write observer failed");
                }
            }
            Ok(output)
        })
    }
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;
    use saint_memory::{IndexOptions, LocalMiniLm, MemoryIndex, Scope, SearchRequest};

    use super::*;
    use crate::{
        apply_patch::ApplyPatchTool,
        test_fixtures::{self, CallPermitted},
        write::WriteTool,
    };

    fn recording() -> (WriteObserver, Arc<Mutex<Vec<String>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let observer: WriteObserver = Arc::new(move |paths: &[String]| {
            sink.lock().extend(paths.iter().cloned());
        });
        (observer, seen)
    }

    #[tokio::test]
    async fn only_memory_paths_reach_the_observer() {
        let workspace = tempfile::tempdir().expect("tempdir");
        let context = test_fixtures::context(workspace.path(), "acme-ana");
        let (observer, seen) = recording();
        let write = ObservedWrites::new(Arc::new(WriteTool), Arc::clone(&observer));
        write
            .call_permitted(
                &context,
                serde_json::json!({"path": "data/a.txt", "content": "x"}),
            )
            .await
            .expect("write data");
        write
            .call_permitted(
                &context,
                serde_json::json!({"path": "memory/shared/a.md", "content": "x"}),
            )
            .await
            .expect("write memory");
        let patch = ObservedWrites::new(Arc::new(ApplyPatchTool), observer);
        patch
            .call_permitted(
                &context,
                serde_json::json!({"patch": "*** Begin Patch\n*** Add File: MEMORY.md\n+hello\n*** Add File: data/b.txt\n+b\n*** End Patch\n"}),
            )
            .await
            .expect("patch");
        assert_eq!(*seen.lock(), ["memory/shared/a.md", "MEMORY.md"]);
    }

    #[tokio::test]
    async fn a_memory_file_written_by_the_agent_is_searchable_at_once() {
        let model = match LocalMiniLm::load(&saint_memory::default_model_dir()) {
            Ok(model) => Arc::new(model),
            Err(error) => {
                panic!("this test needs the model (run agent-pod/memory/fetch-model.sh): {error}")
            }
        };
        let workspace = tempfile::tempdir().expect("tempdir");
        // No watcher: only the write hook can index the new file.
        let index =
            Arc::new(MemoryIndex::open(IndexOptions::new(workspace.path()), model).expect("index"));
        let observed = Arc::clone(&index);
        let observer: WriteObserver = Arc::new(move |paths: &[String]| {
            observed.reindex_paths(paths).expect("reindex");
        });
        let write = ObservedWrites::new(Arc::new(WriteTool), observer);
        let context = test_fixtures::context(workspace.path(), "acme-ana");
        let scope = Scope::from_globs(["memory/*", "MEMORY.md"]);
        let search = |index: &MemoryIndex| {
            index
                .search(&SearchRequest {
                    query: "where do visitors park their cars",
                    k: 3,
                    scope: &scope,
                })
                .expect("search")
        };
        assert!(search(&index).is_empty(), "the index starts empty");
        write
            .call_permitted(
                &context,
                serde_json::json!({
                    "path": "memory/shared/parking.md",
                    "content": "# Parking\n\nGuests leave their vehicles in the garage behind building B, level -2.\n"
                }),
            )
            .await
            .expect("write");
        let hits = search(&index);
        assert_eq!(hits.len(), 1, "{hits:?}");
        assert_eq!(hits[0].path, "memory/shared/parking.md");
        assert!(hits[0].snippet.contains("building B"));
    }
}
