//! Tool servers over the Model Context Protocol (`spec.mcp` of a SaintBot). Pure types;
//! the operator renders each server into the bot config (`saint_config::mcp`) and, for a
//! server with a credential, a Porter registry entry `mcp-<server>` holding it.
//!
//! Two kinds of server: a Streamable HTTP one (`url`), which the agent reaches only
//! through Porter's proxy, and a stdio one (`command`), run in the caller's sandbox for
//! each listing and each call. Either way the credential stays in the `porter`
//! container and the agent and sandbox hold only a placeholder.

use std::collections::BTreeMap;

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::{
    SecretKeyReference, channel_rules, formats, secret_key_rule,
    wire_rules::{InjectSpec, RequestRuleSpec},
};

/// Most servers one bot declares (bounds CEL's cost of the uniqueness rule).
pub const MAX_SERVERS: usize = 16;

/// A server name (`saint_config::mcp::is_server_name`): the namespace of its tools.
pub const SERVER_NAME_PATTERN: &str = "^[a-z][a-z0-9-]{0,30}$";

/// The bot's MCP tool servers.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "!has(self.servers) || self.servers.all(a, self.servers.exists_one(b, b.name == a.name))"
).message("mcp.servers[].name must be unique: the name is the namespace of the server's tools (<server>.<tool>)"))]
pub struct McpSpec {
    /// Tool servers, each with a unique name. A Role allows a server's tools as
    /// `<server>.<tool>` or a glob over the tool (`docs.*`, `docs.get_*`) in
    /// `tools.allow`; a Role allowing a server the bot does not declare fails the bot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_SERVERS))]
    pub servers: Vec<McpServerSpec>,
}

impl McpSpec {
    /// No server declared (the field is then left out when serialised).
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }
}

/// One MCP tool server: `url` (Streamable HTTP, reached through Porter's proxy) or
/// `command` (stdio, run in the caller's sandbox for each listing and each call, with
/// the sandbox's network: Porter's proxy only). Its credential, if any, is a Secret key
/// mounted into the `porter` container only (registry entry `mcp-<name>`); the agent
/// sends, and a stdio server's environment holds, only a placeholder that Porter swaps
/// on the wire for `hosts` and the requests `requests` admit.
#[derive(KubeSchema, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.url) != has(self.command)")
    .message("mcp.servers[] needs exactly one of url (a Streamable HTTP server) or command (a stdio server run in the caller's sandbox)"))]
#[x_kube(validation = Rule::new("!has(self.url) || has(self.secretKeyRef)")
    .message("mcp.servers[].url needs secretKeyRef: the agent reaches an HTTP server only through Porter's proxy, and Porter serves only the hosts of an entry that holds a credential"))]
