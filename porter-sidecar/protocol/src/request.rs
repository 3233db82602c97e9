//! The request the agent sends a sandbox runner after the handshake: run a shell
//! command (`Exec`), or start and act on a background process (`Spawn`, `Poll`,
//! `Write`, `Kill`, `List`; their shapes are in [`crate::process`]), or act on a headless
//! browser (`Browser`, in [`crate::browser`]).
//!
//! Pure: parsing and shape checks only. Whether a request is *allowed* (token, cwd
//! containment) is the runner's decision, never made here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::{
    browser::{BrowserRequest, MAX_BROWSER_ARGUMENT},
    process::{
        MAX_OWNER_LEN, MAX_PROCESS_ID_LEN, OwnerRequest, ProcessTarget, SpawnRequest, WriteRequest,
    },
};

/// Most environment variables one request may carry.
pub const MAX_ENV: usize = 256;

/// Most bytes in a token; tokens are random strings far shorter than this.
pub const MAX_TOKEN_LEN: usize = 512;

/// What the client asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase", deny_unknown_fields)]
pub enum Request {
    /// Run a command line through `sh -c` (the sandbox runner).
    Exec(ExecRequest),
    /// Start a command line in the background.
    Spawn(SpawnRequest),
    /// New output and the state of a background process.
    Poll(ProcessTarget),
    /// Bytes for a background process's stdin.
    Write(WriteRequest),
    /// Kill a background process's whole group.
    Kill(ProcessTarget),
    /// The owner's background processes.
    List(OwnerRequest),
    /// One action on the owner's headless browser.
    Browser(BrowserRequest),
}

/// Run a shell command line: what the agent sends to a sandbox runner.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecRequest {
    /// The command line, run as `sh -c <command>`.
    pub command: String,
    /// The working directory inside the sandbox.
    pub cwd: String,
    /// The complete environment for the command (beyond the runner's minimal base).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Seconds before the process group gets SIGTERM (then SIGKILL); none: the runner's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    /// The runner's caller token.
    #[serde(default)]
    pub token: String,
    /// Whether the client will send stdin frames.
    #[serde(default)]
    pub stdin: bool,
}

