//! Messages of Porter's control socket, shared by the daemon and the agent: the agent
//! registers a proxy key for one sandbox command (bound to its session, contact, role,
//! command and an expiry) and revokes it when the command ends. Porter answers with the
//! environment the command gets: the proxy URL carrying the key, the placeholders, the
//! CA and git settings. One JSON object per line each way:
//! `{"op":"register","session":…,"contact":…,"role":…,"ttlSeconds":…,"command":…}` →
//! `{"ok":true,"token":…,"env":{…}}`; `{"op":"revoke","token":…}` →
//! `{"ok":true,"revoked":…}`.
//!
//! Pure: no sockets.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A control request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase", deny_unknown_fields)]
pub enum ControlRequest {
    /// Issue a token for one command.
    #[serde(rename_all = "camelCase")]
    Register {
        session: String,
        contact: String,
        #[serde(default)]
        role: Option<String>,
        ttl_seconds: u64,
        /// What the command is, for the audit log (the agent sends a digest of the
        /// command line, never the line itself).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        command: Option<String>,
    },
    /// Withdraw a token.
    Revoke { token: String },
}

/// A control response.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControlResponse {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The registered command's environment (register only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ControlResponse {
    /// A refusal with its reason.
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            ok: false,
            token: None,
            env: BTreeMap::new(),
            revoked: None,
            error: Some(message.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_have_the_documented_line_format() {
        let register = ControlRequest::Register {
            session: "s1".to_string(),
            contact: "ana".to_string(),
            role: Some("owner".to_string()),
            ttl_seconds: 150,
            command: None,
        };
        assert_eq!(
            serde_json::to_value(&register).unwrap(),
            serde_json::json!({"op": "register", "session": "s1", "contact": "ana", "role": "owner", "ttlSeconds": 150})
        );
        let scoped = ControlRequest::Register {
            session: "s1".to_string(),
            contact: "ivan".to_string(),
            role: Some("employee".to_string()),
            ttl_seconds: 150,
            command: Some("sha256:0f1e".to_string()),
        };
        assert_eq!(
            serde_json::to_value(&scoped).unwrap()["command"],
            serde_json::json!("sha256:0f1e")
        );
        let revoke = ControlRequest::Revoke {
            token: "t".to_string(),
        };
        assert_eq!(
            serde_json::to_value(&revoke).unwrap(),
            serde_json::json!({"op": "revoke", "token": "t"})
        );
        let refused: ControlResponse =
            serde_json::from_str(r#"{"ok":false,"error":"peer uid not allowed"}"#).unwrap();
        assert_eq!(refused, ControlResponse::error("peer uid not allowed"));
    }
}
