//! Wires the bot's MCP servers (`mcp.servers`) at start: each server's route (Porter
//! for HTTP, the sandbox for stdio), then one listing per server, all at once, so a
//! slow server delays start by its own timeout at most, not by the sum.
//!
//! The servers are listed once per start; a changed `mcp` section takes effect when the
//! agent restarts (in a cluster the config hash restarts the pod; locally the config
//! watcher says so).

use std::{path::Path, sync::Arc};

use saint_config::{BotConfig, ErrorChain};
use saint_sandbox::{backend::ExecBackend, porter_control::PorterControl};
use saint_tools::{
    Tool,
    exec::ExecTool,
    mcp::{self, LinkParts, streamable_http::PorterRoute},
};

/// The routes MCP servers can take from what `exec` got: Porter (its control socket,
/// proxy and CA) and the sandbox tool.
pub async fn parts(
    backend: Option<(&ExecBackend, Arc<ExecTool>)>,
    config: &BotConfig,
) -> LinkParts {
    let Some((backend, exec)) = backend else {
        return LinkParts {
            porter: None,
            sandbox: None,
        };
    };
    let porter = match (&backend.porter, config.mcp.servers.is_empty()) {
        (Some(control), false) => route(control.clone(), backend).await,
        _ => None,
    };
    LinkParts {
        porter,
        sandbox: Some(exec),
    }
}

async fn route(control: PorterControl, backend: &ExecBackend) -> Option<PorterRoute> {
    match PorterRoute::start(control, &backend.proxy_socket, backend.porter_ca_file()).await {
        Ok(route) => Some(route),
        Err(error) => {
            tracing::warn!(error = %ErrorChain(&error), "no relay to Porter: MCP servers over HTTP are off");
            None
        }
    }
}

/// The tools of every server of `config` that could be listed, and one notice line
/// per server.
pub async fn tools(
    config: &Arc<BotConfig>,
    workspace: &Path,
    parts: &LinkParts,
) -> (Vec<Arc<dyn Tool>>, Vec<String>) {
    let (servers, mut notices) = mcp::links_for(config, parts);
    let (tools, listed) = mcp::discover(config, workspace, servers).await;
    notices.extend(listed);
    (tools, notices)
}
