//! Streamable HTTP servers, always through Porter.
//!
//! Each listing and each call registers a Porter key bound to the caller (session,
//! contact, role), opens one MCP session with the official SDK (`rmcp`) through
//! Porter's proxy with that key, and revokes the key after. Porter terminates TLS with
//! its own CA (the only root this client trusts), checks the request against the
//! role's rules for the server's registry entry, and swaps the placeholder the agent
//! sends for the credential. So the agent never holds the credential, and a role
//! Porter refuses cannot reach the server however the model asks.
//!
//! HTTP clients speak to proxies over TCP, and Porter listens on a unix socket: the
//! agent relays a loopback port to it ([`porter_protocol::relay`], the runner's relay).

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use rmcp::{
    ServiceExt,
    model::{CallToolRequestParams, CallToolResult},
    service::RunningService,
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use saint_config::{ErrorChain, McpCredential};
use saint_sandbox::porter_control::{PorterControl, Registration, TokenGrant};
use serde_json::{Map, Value};

use super::{McpError, RemoteTool};
use crate::ToolContext;

/// The way to Porter for HTTP servers: its control socket (keys), a loopback relay to
/// its proxy socket, and the file of its CA.
#[derive(Clone, Debug)]
pub struct PorterRoute {
    control: PorterControl,
    relay: SocketAddr,
    ca_file: PathBuf,
}

impl PorterRoute {
    /// Starts the relay to `proxy_socket` on a free loopback port (served until the
    /// runtime ends). `ca_file` is Porter's CA, read at each session (a restarted
    /// Porter makes a new one).
    pub async fn start(
        control: PorterControl,
        proxy_socket: &Path,
        ca_file: PathBuf,
    ) -> std::io::Result<Self> {
        let listener = porter_protocol::relay::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .map_err(std::io::Error::other)?;
        let relay = listener.local_addr()?;
        tokio::spawn(porter_protocol::relay::serve(
            listener,
            proxy_socket.to_path_buf(),
        ));
        Ok(Self {
            control,
            relay,
            ca_file,
        })
    }
}

/// One Streamable HTTP server.
pub struct HttpLink {
    server: String,
    url: String,
    credential: Option<McpCredential>,
    route: PorterRoute,
    timeout: Duration,
}

type Session = RunningService<rmcp::RoleClient, ()>;

impl HttpLink {
    pub fn new(
        server: &str,
        url: &str,
        credential: Option<McpCredential>,
        route: PorterRoute,
        timeout: Duration,
    ) -> Self {
        Self {
            server: server.to_string(),
            url: url.to_string(),
            credential,
            route,
            timeout,
        }
    }

    /// The server's tools, listed as the caller of `context`.
    pub async fn list(&self, context: &ToolContext) -> Result<Vec<RemoteTool>, McpError> {
        self.with_session(context, "tools/list", |session| async move {
            session.list_all_tools().await.map(|tools| {
                tools
                    .into_iter()
                    .map(|tool| RemoteTool {
                        name: tool.name.into_owned(),
                        description: tool.description.map(|d| d.into_owned()).unwrap_or_default(),
                        input_schema: Value::Object((*tool.input_schema).clone()),
                    })
                    .collect()
            })
        })
        .await
    }

    /// Calls `tool` as the caller of `context`.
    pub async fn call(
        &self,
        context: &ToolContext,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<CallToolResult, McpError> {
        let request = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        self.with_session(context, tool, |session| async move {
            session.call_tool(request).await
        })
        .await
    }

    /// Registers a key for the caller, runs `operation` in one MCP session through
    /// Porter, closes the session and revokes the key, whatever happened.
    async fn with_session<T, F, Fut>(
        &self,
        context: &ToolContext,
        what: &str,
        operation: F,
    ) -> Result<T, McpError>
    where
        F: FnOnce(Arc<Session>) -> Fut,
        Fut: std::future::Future<Output = Result<T, rmcp::ServiceError>>,
    {
        let grant = TokenGrant {
            session: context.caller.session_key.clone(),
            contact: context.caller.slug.clone(),
            role: context.caller.role_name.clone(),
            command: Some(format!("mcp {}.{what}", self.server)),
            // The role's Porter approval rules hold here too; nothing reruns an MCP
            // call with a grant, so a held request stays refused.
            hold: crate::exec::porter_holds(&context.caller.role).0,
            grants: Vec::new(),
        };
        let registration = self
            .route
            .control
            .register(&grant, self.timeout + Duration::from_secs(60))
            .await
            .map_err(|error| {
                self.unreachable(format!("Porter gave no key: {}", ErrorChain(&error)))
            })?;
        let outcome = tokio::time::timeout(self.timeout, async {
            let session = Arc::new(self.open(&registration).await?);
            let result = operation(session.clone()).await;
            if let Ok(session) = Arc::try_unwrap(session)
                && let Err(error) = session.cancel().await
            {
                tracing::debug!(server = %self.server, %error, "MCP session did not close cleanly");
            }
            result.map_err(|error| McpError::Protocol {
                server: self.server.clone(),
                reason: scrub(&error.to_string(), &registration),
            })
        })
        .await
        .unwrap_or_else(|_| {
            Err(McpError::Timeout {
                server: self.server.clone(),
                seconds: self.timeout.as_secs(),
            })
        });
        if let Err(error) = self.route.control.revoke(&registration.token).await {
            tracing::warn!(error = %ErrorChain(&error), "failed to revoke an MCP call's Porter key; it expires by itself");
        }
        outcome
    }

    /// One MCP session through Porter with the key of `registration`.
    async fn open(&self, registration: &Registration) -> Result<Session, McpError> {
        let proxy = self.proxy_url(registration)?;
        let ca = std::fs::read(&self.route.ca_file).map_err(|error| {
            self.unreachable(format!(
                "Porter's CA {} is not readable: {error}",
                self.route.ca_file.display()
            ))
        })?;
        let ca = reqwest::Certificate::from_pem(&ca).map_err(|error| {
            self.unreachable(format!("Porter's CA is not a certificate: {error}"))
        })?;
        let proxy = reqwest::Proxy::all(proxy.as_str())
            .map_err(|error| self.unreachable(format!("bad proxy address: {error}")))?;
        // Porter's CA only: the agent talks to no server but through Porter.
        let client = reqwest::Client::builder()
            .proxy(proxy)
            .tls_certs_only([ca])
            .timeout(self.timeout)
            .build()
            .map_err(|error| self.unreachable(ErrorChain(&error).to_string()))?;
        let mut config = StreamableHttpClientTransportConfig::with_uri(self.url.clone());
        if let Some(credential) = &self.credential {
            let placeholder = registration
                .env
                .get(&credential.placeholder_env)
                .ok_or_else(|| {
                    self.unreachable(format!(
                        "Porter's registry entry {} names no {} placeholder",
                        credential.porter_entry, credential.placeholder_env
                    ))
                })?;
            if credential.header.eq_ignore_ascii_case("authorization") {
                config = config.auth_header(placeholder.clone());
            } else {
                let name = http::HeaderName::try_from(credential.header.as_str())
                    .map_err(|error| self.unreachable(format!("bad header name: {error}")))?;
                let value = http::HeaderValue::try_from(placeholder.as_str())
                    .map_err(|error| self.unreachable(format!("bad placeholder: {error}")))?;
                config = config.custom_headers(HashMap::from([(name, value)]));
            }
        }
        let transport = StreamableHttpClientTransport::with_client(client, config);
        ().serve(transport)
            .await
            .map_err(|error| self.unreachable(scrub(&ErrorChain(&error).to_string(), registration)))
    }

    /// Porter's proxy URL for this key (it names the sandbox's relay address), pointed
    /// at the agent's own relay.
    fn proxy_url(&self, registration: &Registration) -> Result<url::Url, McpError> {
        let named = registration
            .env
            .get("HTTPS_PROXY")
            .or_else(|| registration.env.get("https_proxy"))
            .ok_or_else(|| self.unreachable("Porter's answer names no proxy".to_string()))?;
        let mut url = url::Url::parse(named)
            .map_err(|_| self.unreachable("Porter's proxy address does not parse".to_string()))?;
        url.set_ip_host(self.route.relay.ip())
            .and_then(|()| url.set_port(Some(self.route.relay.port())))
            .map_err(|()| {
                self.unreachable("Porter's proxy address cannot be relayed".to_string())
            })?;
        Ok(url)
    }

    fn unreachable(&self, reason: String) -> McpError {
        McpError::Unreachable {
            server: self.server.clone(),
            reason,
        }
    }
}

/// A message with this call's key and placeholders taken out (an SDK error may quote a
/// header or the proxy address). They are worthless once revoked; this keeps them out
/// of logs and the model's view anyway.
fn scrub(message: &str, registration: &Registration) -> String {
    let mut scrubbed = message.replace(&registration.token, "[key]");
    for value in registration.env.values() {
        if value.len() >= 8 && value.starts_with("porter_ph_") {
            scrubbed = scrubbed.replace(value.as_str(), "[placeholder]");
        }
    }
    scrubbed
}
