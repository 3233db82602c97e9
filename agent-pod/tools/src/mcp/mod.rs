//! Tools from Model Context Protocol servers (`mcp.servers` of the bot config).
//!
//! Each server's tools become ordinary [`Tool`]s named `<server>.<tool>`: the policy
//! shows and permits them per role like built-in tools (deny wins), and every call goes
//! through the same permit, metering and budget path. What they add:
//! - **Where they run.** A Streamable HTTP server is reached only through Porter's proxy
//!   with a key bound to the caller ([`streamable_http`]), so Porter injects the
//!   server's credential and applies the role's request rules; the agent holds a
//!   placeholder at most. A stdio server runs in the caller's sandbox, one process per
//!   listing or call ([`stdio`]), never in the agent.
//! - **What reaches the prompt.** Names outside `[A-Za-z0-9_-]`, schemas that are not
//!   objects or are larger than the server's `maxSchemaBytes`, and tools beyond its
//!   `maxTools` are dropped when the server is listed; results are capped and marked
//!   untrusted, so a server cannot speak as the bot, and nothing it returns changes the
//!   caller's role or tools (those are fixed before the turn starts).

pub mod stdio;
pub mod streamable_http;

use parking_lot::Mutex;
use std::{
    collections::HashSet,
    sync::{Arc, OnceLock},
    time::{Duration, Instant},
};

use futures::future::BoxFuture;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use saint_config::{BotConfig, McpServerConfig, McpTransport, RoleConfig, mcp};
use serde_json::{Map, Value, json};

use crate::{Caller, Permit, Tool, ToolContext, ToolError, ToolOutput, Trigger, policy, untrusted};

/// Longest tool description kept from a server (characters).
const MAX_DESCRIPTION_CHARS: usize = 1_000;

/// A tool as a server described it, before Saint names it.
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteTool {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// Why a server could not be listed or called. The message is what the model (for a
/// call) or the log (for a listing) sees: it never carries a key or a placeholder.
#[derive(Debug, Clone, thiserror::Error)]
pub enum McpError {
    #[error("MCP server {server} is not reachable: {reason}")]
    Unreachable { server: String, reason: String },
    #[error("MCP server {server} answered with a protocol error: {reason}")]
    Protocol { server: String, reason: String },
    #[error("MCP server {server} did not answer within {seconds} s")]
    Timeout { server: String, seconds: u64 },
}

/// How one server is reached: Streamable HTTP through Porter, or stdio in the sandbox.
pub enum ServerLink {
    Http(streamable_http::HttpLink),
    Stdio(stdio::StdioLink),
}

impl ServerLink {
    async fn list(&self, context: &ToolContext) -> Result<Vec<RemoteTool>, McpError> {
        match self {
            ServerLink::Http(link) => link.list(context).await,
            ServerLink::Stdio(link) => link.list(context).await,
        }
    }

    async fn call(
        &self,
        context: &ToolContext,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<CallToolResult, McpError> {
        match self {
            ServerLink::Http(link) => link.call(context, tool, arguments).await,
            ServerLink::Stdio(link) => link.call(context, tool, arguments).await,
        }
    }
}

/// One server as the runtime holds it.
pub struct Server {
    pub config: McpServerConfig,
    pub link: ServerLink,
}

/// A tool of a server, offered to roles that may use `<server>.<tool>`.
pub struct McpTool {
    name: &'static str,
    remote: String,
    description: String,
    input_schema: Value,
    server: Arc<Server>,
}

impl McpTool {
    /// The tool `remote` of `server`, as listed.
    pub fn new(server: Arc<Server>, remote: RemoteTool) -> Self {
        Self {
            name: intern(mcp::tool_name(&server.config.name, &remote.name)),
            description: format!(
                "[from MCP server {}] {}",
                server.config.name, remote.description
            ),
            remote: remote.name,
            input_schema: remote.input_schema,
            server,
        }
    }
}

impl Tool for McpTool {
    fn name(&self) -> &'static str {
        self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Value {
        self.input_schema.clone()
    }

    fn call<'a>(
        &'a self,
        permit: &'a Permit,
        context: &'a ToolContext,
        input: Value,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            permit.covers(self.name, &context.caller)?;
            let arguments = match input {
                Value::Object(arguments) => arguments,
                Value::Null => Map::new(),
                _ => {
                    return Err(ToolError::InvalidInput(
                        "the input must be an object".to_string(),
                    ));
                }
            };
            let config = &self.server.config;
            let started = Instant::now();
            let result = self
                .server
                .link
                .call(context, &self.remote, arguments)
                .await
                .map_err(|error| {
                    tracing::warn!(server = %config.name, tool = %self.remote, %error, "MCP call failed");
                    ToolError::Failed(error.to_string())
                })?;
            let (text, truncated) = render_result(&result, config.max_result_chars as usize);
            let mut metering = Map::new();
            metering.insert("mcpServer".to_string(), json!(config.name));
            metering.insert("mcpTool".to_string(), json!(self.remote));
            metering.insert(
                "durationMs".to_string(),
                json!(started.elapsed().as_millis() as u64),
            );
            metering.insert("resultChars".to_string(), json!(text.chars().count()));
            metering.insert("truncated".to_string(), json!(truncated));
            let source = format!("the MCP server {}", config.name);
            if result.is_error == Some(true) {
                return Err(ToolError::Failed(untrusted::wrap(
                    &format!("{source} (it reported an error)"),
                    &text,
                )));
            }
            Ok(ToolOutput {
                content: untrusted::wrap(&source, &text),
                untrusted: true,
                metering,
                image: None,
                audio: None,
            })
        })
    }
}

