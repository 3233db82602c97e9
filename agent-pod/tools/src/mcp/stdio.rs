//! Stdio servers, run in the caller's sandbox.
//!
//! A stdio server is a program that reads JSON-RPC messages on stdin, one per line,
//! and answers on stdout. Saint never runs one in the agent: each listing and each call
//! starts the declared command in the caller's sandbox (their view, no network but
//! Porter's proxy, a Porter key of its own when the server has a credential), writes
//! `initialize`, `notifications/initialized` and the one request, closes stdin, and
//! reads the answer to that request. Nothing survives between calls, so nothing one
//! person's call leaves behind reaches another's. The messages are the SDK's types
//! (`rmcp::model`); only the framing of this one exchange is written here.

use std::{sync::Arc, time::Duration};

use rmcp::model::{CallToolResult, ListToolsResult, ProtocolVersion};
use saint_config::sandbox_contract::SANDBOX_SCRATCH_MOUNT_PATH;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::{McpError, RemoteTool};
use crate::{
    ToolContext, ToolError,
    exec::{Ending, ExecTool, SandboxCommand},
};

/// Most pages of a tool listing read.
const MAX_LIST_PAGES: usize = 10;

/// Bytes of a server's stdout read (its answer must fit).
const MAX_STDOUT_BYTES: usize = 4 * 1024 * 1024;

/// The id of the one request of an exchange (`initialize` is 1).
const REQUEST_ID: u64 = 2;

/// One stdio server.
pub struct StdioLink {
    server: String,
    command: String,
    porter_key: bool,
    sandbox: Arc<ExecTool>,
    timeout: Duration,
}

impl StdioLink {
    /// `command` runs as its words, quoted for the sandbox's `sh -c`.
    pub fn new(
        server: &str,
        command: &[String],
        porter_key: bool,
        sandbox: Arc<ExecTool>,
        timeout: Duration,
    ) -> Self {
        Self {
            server: server.to_string(),
            command: shell_words::join(command),
            porter_key,
            sandbox,
            timeout,
        }
    }

    /// The server's tools, listed in the caller's sandbox.
    pub async fn list(&self, context: &ToolContext) -> Result<Vec<RemoteTool>, McpError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = match &cursor {
                Some(cursor) => json!({ "cursor": cursor }),
                None => json!({}),
            };
            let page: ListToolsResult = self.exchange(context, "tools/list", params).await?;
            tools.extend(page.tools.into_iter().map(|tool| RemoteTool {
                name: tool.name.into_owned(),
                description: tool.description.map(|d| d.into_owned()).unwrap_or_default(),
                input_schema: Value::Object((*tool.input_schema).clone()),
            }));
            match page.next_cursor {
                Some(next) => cursor = Some(next.clone()),
                None => return Ok(tools),
            }
        }
        Ok(tools)
    }

    /// Calls `tool` in the caller's sandbox.
    pub async fn call(
        &self,
        context: &ToolContext,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<CallToolResult, McpError> {
        self.exchange(
            context,
            "tools/call",
            json!({ "name": tool, "arguments": arguments }),
        )
        .await
    }

    /// Runs the server once with `method(params)` after the handshake; returns the
    /// request's result.
    async fn exchange<T: DeserializeOwned>(
        &self,
        context: &ToolContext,
        method: &str,
        params: Value,
    ) -> Result<T, McpError> {
        let stdin = exchange_input(method, params);
        let run = self
            .sandbox
            .run_in_sandbox(
                context,
                None,
                SandboxCommand {
                    command: self.command.clone(),
                    cwd: SANDBOX_SCRATCH_MOUNT_PATH.to_string(),
                    stdin: Some(stdin),
                    timeout: self.timeout,
                    porter_key: self.porter_key,
                    max_stdout_bytes: MAX_STDOUT_BYTES,
                },
            )
            .await
            .map_err(|error| match error {
                ToolError::Timeout(seconds) => McpError::Timeout {
                    server: self.server.clone(),
                    seconds,
                },
                other => McpError::Unreachable {
                    server: self.server.clone(),
                    reason: other.to_string(),
                },
            })?;
        if run.ending == Ending::TimedOut {
            return Err(McpError::Timeout {
                server: self.server.clone(),
                seconds: self.timeout.as_secs(),
            });
        }
        let answer = find_answer(run.stdout.kept()).ok_or_else(|| {
            let stderr = String::from_utf8_lossy(run.stderr.kept());
            let last = stderr.lines().last().unwrap_or("").chars().take(200);
            McpError::Protocol {
                server: self.server.clone(),
                reason: format!(
                    "no answer to {method} ({}; last stderr line: {:?})",
                    match run.ending {
                        Ending::Exited(code) => format!("exit code {code}"),
                        Ending::TimedOut => "timed out".to_string(),
                    },
                    last.collect::<String>()
                ),
            }
        })?;
        if let Some(error) = answer.get("error") {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("unknown error");
            return Err(McpError::Protocol {
                server: self.server.clone(),
                reason: message.chars().take(500).collect(),
            });
        }
        let result = answer.get("result").cloned().unwrap_or(Value::Null);
        serde_json::from_value(result).map_err(|error| McpError::Protocol {
            server: self.server.clone(),
            reason: format!("the answer to {method} does not parse: {error}"),
        })
    }
}

/// The stdin of one exchange: the handshake and the request, one message per line.
fn exchange_input(method: &str, params: Value) -> Vec<u8> {
    let messages = [
        json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {
                "protocolVersion": ProtocolVersion::LATEST_WITH_INITIALIZE,
                "capabilities": {},
                "clientInfo": {"name": "saint", "version": env!("CARGO_PKG_VERSION")},
            },
        }),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": REQUEST_ID, "method": method, "params": params}),
    ];
    let mut input = Vec::new();
    for message in messages {
        input.extend_from_slice(message.to_string().as_bytes());
        input.push(b'\n');
    }
    input
}

/// The response to the request among the lines a server wrote (logs, notifications
/// and the `initialize` answer are skipped).
fn find_answer(stdout: &[u8]) -> Option<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line.trim()).ok())
        .find(|message| message.get("id") == Some(&json!(REQUEST_ID)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exchange_is_a_handshake_and_one_request_per_line() {
        let input = String::from_utf8(exchange_input("tools/list", json!({}))).unwrap();
        let lines: Vec<Value> = input
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["method"], "initialize");
        assert_eq!(lines[0]["params"]["protocolVersion"], "2025-11-25");
        assert_eq!(lines[1]["method"], "notifications/initialized");
        assert_eq!(lines[2]["id"], 2);
        assert_eq!(lines[2]["method"], "tools/list");
    }

    #[test]
    fn only_the_answer_to_the_request_counts() {
        let stdout = b"starting up\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\
            {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\
            {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"tools\":[]}}\n";
        assert_eq!(find_answer(stdout).unwrap()["result"], json!({"tools": []}));
        assert!(find_answer(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n").is_none());
        assert!(find_answer(b"\xff\xfe not json").is_none());
    }
}
