//! Sub-agents: `sessions_spawn` starts a child turn in the background as the caller,
//! never wider. (Skeleton: the helper building #19 item 3 owns this module.)

use std::sync::Arc;

use saint_tools::Tool;

use crate::runtime::Runtime;

/// Running sub-agents and the `sessions_spawn` tool that starts them.
#[derive(Default)]
pub struct Subagents {}

impl Subagents {
    /// An empty registry.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The `sessions_spawn` tool.
    pub fn tool(self: &Arc<Self>) -> Option<Arc<dyn Tool>> {
        None
    }

    /// Gives the registry the runtime children run in (held weakly).
    pub fn attach(&self, _runtime: &Arc<Runtime>) {}

    /// Cancels every running child and waits for them; returns how many were running.
    pub async fn shutdown(&self) -> usize {
        0
    }
}