#[x_kube(validation = Rule::new(
    "!(has(self.url) || has(self.secretKeyRef)) || (has(self.hosts) && size(self.hosts) > 0)"
).message("mcp.servers[].hosts is required with url or secretKeyRef: the only hosts (name or name:port) Porter lets this server's traffic reach with the credential (a url's host among them)"))]
#[x_kube(validation = Rule::new(
    "has(self.secretKeyRef) || has(self.url) || ((!has(self.hosts) || size(self.hosts) == 0) && (!has(self.inject) || size(self.inject) == 0) && (!has(self.placeholderEnv) || size(self.placeholderEnv) == 0) && (!has(self.requests) || size(self.requests) == 0))"
).message("mcp.servers[]: hosts, inject, placeholderEnv and requests describe the credential in secretKeyRef; without secretKeyRef Porter holds nothing for the server (and a stdio server without one reaches no host)"))]
#[x_kube(validation = Rule::new(
    "!has(self.url) || !has(self.inject) || (size(self.inject) <= 1 && self.inject.all(i, !has(i.query)))"
).message("mcp.servers[].inject of a url server is at most one place, {authorization: true} or {header: NAME}: the agent sends the placeholder in that one header, never in a query parameter"))]
#[x_kube(validation = Rule::new(
    "!has(self.url) || !has(self.placeholderEnv) || size(self.placeholderEnv) == 0"
).message("mcp.servers[].placeholderEnv is for stdio servers (command): the agent itself sends a url server's placeholder in the inject header"))]
pub struct McpServerSpec {
    /// Lower-case letters, digits and '-', starting with a letter, at most 31: the
    /// namespace of the server's tools (`<name>.<tool>` in Roles, usage and metrics).
    #[schemars(length(min = 1, max = 31))]
    #[x_kube(validation = Rule::new(format!("self.matches('{SERVER_NAME_PATTERN}')"))
        .message("mcp.servers[].name must be lower-case letters, digits and '-', starting with a letter, at most 31 characters"))]
    pub name: String,
    /// A Streamable HTTP server: its `https://` endpoint. The agent reaches it only
    /// through Porter's proxy, so it needs `secretKeyRef` and its host among `hosts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 9, max = 2048))]
    #[x_kube(validation = Rule::new(format!(
        "[self].all(v, v.startsWith('https://') && {})",
        channel_rules::HTTP_URL
    ))
    .message("mcp.servers[].url must be an https:// URL with a host (Porter's proxy speaks TLS only)"))]
    pub url: Option<String>,
    /// A stdio server: the program and its arguments, run in the caller's sandbox for
    /// each listing and each call (no state survives between calls, none is shared
    /// between people). The sandbox image must carry the program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), inner(length(min = 1, max = 4096)))]
    pub command: Option<Vec<String>>,
    /// The only hosts (`name` or `name:port`, port 443 by default) Porter lets this
    /// server's traffic reach with its credential; a url's host must be one of them. A
    /// host belongs to one Porter entry only (no CLI of `porter.clis` and no other
    /// server may name it). Required with `url` or `secretKeyRef`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 259)))]
    #[x_kube(validation = formats::hosts_rule("mcp.servers[].hosts[]"))]
    pub hosts: Vec<String>,
    /// Secret key holding the server's credential, mounted as a file into the `porter`
    /// container only; neither the agent nor any sandbox ever sees it. Required with
    /// `url`; absent: a stdio server without a credential (and so without a host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = secret_key_rule("mcp.servers[].secretKeyRef"))]
    pub secret_key_ref: Option<SecretKeyReference>,
    /// Where Porter swaps the placeholder for the secret, as for `porter.clis[].inject`.
    /// A url server takes one place, `{authorization: true}` (`Authorization: Bearer`) or
    /// `{header: NAME}`, the header the agent sends the placeholder in. Empty: the
    /// `Authorization` header.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8), transform = formats::retarget_messages("porter.clis[].inject", "mcp.servers[].inject"))]
    pub inject: Vec<InjectSpec>,
    /// Further variables of a stdio server's environment holding the placeholder
    /// (`DOCS_API_TOKEN`), beside `SAINT_MCP_<NAME>_TOKEN`, which always does. Like
    /// `porter.clis[].placeholderEnv`, every sandbox command gets them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 253)))]
    #[x_kube(validation = formats::env_name_list_rule("mcp.servers[].placeholderEnv"))]
    pub placeholder_env: Vec<String>,
    /// The requests each role may make with this credential, by role name (`*` for
    /// every role), as for `porter.clis[].requests`. Enforced by Porter on the wire for
    /// whatever sends them, so a role whose `exec` reaches Porter cannot use the server's
    /// credential beyond them. Empty: any request to `hosts`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(length(max = 64))]
    pub requests: BTreeMap<String, Vec<RequestRuleSpec>>,
    /// Most tools taken from the server; the rest are dropped with a warning. Default 64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub max_tools: Option<u32>,
    /// Most bytes of one tool's description and input schema given to the model; a
    /// larger tool is dropped with a warning. Default 16384.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1048576))]
    pub max_schema_bytes: Option<u32>,
    /// Most characters of one call's result given to the model. Default 20000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000000))]
    pub max_result_chars: Option<u32>,
    /// Seconds one call (or one listing) may take. Default 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub timeout_seconds: Option<u64>,
}
