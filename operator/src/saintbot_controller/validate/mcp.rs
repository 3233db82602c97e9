//! MCP tool servers: `spec.mcp.servers[]` rendered into the bot config's `mcp`, with
//! each credential named as the Porter entry `mcp-<server>` that holds it (the entry
//! itself is rendered with the CLIs' in `porter`). Re-checks what CEL may not have (the
//! CRD could be installed without validation, or an older version) and what CEL cannot
//! express: a url's host among the server's hosts. Pure.

use std::collections::{BTreeMap, BTreeSet};

use porter_protocol::registry::{https_url_host, split_host};
use saint_config::{
    McpConfig, McpCredential, McpServerConfig, McpTransport, RoleConfig, is_https_url,
    mcp::{is_server_name, pattern_server, placeholder_env_name, porter_entry_name},
};

use super::ValidateError;
use crate::crd::{
    mcp::{McpServerSpec, McpSpec},
    saintbot::InjectSpec,
};

/// The header a url server's placeholder travels in when `inject` names none.
const AUTHORIZATION: &str = "Authorization";

fn invalid(server: &str, field: &str, message: impl Into<String>) -> ValidateError {
    ValidateError::InvalidMcpServer {
        field: format!("spec.mcp.servers[{server}].{field}"),
        message: message.into(),
    }
}

/// The bot config's `mcp`: one entry per server, in spec order, limits left out taking
/// the contract's defaults.
pub(super) fn render_mcp(spec: &McpSpec) -> Result<McpConfig, ValidateError> {
    let mut seen = BTreeSet::new();
    let mut servers = Vec::with_capacity(spec.servers.len());
    for server in &spec.servers {
        if !is_server_name(&server.name) {
            return Err(ValidateError::InvalidMcpServer {
                field: "spec.mcp.servers[].name".to_string(),
                message: format!(
                    "{:?} must be lower-case letters, digits and '-', starting with a letter, \
                     at most {} characters",
                    server.name,
                    saint_config::mcp::MAX_SERVER_NAME_CHARS
                ),
            });
        }
        if !seen.insert(server.name.as_str()) {
            return Err(invalid(&server.name, "name", "is declared twice"));
        }
        servers.push(render_server(server)?);
    }
    Ok(McpConfig { servers })
}

fn render_server(server: &McpServerSpec) -> Result<McpServerConfig, ValidateError> {
    let name = server.name.as_str();
    let transport = match (&server.url, &server.command) {
        (Some(url), None) => {
            check_url_server(server, url)?;
            McpTransport::Http { url: url.clone() }
        }
        (None, Some(command)) => {
            if command.first().is_none_or(|program| program.is_empty()) {
                return Err(invalid(
                    name,
                    "command",
                    "must name the program to run (and its arguments)",
                ));
            }
            McpTransport::Stdio {
                command: command.clone(),
            }
        }
        _ => {
            return Err(invalid(
                name,
                "url",
                "a server is exactly one of url (a Streamable HTTP server) or command (a stdio \
                 server run in the caller's sandbox)",
            ));
        }
    };
    check_credential(server)?;
    let credential = server.secret_key_ref.as_ref().map(|_| McpCredential {
        porter_entry: porter_entry_name(name),
        placeholder_env: placeholder_env_name(name),
        header: credential_header(&server.inject).to_string(),
    });
    // Limits the spec leaves out take the contract's own defaults (its serde defaults).
    let mut rendered = serde_json::json!({"name": name, "transport": transport});
    if let Some(credential) = credential {
        rendered["credential"] = serde_json::to_value(credential).expect("a credential serialises");
    }
    for (key, value) in [
        ("maxTools", server.max_tools.map(u64::from)),
        ("maxSchemaBytes", server.max_schema_bytes.map(u64::from)),
        ("maxResultChars", server.max_result_chars.map(u64::from)),
        ("timeoutSeconds", server.timeout_seconds),
    ] {
        if let Some(value) = value {
            rendered[key] = value.into();
        }
    }
    Ok(serde_json::from_value(rendered).expect("a server config from its own fields"))
}

/// The request header the agent sends a url server's placeholder in: the one
/// `{header: NAME}` of `inject`, else `Authorization` (as `Bearer <placeholder>`).
fn credential_header(inject: &[InjectSpec]) -> &str {
    match inject {
        [
            InjectSpec {
                authorization: None,
                header: Some(header),
                query: None,
            },
        ] => header,
        _ => AUTHORIZATION,
    }
}