/// The text the model gets from a result: text blocks as they are, other blocks as a
/// short note, structured content when there is no text; capped at `limit` characters.
pub fn render_result(result: &CallToolResult, limit: usize) -> (String, bool) {
    let mut parts: Vec<String> = Vec::new();
    for block in &result.content {
        parts.push(match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => format!("[image omitted: {}]", image.mime_type),
            ContentBlock::Audio(audio) => format!("[audio omitted: {}]", audio.mime_type),
            ContentBlock::Resource(resource) => match &resource.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    format!("[resource {uri}]\n{text}")
                }
                ResourceContents::BlobResourceContents { uri, .. } => {
                    format!("[binary resource omitted: {uri}]")
                }
                _ => "[resource omitted]".to_string(),
            },
            ContentBlock::ResourceLink(link) => format!("[resource link: {}]", link.uri),
            _ => "[content omitted: a kind this agent does not read]".to_string(),
        });
    }
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    let text = parts.join("\n");
    let total = text.chars().count();
    if total <= limit {
        return (text, false);
    }
    let mut kept: String = text.chars().take(limit).collect();
    kept.push_str(&format!(
        "\n[truncated: showing {limit} of {total} characters]"
    ));
    (kept, true)
}

/// Keeps the tools Saint can offer: well-named, object schemas within the size cap, at
/// most `max_tools`; says in the log why each other one was dropped.
pub fn admit_tools(config: &McpServerConfig, listed: Vec<RemoteTool>) -> Vec<RemoteTool> {
    let mut admitted: Vec<RemoteTool> = Vec::new();
    for mut tool in listed {
        let server = &config.name;
        if !mcp::is_tool_name(server, &tool.name) {
            tracing::warn!(%server, tool = %tool.name.chars().take(80).collect::<String>(), "MCP tool dropped: its name is not [A-Za-z0-9_-] or too long for a model API");
            continue;
        }
        if admitted.iter().any(|kept| kept.name == tool.name) {
            tracing::warn!(%server, tool = %tool.name, "MCP tool dropped: the server listed its name twice");
            continue;
        }
        let Some(schema) = tool.input_schema.as_object_mut() else {
            tracing::warn!(%server, tool = %tool.name, "MCP tool dropped: its input schema is not an object");
            continue;
        };
        match schema.get("type") {
            None => {
                schema.insert("type".to_string(), json!("object"));
            }
            Some(kind) if kind == "object" => {}
            Some(_) => {
                tracing::warn!(%server, tool = %tool.name, "MCP tool dropped: its input schema does not describe an object");
                continue;
            }
        }
        tool.description = tool
            .description
            .chars()
            .filter(|c| !c.is_control() || *c == '\n')
            .take(MAX_DESCRIPTION_CHARS)
            .collect();
        let size = tool.description.len() + tool.input_schema.to_string().len();
        if size > config.max_schema_bytes as usize {
            tracing::warn!(%server, tool = %tool.name, bytes = size, limit = config.max_schema_bytes, "MCP tool dropped: its description and schema exceed maxSchemaBytes");
            continue;
        }
        if admitted.len() >= config.max_tools as usize {
            tracing::warn!(%server, tool = %tool.name, limit = config.max_tools, "MCP tool dropped: the server lists more than maxTools");
            continue;
        }
        admitted.push(tool);
    }
    admitted
}

/// The role a server is listed as: the first role (by name) allowed some tool of it.
/// A listing is a request like any other (Porter checks the role's rules), and no
/// role that may use none of the server's tools needs it listed at all.
pub fn listing_role<'a>(config: &'a BotConfig, server: &str) -> Option<(&'a str, &'a RoleConfig)> {
    // Any tool name of the server, for globs that do not name it (`*`).
    let some_tool = mcp::tool_name(server, "x");
    config.roles.iter().find_map(|(name, role)| {
        let names_server = |pattern: &String| {
            mcp::pattern_server(pattern) == Some(server)
                || (!pattern.contains('.') && policy::pattern_matches(pattern, &some_tool))
        };
        let denied_whole = role.tools.deny.iter().any(|pattern| {
            pattern == &format!("{server}.*") || policy::pattern_matches(pattern, &some_tool)
        });
        (role.tools.allow.iter().any(names_server) && !denied_whole)
            .then_some((name.as_str(), role))
    })
}

