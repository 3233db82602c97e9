//! The control socket: the agent registers a token for one sandbox command (bound to
//! its session, contact, role and an expiry) and revokes it when the command ends.
//! One JSON request per line, one JSON response per line.
//!
//! Touches only the token store; callers are checked by peer uid.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

pub use porter_protocol::control::{ControlRequest, ControlResponse};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::UnixStream,
};

use crate::{server::State, tokens::Grant};

/// Longest control line accepted.
const MAX_LINE: usize = 16 * 1024;

/// Most bytes one control connection may send in total (bounds a line without newline).
const MAX_CONNECTION_BYTES: u64 = 64 * 1024 * 1024;

/// Applies one request to the token store.
pub fn apply(state: &State, request: ControlRequest) -> ControlResponse {
    match request {
        ControlRequest::Register {
            session,
            contact,
            role,
            ttl_seconds,
        } => {
            let grant = Grant {
                session,
                contact,
                role,
            };
            match state.tokens.register(
                grant,
                Duration::from_secs(ttl_seconds.max(1)),
                Instant::now(),
            ) {
                Ok(token) => ControlResponse {
                    ok: true,
                    token: Some(token),
                    revoked: None,
                    error: None,
                },
                Err(error) => ControlResponse::error(error.to_string()),
            }
        }
        ControlRequest::Revoke { token } => {
            let revoked = state.tokens.revoke(&token);
            ControlResponse {
                ok: true,
                token: None,
                revoked: Some(revoked),
                error: None,
            }
        }
    }
}

/// Serves one control connection.
pub async fn handle(state: Arc<State>, stream: UnixStream) {
    let uid = stream.peer_cred().map(|credentials| credentials.uid()).ok();
    let (read_half, mut write_half) = stream.into_split();
    let allowed = uid.is_some_and(|uid| state.config.control_uids.contains(&uid));
    if !allowed {
        tracing::warn!(?uid, "control socket caller refused");
        let mut line = serde_json::to_string(&ControlResponse::error("peer uid not allowed"))
            .expect("serialisable");
        line.push('\n');
        let _ = write_half.write_all(line.as_bytes()).await;
        return;
    }
    let mut lines = BufReader::new(read_half.take(MAX_CONNECTION_BYTES)).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let response = if line.len() > MAX_LINE {
            ControlResponse::error("request line too long")
        } else {
            match serde_json::from_str::<ControlRequest>(&line) {
                Ok(request) => apply(&state, request),
                Err(error) => {
                    ControlResponse::error(format!("failed to parse control request: {error}"))
                }
            }
        };
        let mut text = serde_json::to_string(&response).expect("serialisable");
        text.push('\n');
        if write_half.write_all(text.as_bytes()).await.is_err() {
            return;
        }
    }
}