/// A url server is reached only through Porter's proxy: it needs a credential, its host
/// among `hosts`, and the placeholder in one header the agent sends.
fn check_url_server(server: &McpServerSpec, url: &str) -> Result<(), ValidateError> {
    let name = server.name.as_str();
    let Some(host) = https_url_host(url).filter(|_| is_https_url(url)) else {
        return Err(invalid(
            name,
            "url",
            format!(
                "{url:?} must be an https:// URL with a host and no user info (Porter's proxy \
                 speaks TLS only)"
            ),
        ));
    };
    if server.secret_key_ref.is_none() {
        return Err(invalid(
            name,
            "secretKeyRef",
            "a url server needs one: the agent reaches an HTTP server only through Porter's \
             proxy, and Porter serves only the hosts of an entry that holds a credential",
        ));
    }
    if !server
        .hosts
        .iter()
        .filter_map(|listed| split_host(listed))
        .any(|listed| listed == host)
    {
        return Err(invalid(
            name,
            "hosts",
            format!(
                "the url's host {}:{} must be among hosts: Porter's proxy, the agent's only way \
                 to the server, refuses every other host",
                host.0, host.1
            ),
        ));
    }
    let places_header = match server.inject.as_slice() {
        [] => true,
        [place] => place.query.is_none(),
        _ => false,
    };
    if !places_header {
        return Err(invalid(
            name,
            "inject",
            "a url server takes at most one place, {authorization: true} or {header: NAME}: the \
             agent sends the placeholder in that one header, never in a query parameter",
        ));
    }
    if !server.placeholder_env.is_empty() {
        return Err(invalid(
            name,
            "placeholderEnv",
            "is for stdio servers (command): the agent itself sends a url server's placeholder \
             in the inject header",
        ));
    }
    Ok(())
}

/// `hosts`, `inject`, `placeholderEnv` and `requests` describe the credential in
/// `secretKeyRef`: with one, `hosts` is required; without one, none of them applies.
fn check_credential(server: &McpServerSpec) -> Result<(), ValidateError> {
    let name = server.name.as_str();
    match &server.secret_key_ref {
        Some(reference) => {
            if reference.name.is_empty() || reference.key.is_empty() {
                return Err(invalid(
                    name,
                    "secretKeyRef",
                    "must name both a Secret (name) and a key in it (key)",
                ));
            }
            if server.hosts.is_empty() {
                return Err(invalid(
                    name,
                    "hosts",
                    "a server with a credential needs hosts: the only hosts (name or \
                     name:port) Porter lets its traffic reach with it",
                ));
            }
        }
        None => {
            for (field, set) in [
                ("hosts", !server.hosts.is_empty()),
                ("inject", !server.inject.is_empty()),
                ("placeholderEnv", !server.placeholder_env.is_empty()),
                ("requests", !server.requests.is_empty()),
            ] {
                if set {
                    return Err(invalid(
                        name,
                        field,
                        "describes the credential in secretKeyRef, which this server lacks: \
                         Porter holds nothing for it (and a stdio server without one reaches \
                         no host)",
                    ));
                }
            }
        }
    }
    Ok(())
}