/// The context a listing runs in: the bot itself, in the listing role, in a session of
/// its own (so its sandbox is nobody else's).
pub fn listing_context(
    config: &Arc<BotConfig>,
    workspace: &std::path::Path,
    server: &str,
    role_name: &str,
    role: &RoleConfig,
) -> ToolContext {
    ToolContext {
        caller: Caller {
            slug: "saint-mcp-listing".to_string(),
            display_name: "MCP listing".to_string(),
            role_name: role_name.to_string(),
            role: Arc::new(role.clone()),
            known: false,
            identity: format!("saint:mcp-listing/{server}"),
            session_key: format!("mcp-listing:{server}"),
            trigger: Trigger::Heartbeat,
            depth: 0,
            may_message: None,
        },
        workspace: workspace.to_path_buf(),
        config: config.clone(),
    }
}

/// Lists every server (all at once) and returns its admitted tools, with one line per
/// server for the start-up notices. A server that cannot be listed offers no tools
/// (said in the notice and the log); the others are unaffected.
pub async fn discover(
    config: &Arc<BotConfig>,
    workspace: &std::path::Path,
    servers: Vec<Arc<Server>>,
) -> (Vec<Arc<dyn Tool>>, Vec<String>) {
    let listings = servers.into_iter().map(|server| async move {
        let name = server.config.name.clone();
        let Some((role_name, role)) = listing_role(config, &name) else {
            return (
                Vec::new(),
                format!("mcp {name}: not listed — no role allows its tools"),
            );
        };
        let context = listing_context(config, workspace, &name, role_name, role);
        let seconds = server.config.timeout_seconds;
        let listed =
            match tokio::time::timeout(Duration::from_secs(seconds), server.link.list(&context))
                .await
            {
                Ok(listed) => listed,
                Err(_) => Err(McpError::Timeout {
                    server: name.clone(),
                    seconds,
                }),
            };
        match listed {
            Ok(listed) => {
                let admitted = admit_tools(&server.config, listed);
                tracing::info!(server = %name, tools = admitted.len(), "MCP server listed");
                let notice = format!("mcp {name}: {} tools", admitted.len());
                let tools: Vec<Arc<dyn Tool>> = admitted
                    .into_iter()
                    .map(|remote| Arc::new(McpTool::new(server.clone(), remote)) as Arc<dyn Tool>)
                    .collect();
                (tools, notice)
            }
            Err(error) => {
                tracing::warn!(%error, "MCP server not listed; its tools are not offered");
                (Vec::new(), format!("mcp {name}: off — {error}"))
            }
        }
    });
    let mut tools = Vec::new();
    let mut notices = Vec::new();
    for (listed, notice) in futures::future::join_all(listings).await {
        tools.extend(listed);
        notices.push(notice);
    }
    (tools, notices)
}

/// How each transport of `config` is reached, for [`links_for`].
pub struct LinkParts {
    /// Porter's control socket client and the agent's relay to its proxy; none: HTTP
    /// servers are not reachable (the agent never connects to them directly).
    pub porter: Option<streamable_http::PorterRoute>,
    /// The sandbox stdio servers run in; none: stdio servers are not available.
    pub sandbox: Option<Arc<crate::exec::ExecTool>>,
}

/// The servers of `config` with their links; a server whose transport has no route
/// here is left out, with the notice saying why.
pub fn links_for(config: &BotConfig, parts: &LinkParts) -> (Vec<Arc<Server>>, Vec<String>) {
    let mut servers = Vec::new();
    let mut notices = Vec::new();
    for server in &config.mcp.servers {
        let link = match &server.transport {
            McpTransport::Http { url } => match &parts.porter {
                Some(route) => ServerLink::Http(streamable_http::HttpLink::new(
                    &server.name,
                    url,
                    server.credential.clone(),
                    route.clone(),
                    Duration::from_secs(server.timeout_seconds),
                )),
                None => {
                    notices.push(format!(
                        "mcp {}: off — HTTP servers are reached only through Porter, and none runs",
                        server.name
                    ));
                    continue;
                }
            },
            McpTransport::Stdio { command } => match &parts.sandbox {
                Some(sandbox) => ServerLink::Stdio(stdio::StdioLink::new(
                    &server.name,
                    command,
                    server.credential.is_some(),
                    sandbox.clone(),
                    Duration::from_secs(server.timeout_seconds),
                )),
                None => {
                    notices.push(format!(
                        "mcp {}: off — stdio servers run only in the sandbox, and none is available",
                        server.name
                    ));
                    continue;
                }
            },
        };
        servers.push(Arc::new(Server {
            config: server.clone(),
            link,
        }));
    }
    (servers, notices)
}

/// A `'static` name for a tool: the tool contract names tools with `&'static str`, and
/// a server's tool names are known only when it is listed. Each distinct name is kept
/// once for the life of the process, so listings again (restarts of a server, reloads)
/// add nothing; the set is bounded by the servers' `maxTools`.
fn intern(name: String) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES.get_or_init(Mutex::default).lock();
    if let Some(existing) = names.get(name.as_str()) {
        return existing;
    }
    let leaked: &'static str = Box::leak(name.into_boxed_str());
    names.insert(leaked);
    leaked
}

#[cfg(test)]
mod tests;
