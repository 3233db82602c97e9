//! The catalog of tool instances the runtime may offer: looked up by name, handed to
//! the policy module to pick what a role sees. Holds tools; decides nothing.

use std::{path::Path, sync::Arc};

use super::{
    Tool,
    catalog::{self, CatalogDependencies},
    message::FileOutbox,
    session_directory::SessionDirectory,
    web_search::SecretLookup,
};

/// Every tool built for this bot, in catalog order.
#[derive(Clone, Default)]
pub struct ToolSet {
    tools: Vec<Arc<dyn Tool>>,
}

impl ToolSet {
    /// A set of the given tools. A later tool with an already-used name is ignored, so
    /// a name always means one tool.
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        let mut unique: Vec<Arc<dyn Tool>> = Vec::with_capacity(tools.len());
        for tool in tools {
            if unique.iter().any(|existing| existing.name() == tool.name()) {
                tracing::warn!(tool = tool.name(), "duplicate tool name ignored");
                continue;
            }
            unique.push(tool);
        }
        Self { tools: unique }
    }

    /// The tools this build provides, wired to the bot's stores: the file, web,
    /// messaging and session tools of the catalog (`exec` there fails closed and the
    /// policy withholds it until the sandbox exists). Outbound messages are recorded in
    /// `logs/outbox.jsonl` until channel transports exist.
    pub fn builtin(
        workspace: &Path,
        sessions: Arc<dyn SessionDirectory>,
        secrets: SecretLookup,
    ) -> Self {
        let outbox = Arc::new(FileOutbox::new(workspace.join("logs").join("outbox.jsonl")));
        let mut dependencies = CatalogDependencies::new(outbox, sessions);
        dependencies.secrets = secrets;
        Self::new(catalog::all_tools(dependencies))
    }

    /// Replaces the tool of the same name (keeping its catalog position), or appends it.
    pub fn replace(mut self, tool: Arc<dyn Tool>) -> Self {
        match self
            .tools
            .iter()
            .position(|existing| existing.name() == tool.name())
        {
            Some(position) => self.tools[position] = tool,
            None => self.tools.push(tool),
        }
        self
    }

    /// Wraps the file-writing tools so the memory files they write reach `observer`
    /// (the memory index) right after each successful call.
    pub fn observe_writes(mut self, observer: super::write_observer::WriteObserver) -> Self {
        for tool in &mut self.tools {
            if super::write_observer::OBSERVED_TOOLS.contains(&tool.name()) {
                *tool = Arc::new(super::write_observer::ObservedWrites::new(
                    Arc::clone(tool),
                    Arc::clone(&observer),
                ));
            }
        }
        self
    }

    /// All tools.
    pub fn all(&self) -> &[Arc<dyn Tool>] {
        &self.tools
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|tool| tool.name() == name)
    }

    /// Tool names, in catalog order.
    pub fn names(&self) -> Vec<&'static str> {
        self.tools.iter().map(|tool| tool.name()).collect()
    }
}

impl std::fmt::Debug for ToolSet {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_list().entries(self.names()).finish()
    }
}
