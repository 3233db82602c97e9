//! Tool servers over the Model Context Protocol: the contract between the operator
//! (which renders `spec.mcp.servers[]` and the Porter registry entry of each server),
//! Porter (which holds the server's credential) and the agent (which lists and calls
//! the tools).
//!
//! A server's tools are named `<server>.<tool>` in roles, usage lines and metrics; the
//! model sees `<server>__<tool>`, because model APIs allow only `[A-Za-z0-9_-]` in tool
//! names. Server names have no `_`, so the split is unambiguous.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Longest server name.
pub const MAX_SERVER_NAME_CHARS: usize = 31;

/// Longest tool name a model API accepts (Anthropic's and OpenAI's limit).
pub const MAX_MODEL_TOOL_NAME_CHARS: usize = 64;

/// Separator between server and tool in the name the model sees.
pub const MODEL_NAME_SEPARATOR: &str = "__";

/// Prefix of the Porter registry entry that holds a server's credential.
pub const PORTER_ENTRY_PREFIX: &str = "mcp-";

/// Tool servers the bot uses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpConfig {
    /// The servers, in declaration order; names are unique.
    #[serde(default)]
    pub servers: Vec<McpServerConfig>,
}

impl McpConfig {
    pub(crate) fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The server called `name`.
    pub fn server(&self, name: &str) -> Option<&McpServerConfig> {
        self.servers.iter().find(|server| server.name == name)
    }
}

/// One tool server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpServerConfig {
    /// `[a-z][a-z0-9-]{0,30}`: the namespace of its tools (`<name>.<tool>`).
    pub name: String,
    /// How the agent reaches it.
    pub transport: McpTransport,
    /// The credential Porter injects for it; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<McpCredential>,
    /// Most tools taken from the server (the rest are dropped with a warning).
    #[serde(default = "default_max_tools")]
    pub max_tools: u32,
    /// Most bytes of one tool's description plus input schema given to the model; a
    /// larger tool is dropped with a warning.
    #[serde(default = "default_max_schema_bytes")]
    pub max_schema_bytes: u32,
    /// Most characters of one call's result given to the model.
    #[serde(default = "default_max_result_chars")]
    pub max_result_chars: u32,
    /// Seconds one call (or one listing) may take.
    #[serde(default = "default_timeout_seconds")]
    pub timeout_seconds: u64,
}

fn default_max_tools() -> u32 {
    64
}

fn default_max_schema_bytes() -> u32 {
    16 * 1024
}

fn default_max_result_chars() -> u32 {
    20_000
}

fn default_timeout_seconds() -> u64 {
    60
}

/// How the agent reaches a server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum McpTransport {
    /// Streamable HTTP at this `https` URL, always through Porter's proxy (Porter
    /// refuses hosts no registry entry names).
    Http { url: String },
    /// A stdio server: this command runs in the caller's sandbox for each listing and
    /// each call (no state survives between calls, and none is shared between people),
    /// with the sandbox's network (Porter's proxy only) and Porter's placeholders.
    Stdio { command: Vec<String> },
}

/// The credential Porter holds for a server: the agent and the sandbox hold only a
/// placeholder, which Porter swaps on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpCredential {
    /// The Porter registry entry (`mcp-<server>`).
    pub porter_entry: String,
    /// The variable of the command environment Porter answers with that holds this
    /// entry's placeholder (one of the entry's `placeholderEnv`).
    pub placeholder_env: String,
    /// HTTP servers: the request header that carries the placeholder. `Authorization`
    /// sends `Bearer <placeholder>`; any other header sends the placeholder alone.
    #[serde(default = "default_header")]
    pub header: String,
}

fn default_header() -> String {
    "Authorization".to_string()
}

/// The Porter registry entry for server `server`.
pub fn porter_entry_name(server: &str) -> String {
    format!("{PORTER_ENTRY_PREFIX}{server}")
}

/// The placeholder variable the operator renders for server `server`
/// (`SAINT_MCP_DOCS_TOKEN` for `docs`).
pub fn placeholder_env_name(server: &str) -> String {
    format!(
        "SAINT_MCP_{}_TOKEN",
        server.to_ascii_uppercase().replace('-', "_")
    )
}

/// Whether `name` is a valid server name.
pub fn is_server_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|first| first.is_ascii_lowercase())
        && name.len() <= MAX_SERVER_NAME_CHARS
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Whether `name` is a tool name Saint takes from a server (`[A-Za-z0-9_-]`, and short
/// enough that `<server>__<name>` fits a model API).
pub fn is_tool_name(server: &str, name: &str) -> bool {
    !name.is_empty()
        && server.len() + MODEL_NAME_SEPARATOR.len() + name.len() <= MAX_MODEL_TOOL_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// `<server>.<tool>`: the name roles, usage lines and metrics use.
pub fn tool_name(server: &str, tool: &str) -> String {
    format!("{server}.{tool}")
}

/// The name the model sees for a tool: `<server>__<tool>` for a server's tool, the name
/// itself for a built-in tool.
pub fn model_tool_name(name: &str) -> std::borrow::Cow<'_, str> {
    match name.split_once('.') {
        Some((server, tool)) => format!("{server}{MODEL_NAME_SEPARATOR}{tool}").into(),
        None => name.into(),
    }
}

/// The server a role's tool pattern names (`docs` for `docs.search` or `docs.*`), if
/// it names a server's tools at all.
pub fn pattern_server(pattern: &str) -> Option<&str> {
    pattern
        .split_once('.')
        .map(|(server, _)| server)
        .filter(|server| is_server_name(server))
}

/// Whether `pattern` has the shape of a server tool pattern: `<server>.<tool>` or a
/// glob over the tool part (`docs.*`, `docs.get_*`).
pub fn is_server_tool_pattern(pattern: &str) -> bool {
    let Some((server, tool)) = pattern.split_once('.') else {
        return false;
    };
    is_server_name(server)
        && !tool.is_empty()
        && tool.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*' | '?' | '[' | ']' | '!')
        })
        && globset::Glob::new(tool).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_the_model_and_back_unambiguously() {
        assert_eq!(model_tool_name("docs.search"), "docs__search");
        assert_eq!(model_tool_name("read"), "read");
        assert_eq!(model_tool_name("my-server.get_page"), "my-server__get_page");
        assert_eq!(porter_entry_name("docs"), "mcp-docs");
        assert_eq!(placeholder_env_name("my-docs"), "SAINT_MCP_MY_DOCS_TOKEN");
    }

    #[test]
    fn server_and_tool_names_are_checked() {
        assert!(is_server_name("docs"));
        assert!(is_server_name("a-1"));
        for bad in ["", "Docs", "1docs", "do_cs", "do.cs", &"a".repeat(32)] {
            assert!(!is_server_name(bad), "{bad:?}");
        }
        assert!(is_tool_name("docs", "search_pages"));
        for bad in ["", "a.b", "a b", "ä", "a/b", &"t".repeat(59)] {
            assert!(!is_tool_name("docs", bad), "{bad:?}");
        }
    }

    #[test]
    fn role_patterns_name_a_server() {
        assert_eq!(pattern_server("docs.*"), Some("docs"));
        assert_eq!(pattern_server("read"), None);
        assert!(is_server_tool_pattern("docs.*"));
        assert!(is_server_tool_pattern("docs.get_*"));
        assert!(is_server_tool_pattern("docs.search"));
        for bad in ["docs.", ".x", "Docs.x", "docs.a/b", "docs.{a,b}", "docs"] {
            assert!(!is_server_tool_pattern(bad), "{bad:?}");
        }
    }
}
