//! Client of Porter's control socket (reached only by the agent container): register a
//! proxy key bound to {session, contact, role, command} for one sandbox command — Porter
//! answers with the command's environment (proxy URL with the key, placeholders, CA) —
//! and revoke it after.
//!
//! The messages are `porter_protocol::control`, the same types Porter parses.
//! Touches only that socket.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use porter_protocol::control::{ControlRequest, ControlResponse};
pub use porter_protocol::control::{HeldRequest, RequestGrant, RequestHold};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::UnixStream,
};

/// Why a control call failed.
#[derive(Debug, thiserror::Error)]
pub enum PorterControlError {
    #[error("failed to reach porter control socket {path}")]
    Connect {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to talk to porter control socket")]
    Io(#[source] std::io::Error),
    #[error("failed to talk to porter control socket: {0}")]
    Protocol(String),
    #[error("porter refused the control request: {0}")]
    Refused(String),
    #[error("failed to talk to porter control socket: no answer within {0} s")]
    Timeout(u64),
}

/// Who a key is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenGrant {
    pub session: String,
    pub contact: String,
    pub role: String,
    /// A digest of the command line, for Porter's audit log.
    pub command: Option<String>,
    /// Requests of the caller's role that wait for an approval.
    pub hold: Vec<RequestHold>,
    /// Requests an approver said yes to, each admitted once.
    pub grants: Vec<RequestGrant>,
}

/// A registered key and the environment its command runs with.
#[derive(Clone, PartialEq, Eq)]
pub struct Registration {
    pub token: String,
    pub env: BTreeMap<String, String>,
}

// The key and its placeholders never reach a log through `{:?}`.
impl std::fmt::Debug for Registration {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Registration")
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// A client of one control socket; each call is one short connection.
#[derive(Clone, Debug)]
pub struct PorterControl {
    socket: PathBuf,
    call_timeout: Duration,
}

impl PorterControl {
    /// A client of the control socket at `socket`.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
            call_timeout: Duration::from_secs(5),
        }
    }

    /// Registers a key for one command, valid for `ttl` (the command's timeout plus a
    /// margin, so a lost revoke still expires).
    pub async fn register(
        &self,
        grant: &TokenGrant,
        ttl: Duration,
    ) -> Result<Registration, PorterControlError> {
        let request = ControlRequest::Register {
            session: grant.session.clone(),
            contact: grant.contact.clone(),
            role: Some(grant.role.clone()),
            ttl_seconds: ttl.as_secs().max(1),
            command: grant.command.clone(),
            hold: grant.hold.clone(),
            grants: grant.grants.clone(),
        };
        let response = self.call(&request).await?;
        let token = response
            .token
            .filter(|token| !token.is_empty())
            .ok_or_else(|| {
                PorterControlError::Protocol("register answered without a token".to_string())
            })?;
        Ok(Registration {
            token,
            env: response.env,
        })
    }

    /// Revokes a token and returns the requests Porter held for an approval under it;
    /// revoking an unknown or expired token is not an error (and reports nothing).
    pub async fn revoke(&self, token: &str) -> Result<Vec<HeldRequest>, PorterControlError> {
        self.call(&ControlRequest::Revoke {
            token: token.to_string(),
        })
        .await
        .map(|response| response.held)
    }

    async fn call(&self, request: &ControlRequest) -> Result<ControlResponse, PorterControlError> {
        let exchange = async {
            let stream = UnixStream::connect(&self.socket).await.map_err(|source| {
                PorterControlError::Connect {
                    path: self.socket.clone(),
                    source,
                }
            })?;
            let (read_half, mut write_half) = stream.into_split();
            let mut line = serde_json::to_string(request).expect("control request is serialisable");
            line.push('\n');
            write_half
                .write_all(line.as_bytes())
                .await
                .map_err(PorterControlError::Io)?;
            let mut answer = String::new();
            BufReader::new(read_half)
                .read_line(&mut answer)
                .await
                .map_err(PorterControlError::Io)?;
            let response: ControlResponse =
                serde_json::from_str(answer.trim_end()).map_err(|error| {
                    PorterControlError::Protocol(format!("bad answer {answer:?}: {error}"))
                })?;
            if !response.ok {
                return Err(PorterControlError::Refused(
                    response.error.unwrap_or_default(),
                ));
            }
            Ok(response)
        };
        tokio::time::timeout(self.call_timeout, exchange)
            .await
            .map_err(|_| PorterControlError::Timeout(self.call_timeout.as_secs()))?
    }
}
