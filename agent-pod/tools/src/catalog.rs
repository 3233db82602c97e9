//! Builds the file, web, messaging, session and skill tools of this crate.
//!
//! Construction only: the runtime passes what the tools need (outbox, session
//! directory, SSRF guard, secret lookup); the policy decides what each role sees.

use std::sync::Arc;

use super::{
    Tool,
    apply_patch::ApplyPatchTool,
    edit::EditTool,
    exec::ExecUnavailableTool,
    message::{MessageTool, Outbox},
    process::ProcessUnavailableTool,
    read::ReadTool,
    session_directory::SessionDirectory,
    sessions_history::SessionsHistoryTool,
    sessions_list::SessionsListTool,
    skills::SkillTool,
    web_fetch::WebFetchTool,
    web_search::{SecretLookup, WebSearchTool},
    write::WriteTool,
};
use crate::guard::ssrf::{FetchLimits, SsrfGuard};

/// What the tools of this catalog depend on.
#[derive(Clone)]
pub struct CatalogDependencies {
    /// Where `message` delivers.
    pub outbox: Arc<dyn Outbox>,
    /// What `sessions_list` / `sessions_history` read.
    pub sessions: Arc<dyn SessionDirectory>,
    /// The SSRF guard `web_fetch` uses.
    pub ssrf: Arc<SsrfGuard>,
    /// `web_fetch` limits.
    pub fetch_limits: FetchLimits,
    /// How `web_search` reads its API key (by environment variable name).
    pub secrets: SecretLookup,
}

impl CatalogDependencies {
    /// Production defaults: system resolver, default limits, keys from the environment.
    pub fn new(outbox: Arc<dyn Outbox>, sessions: Arc<dyn SessionDirectory>) -> Self {
        Self {
            outbox,
            sessions,
            ssrf: Arc::new(SsrfGuard::default()),
            fetch_limits: FetchLimits::default(),
            secrets: Arc::new(|name: &str| std::env::var(name).ok()),
        }
    }
}

/// Every tool this catalog provides, in `saint_config::KNOWN_TOOLS` order. `exec` is
/// the fail-closed placeholder; the policy withholds it from every role anyway.
pub fn all_tools(dependencies: CatalogDependencies) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ReadTool),
        Arc::new(WriteTool),
        Arc::new(EditTool),
        Arc::new(ApplyPatchTool),
        Arc::new(ExecUnavailableTool),
        Arc::new(ProcessUnavailableTool),
        Arc::new(WebSearchTool::new(dependencies.secrets)),
        Arc::new(WebFetchTool::new(
            dependencies.ssrf,
            dependencies.fetch_limits,
        )),
        Arc::new(MessageTool::new(dependencies.outbox)),
        Arc::new(SessionsListTool::new(dependencies.sessions.clone())),
        Arc::new(SessionsHistoryTool::new(dependencies.sessions)),
        Arc::new(SkillTool),
    ]
}