/// Why a request payload was refused.
#[derive(Debug, Error)]
pub enum RequestError {
    #[error("failed to parse request")]
    Json(#[source] serde_json::Error),
    #[error("failed to parse request: {field} contains a NUL byte")]
    Nul { field: &'static str },
    #[error("failed to parse request: {count} {field}, at most {max} allowed")]
    TooMany {
        field: &'static str,
        count: usize,
        max: usize,
    },
    #[error("failed to parse request: token is longer than {MAX_TOKEN_LEN} bytes")]
    TokenLength,
    #[error("failed to parse request: {field} is empty")]
    Empty { field: &'static str },
    #[error("failed to parse request: {field} is longer than {max} bytes")]
    TooLong { field: &'static str, max: usize },
}

impl Request {
    /// Parses a request payload and checks its shape: no NUL bytes anywhere a process
    /// would see them, bounded counts, non-empty names. The payload size is already
    /// bounded by the frame layer, so parsing cannot allocate without limit.
    pub fn parse(payload: &[u8]) -> Result<Self, RequestError> {
        let request: Request = serde_json::from_slice(payload).map_err(RequestError::Json)?;
        request.validate()?;
        Ok(request)
    }

    /// Serialises the request payload.
    pub fn to_payload(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("request is always serialisable")
    }

    /// The caller token, whichever kind.
    pub fn token(&self) -> &str {
        match self {
            Request::Exec(exec) => &exec.token,
            Request::Spawn(spawn) => &spawn.token,
            Request::Poll(target) | Request::Kill(target) => &target.token,
            Request::Write(write) => &write.token,
            Request::List(list) => &list.token,
            Request::Browser(browser) => &browser.token,
        }
    }

    /// The same request carrying `token` (the client fills in the runner's token last,
    /// so callers building requests never hold it).
    pub fn with_token(mut self, token: &str) -> Self {
        let slot = match &mut self {
            Request::Exec(exec) => &mut exec.token,
            Request::Spawn(spawn) => &mut spawn.token,
            Request::Poll(target) | Request::Kill(target) => &mut target.token,
            Request::Write(write) => &mut write.token,
            Request::List(list) => &mut list.token,
            Request::Browser(browser) => &mut browser.token,
        };
        *slot = token.to_string();
        self
    }

    /// Whether the client will stream stdin.
    pub fn wants_stdin(&self) -> bool {
        match self {
            Request::Exec(exec) => exec.stdin,
            _ => false,
        }
    }

    fn validate(&self) -> Result<(), RequestError> {
        check_token(self.token())?;
        match self {
            Request::Exec(exec) => {
                non_empty("command", &exec.command)?;
                no_nul("command", &exec.command)?;
                no_nul("cwd", &exec.cwd)?;
                check_env(&exec.env)
            }
            Request::Spawn(spawn) => {
                non_empty("command", &spawn.command)?;
                no_nul("command", &spawn.command)?;
                no_nul("cwd", &spawn.cwd)?;
                check_owner(&spawn.owner)?;
                check_env(&spawn.env)
            }
            Request::Poll(target) | Request::Kill(target) => {
                check_owner(&target.owner)?;
                check_id(&target.id)
            }
            Request::Write(write) => {
                check_owner(&write.owner)?;
                check_id(&write.id)
            }
            Request::List(list) => check_owner(&list.owner),
            Request::Browser(browser) => {
                check_owner(&browser.owner)?;
                for (field, value) in browser.strings() {
                    no_nul(field, value)?;
                    at_most(field, value, MAX_BROWSER_ARGUMENT)?;
                }
                Ok(())
            }
        }
    }
}

fn check_owner(owner: &str) -> Result<(), RequestError> {
    non_empty("owner", owner)?;
    no_nul("owner", owner)?;
    at_most("owner", owner, MAX_OWNER_LEN)
}

fn check_id(id: &str) -> Result<(), RequestError> {
    non_empty("id", id)?;
    no_nul("id", id)?;
    at_most("id", id, MAX_PROCESS_ID_LEN)
}

fn at_most(field: &'static str, value: &str, max: usize) -> Result<(), RequestError> {
    if value.len() > max {
        Err(RequestError::TooLong { field, max })
    } else {
        Ok(())
    }
}

fn non_empty(field: &'static str, value: &str) -> Result<(), RequestError> {
    if value.is_empty() {
        Err(RequestError::Empty { field })
    } else {
        Ok(())
    }
}

fn no_nul(field: &'static str, value: &str) -> Result<(), RequestError> {
    if value.contains('\0') {
        Err(RequestError::Nul { field })
    } else {
        Ok(())
    }
}

fn bounded(field: &'static str, count: usize, max: usize) -> Result<(), RequestError> {
    if count > max {
        Err(RequestError::TooMany { field, count, max })
    } else {
        Ok(())
    }
}

fn check_token(token: &str) -> Result<(), RequestError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(RequestError::TokenLength);
    }
    no_nul("token", token)
}

fn check_env(env: &BTreeMap<String, String>) -> Result<(), RequestError> {
    bounded("env", env.len(), MAX_ENV)?;
    for (name, value) in env {
        non_empty("env name", name)?;
        no_nul("env name", name)?;
        no_nul("env value", value)?;
        if name.contains('=') {
            // `A=B=C` would let a hint named `A=B` smuggle a different variable.
            return Err(RequestError::Nul {
                field: "env name (contains '=')",
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_request_round_trips() {
        let request = Request::Exec(ExecRequest {
            command: "echo hi && ls".into(),
            cwd: "/workspace".into(),
            env: BTreeMap::from([("CLIPORT_TOKEN".into(), "abc".into())]),
            timeout_seconds: Some(30),
            token: "runner".into(),
            stdin: false,
        });
        let payload = request.to_payload();
        assert!(String::from_utf8_lossy(&payload).contains(r#""kind":"exec""#));
        assert_eq!(Request::parse(&payload).unwrap(), request);
    }

    #[test]
    fn process_requests_round_trip_and_take_the_token_last() {
        let requests = [
            Request::Spawn(SpawnRequest {
                command: "sleep 5; echo done".into(),
                cwd: "/workspace".into(),
                owner: "o-1".into(),
                max_running: 2,
                buffer_bytes: 4096,
                ..SpawnRequest::default()
            }),
            Request::Poll(ProcessTarget {
                owner: "o-1".into(),
                id: "p1".into(),
                ..ProcessTarget::default()
            }),
            Request::Write(WriteRequest {
                owner: "o-1".into(),
                id: "p1".into(),
                data: "y\n".into(),
                close: true,
                ..WriteRequest::default()
            }),
            Request::Kill(ProcessTarget {
                owner: "o-1".into(),
                id: "p1".into(),
                ..ProcessTarget::default()
            }),
            Request::List(OwnerRequest {
                owner: "o-1".into(),
                ..OwnerRequest::default()
            }),
        ];
        for request in requests {
            let request = request.with_token("runner");
            assert_eq!(request.token(), "runner");
            assert_eq!(Request::parse(&request.to_payload()).unwrap(), request);
        }
    }

    #[test]
    fn nul_bytes_and_unknown_fields_are_refused() {
        let nul = br#"{"kind":"exec","command":"a\u0000b","cwd":"/workspace"}"#;
        assert!(matches!(
            Request::parse(nul),
            Err(RequestError::Nul { field: "command" })
        ));
        let unknown = br#"{"kind":"exec","command":"ls","cwd":"/w","shell":true}"#;
        assert!(matches!(
            Request::parse(unknown),
            Err(RequestError::Json(_))
        ));
        let empty = br#"{"kind":"exec","command":"","cwd":"/w"}"#;
        assert!(matches!(
            Request::parse(empty),
            Err(RequestError::Empty { field: "command" })
        ));
        let smuggle = br#"{"kind":"exec","command":"ls","cwd":"/w","env":{"A=B":"c"}}"#;
        assert!(Request::parse(smuggle).is_err());
        let no_owner = br#"{"kind":"poll","owner":"","id":"p1"}"#;
        assert!(matches!(
            Request::parse(no_owner),
            Err(RequestError::Empty { field: "owner" })
        ));
        let long_id = format!(r#"{{"kind":"kill","owner":"o","id":"{}"}}"#, "p".repeat(33));
        assert!(matches!(
            Request::parse(long_id.as_bytes()),
            Err(RequestError::TooLong { field: "id", .. })
        ));
        let cli = br#"{"kind":"cli","cli":"gh","cwd":"/w"}"#;
        assert!(
            Request::parse(cli).is_err(),
            "Porter runs no CLI: the kind is gone"
        );
    }
}
