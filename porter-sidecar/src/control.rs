//! The control socket: the agent registers a proxy key for each sandbox command and gets
//! back the command's environment, and revokes the key when the command ends. Only the
//! configured uids (the agent's) are served.
//!
//! Reads and writes one connection; state changes go through `State`.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use futures::StreamExt;
pub use porter_protocol::control::{ControlRequest, ControlResponse};
use saint_config::ErrorChain;
use serde::Serialize;
use tokio::{io::AsyncWriteExt, net::UnixStream};
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

use crate::{
    inject::{command_env, holds::KeyApprovals},
    keys::Grant,
    state::State,
};

/// Longest control line read (a register line is far shorter).
const MAX_LINE: usize = 16 * 1024;

/// A key issued or revoked, in the audit log (never the key itself).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct KeyAudit<'a> {
    ts: String,
    kind: &'static str,
    event: &'static str,
    session: &'a str,
    contact: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<&'a str>,
}

/// Applies one request.
pub fn apply(state: &State, request: ControlRequest) -> ControlResponse {
    match request {
        ControlRequest::Register {
            session,
            contact,
            role,
            ttl_seconds,
            command,
            hold,
            grants,
        } => {
            // Holds that do not compile refuse the key: a command must never run
            // without the holds its caller's role has.
            let approvals = match KeyApprovals::new(&hold, grants) {
                Ok(approvals) => approvals,
                Err(error) => {
                    return ControlResponse::error(format!(
                        "failed to register: {}",
                        ErrorChain(&error)
                    ));
                }
            };
            let grant = Grant {
                session,
                contact,
                role,
                command,
            };
            let registry = state.registry.snapshot();
            let (token, key) = state.keys.register(
                grant,
                registry.credentials(),
                approvals,
                Duration::from_secs(ttl_seconds.max(1)),
                Instant::now(),
            );
            state.audit.write_json(&KeyAudit {
                ts: jiff::Timestamp::now().to_string(),
                kind: "key",
                event: "issued",
                session: &key.grant.session,
                contact: &key.grant.contact,
                role: key.grant.role.as_deref(),
                command: key.grant.command.as_deref(),
            });
            state.metrics.live_keys.set(state.keys.len() as i64);
            let env = command_env::build(&token, &key, &registry);
            ControlResponse {
                ok: true,
                token: Some(token),
                env,
                ..ControlResponse::default()
            }
        }
        ControlRequest::Revoke { token } => {
            let held = state.keys.revoke(&token);
            state.metrics.live_keys.set(state.keys.len() as i64);
            ControlResponse {
                ok: true,
                revoked: Some(held.is_some()),
                held: held.unwrap_or_default(),
                ..ControlResponse::default()
            }
        }
    }
}

/// Serves one control connection: the peer uid first, then one response per line.
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
