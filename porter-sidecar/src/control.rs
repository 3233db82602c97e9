//! The control socket: the agent registers a token for one sandbox command (bound to
//! its session, contact, role and an expiry) and revokes it when the command ends.
//! One JSON request per line, one JSON response per line.
//!
//! Touches only the token store; callers are checked by peer uid.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use futures::StreamExt;
pub use porter_protocol::control::{ControlRequest, ControlResponse};
use saint_config::ErrorChain;
use tokio::{io::AsyncWriteExt, net::UnixStream};
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

use crate::{state::State, tokens::Grant};

/// Longest control line accepted; enforced while reading, so a line without a newline
/// is never buffered past it.
const MAX_LINE: usize = 16 * 1024;

/// Applies one request to the token store.
pub fn apply(state: &State, request: ControlRequest) -> ControlResponse {
    match request {
        ControlRequest::Register {
            session,
            contact,
            role,
            ttl_seconds,
            view,
        } => {
            let grant = Grant {
                session,
                contact,
                role,
                view,
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
                Err(error) => ControlResponse::error(ErrorChain(&error).to_string()),
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
    let mut lines = FramedRead::new(read_half, LinesCodec::new_with_max_length(MAX_LINE));
    while let Some(line) = lines.next().await {
        let (response, last) = match line {
            Ok(line) => match serde_json::from_str::<ControlRequest>(&line) {
                Ok(request) => (apply(&state, request), false),
                Err(error) => (
                    ControlResponse::error(format!("failed to parse control request: {error}")),
                    false,
                ),
            },
            // The rest of an over-long line would be read as garbage: end here.
            Err(LinesCodecError::MaxLineLengthExceeded) => {
                (ControlResponse::error("request line too long"), true)
            }
            Err(LinesCodecError::Io(_)) => return,
        };
        let mut text = serde_json::to_string(&response).expect("serialisable");
        text.push('\n');
        if write_half.write_all(text.as_bytes()).await.is_err() || last {
            return;
        }
    }
}
