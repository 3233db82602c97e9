//! Messages of Porter's control socket, shared by the daemon and the agent: the agent
//! registers a proxy key for one sandbox command (bound to its session, contact, role,
//! command and an expiry) and revokes it when the command ends. Porter answers with the
//! environment the command gets: the proxy URL carrying the key, the placeholders, the
//! CA and git settings. One JSON object per line each way:
//! `{"op":"register","session":…,"contact":…,"role":…,"ttlSeconds":…,"command":…}` →
//! `{"ok":true,"token":…,"env":{…}}`; `{"op":"revoke","token":…}` →
//! `{"ok":true,"revoked":…}`.
//!
//! Approvals reach the wire through the key: a register may name requests that wait
//! for an approval (`hold`, the caller's role's Porter approval rules) and requests an
//! approver said yes to (`grants`, each admitted once). Porter refuses a held request
//! and remembers it; the revoke answer names what was held (`held`), so the agent can
//! ask the approver and rerun the command with a grant.
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
        /// Requests that wait for an approval: refused and remembered unless a grant
        /// covers them (checked after the role's request policy admitted them).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        hold: Vec<RequestHold>,
        /// Requests an approver said yes to: each admitted once under this key.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        grants: Vec<RequestGrant>,
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
    /// The requests held for approval under the revoked key (revoke only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<HeldRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Requests that need an approval: a request matches when its host is one of `hosts`
/// (`*`: any), its method one of `methods` (`*`: any; any case) and its path one of
/// `paths` (the request policy's globs, matched without regard to case, after
/// percent-decoding, without `;` parameters or a trailing `/`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestHold {
    pub hosts: Vec<String>,
    pub methods: Vec<String>,
    pub paths: Vec<String>,
}

/// One request an approver said yes to, admitted once: exactly this host, method and
/// path (as Porter reported it held).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestGrant {
    /// The approval's code, for the audit log.
    pub approval: String,
    pub host: String,
    pub method: String,
    pub path: String,
}

/// A request Porter refused because it waits for an approval.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeldRequest {
    /// Which of the key's `hold` entries matched (its index).
    pub hold: usize,
    /// The credential (registry entry) of the host.
    pub cli: String,
    /// `name`, or `name:port` when the port is not 443.
    pub host: String,
    /// Upper case.
    pub method: String,
    /// Normalised as holds match it (decoded, no parameters, no trailing `/`).
    pub path: String,
}
impl ControlResponse {
    /// A refusal with its reason.
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            ok: false,
            token: None,
            env: BTreeMap::new(),
            revoked: None,
            held: Vec::new(),
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
            hold: Vec::new(),
            grants: Vec::new(),
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
            hold: vec![RequestHold {
                hosts: vec!["api.github.com".to_string()],
                methods: vec!["PUT".to_string()],
                paths: vec!["/repos/*/*/pulls/*/merge".to_string()],
            }],
            grants: vec![RequestGrant {
                approval: "K7QX2P".to_string(),
                host: "api.github.com".to_string(),
                method: "PUT".to_string(),
                path: "/repos/o/r/pulls/1/merge".to_string(),
            }],
        };
        let line = serde_json::to_value(&scoped).unwrap();
        assert_eq!(line["command"], serde_json::json!("sha256:0f1e"));
        assert_eq!(
            line["hold"],
            serde_json::json!([{"hosts": ["api.github.com"], "methods": ["PUT"], "paths": ["/repos/*/*/pulls/*/merge"]}])
        );
        assert_eq!(
            line["grants"],
            serde_json::json!([{"approval": "K7QX2P", "host": "api.github.com", "method": "PUT", "path": "/repos/o/r/pulls/1/merge"}])
        );
        let held: ControlResponse = serde_json::from_str(
            r#"{"ok":true,"revoked":true,"held":[{"hold":0,"cli":"gh","host":"api.github.com","method":"PUT","path":"/repos/o/r/pulls/1/merge"}]}"#,
        )
        .unwrap();
        assert_eq!(held.held[0].path, "/repos/o/r/pulls/1/merge");
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