/// A Role allowing a server the bot does not declare would allow nothing, silently (the
/// agent refuses such a config): refuse the bot naming the Role and the server.
pub(super) fn check_roles(
    roles: &BTreeMap<String, RoleConfig>,
    mcp: &McpConfig,
) -> Result<(), ValidateError> {
    for (role, config) in roles {
        if let Some((pattern, server)) = config.tools.allow.iter().find_map(|pattern| {
            pattern_server(pattern)
                .filter(|server| mcp.server(server).is_none())
                .map(|server| (pattern, server))
        }) {
            return Err(ValidateError::InvalidMcpServer {
                field: "spec.mcp.servers".to_string(),
                message: format!(
                    "Role {role:?} allows {pattern:?} (spec.tools.allow), but this bot declares \
                     no server {server:?}: declare it, or select Roles that do not name it"
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn mcp(servers: serde_json::Value) -> McpSpec {
        serde_json::from_value(json!({"servers": servers})).expect("mcp parses")
    }

    fn docs(extra: serde_json::Value) -> serde_json::Value {
        let mut server = json!({
            "name": "docs",
            "url": "https://docs.example.com/mcp",
            "hosts": ["docs.example.com"],
            "secretKeyRef": {"name": "docs-mcp", "key": "token"},
        });
        for (key, value) in extra.as_object().unwrap() {
            if value.is_null() {
                server.as_object_mut().unwrap().remove(key);
            } else {
                server[key] = value.clone();
            }
        }
        server
    }

    fn refusal(servers: serde_json::Value) -> String {
        match render_mcp(&mcp(servers)) {
            Ok(_) => "accepted".to_string(),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn a_url_server_with_a_secret_renders_its_credential_and_the_contract_defaults() {
        let config = render_mcp(&mcp(json!([docs(json!({}))]))).unwrap();
        assert_eq!(
            serde_json::to_value(&config).unwrap(),
            json!({"servers": [{
                "name": "docs",
                "transport": {"http": {"url": "https://docs.example.com/mcp"}},
                "credential": {
                    "porterEntry": "mcp-docs",
                    "placeholderEnv": "SAINT_MCP_DOCS_TOKEN",
                    "header": "Authorization",
                },
                // The defaults the CRD's field docs state.
                "maxTools": 64,
                "maxSchemaBytes": 16384,
                "maxResultChars": 20000,
                "timeoutSeconds": 60,
            }]})
        );
        let header = render_mcp(&mcp(json!([docs(json!({
            "inject": [{"header": "X-Api-Key"}],
            "maxTools": 5, "maxSchemaBytes": 100, "maxResultChars": 1000, "timeoutSeconds": 9,
        }))])))
        .unwrap();
        let server = &header.servers[0];
        assert_eq!(server.credential.as_ref().unwrap().header, "X-Api-Key");
        assert_eq!(
            (
                server.max_tools,
                server.max_schema_bytes,
                server.max_result_chars,
                server.timeout_seconds
            ),
            (5, 100, 1000, 9)
        );
    }

    #[test]
    fn a_stdio_server_without_a_secret_has_no_credential() {
        let config = render_mcp(&mcp(json!([{
            "name": "calc", "command": ["mcp-calc", "--stdio"],
        }])))
        .unwrap();
        assert_eq!(
            config.servers[0].transport,
            McpTransport::Stdio {
                command: vec!["mcp-calc".into(), "--stdio".into()]
            }
        );
        assert_eq!(config.servers[0].credential, None);
    }

    #[test]
    fn what_cel_refuses_is_refused_here_naming_the_field() {
        for (servers, expected) in [
            (
                json!([docs(json!({"command": ["x"]}))]),
                "spec.mcp.servers[docs].url: a server is exactly one of url",
            ),
            (
                json!([docs(json!({"url": null}))]),
                "spec.mcp.servers[docs].url: a server is exactly one of url",
            ),
            (
                json!([docs(json!({"secretKeyRef": null, "hosts": null}))]),
                "spec.mcp.servers[docs].secretKeyRef: a url server needs one",
            ),
            (
                json!([docs(json!({"hosts": null}))]),
                "spec.mcp.servers[docs].hosts: the url's host docs.example.com:443 must be among hosts",
            ),
            (
                json!([docs(json!({"url": "http://docs.example.com/mcp"}))]),
                "spec.mcp.servers[docs].url: \"http://docs.example.com/mcp\" must be an https:// URL",
            ),
            (
                json!([docs(json!({"inject": [{"query": "key"}]}))]),
                "spec.mcp.servers[docs].inject: a url server takes at most one place",
            ),
            (
                json!([docs(json!({"placeholderEnv": ["DOCS_TOKEN"]}))]),
                "spec.mcp.servers[docs].placeholderEnv: is for stdio servers",
            ),
            (
                json!([{"name": "calc", "command": ["c"], "hosts": ["calc.example.com"]}]),
                "spec.mcp.servers[calc].hosts: describes the credential in secretKeyRef",
            ),
            (
                json!([{"name": "calc", "command": ["c"],
                        "secretKeyRef": {"name": "calc", "key": "token"}}]),
                "spec.mcp.servers[calc].hosts: a server with a credential needs hosts",
            ),
            (
                json!([{"name": "calc", "command": [""]}]),
                "spec.mcp.servers[calc].command: must name the program",
            ),
            (
                json!([docs(json!({})), docs(json!({}))]),
                "spec.mcp.servers[docs].name: is declared twice",
            ),
            (
                json!([docs(json!({"name": "Docs"}))]),
                "spec.mcp.servers[].name: \"Docs\" must be lower-case letters",
            ),
        ] {
            let message = refusal(servers.clone());
            assert!(message.contains(expected), "{servers}: {message}");
        }
    }

    #[test]
    fn a_url_on_another_port_must_list_that_port() {
        assert!(
            refusal(json!([docs(
                json!({"url": "https://docs.example.com:8443/mcp"})
            )]))
            .contains("docs.example.com:8443 must be among hosts")
        );
        assert_eq!(
            refusal(json!([docs(json!({
                "url": "https://docs.example.com:8443/mcp",
                "hosts": ["Docs.Example.com:8443"],
            }))])),
            "accepted"
        );
    }

    #[test]
    fn a_role_allowing_an_undeclared_server_fails_the_bot_naming_role_and_server() {
        let role = |tools: serde_json::Value| -> RoleConfig {
            serde_json::from_value(json!({"tools": tools})).unwrap()
        };
        let mut roles = BTreeMap::from([(
            "owner".to_string(),
            role(json!({"allow": ["read", "wiki.*"]})),
        )]);
        let config = render_mcp(&mcp(json!([docs(json!({}))]))).unwrap();
        let message = check_roles(&roles, &config).unwrap_err().to_string();
        assert_eq!(
            message,
            "failed to render MCP servers: spec.mcp.servers: Role \"owner\" allows \"wiki.*\" \
             (spec.tools.allow), but this bot declares no server \"wiki\": declare it, or select \
             Roles that do not name it"
        );
        roles.insert(
            "owner".to_string(),
            role(json!({"allow": ["docs.*"], "deny": ["wiki.*"]})),
        );
        check_roles(&roles, &config).expect("denying an undeclared server is harmless");
    }
}
