//! A headless browser in a sandbox runner: the `browser` request (one action on the
//! owner's browser session) and the runner's typed answer (the `Browser` frame).
//!
//! An answer is the action's bytes as `Stdout` frames (the page's text for `read`, a
//! PNG for `screenshot`, nothing otherwise), then one `Browser` frame. Refusals are
//! `Error` frames, as for `exec`.
//!
//! The browser reaches the network only through the agent's guarded egress proxy: the
//! runner relays a loopback port to `egressSocket` (a unix socket the agent serves in
//! the sandbox's runner directory) and answers the proxy's challenge with `egressKey`,
//! which only the browser's own requests carry.
//!
//! Pure: shapes and checks only.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Largest `Browser` frame payload.
pub const MAX_BROWSER_REPLY: usize = 16 * 1024;

/// Most bytes of a URL, selector or typed text in a request.
pub const MAX_BROWSER_ARGUMENT: usize = 8 * 1024;

/// What to do in the owner's browser session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "camelCase", deny_unknown_fields)]
pub enum BrowserAction {
    /// Load `url` (a session is started if the owner has none); answers once the page's
    /// load event fired or the deadline passed.
    Open { url: String },
    /// The page's visible text (`document.body.innerText`), or with `tree` its
    /// accessibility tree (roles, names, values, states), at most `max_bytes`.
    Read {
        max_bytes: u32,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        tree: bool,
    },
    /// Clicks the first element matching `selector`, or else the first button, link or
    /// input whose visible text contains `text`.
    Click {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        selector: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
    /// Focuses the element matching `selector` and types `text` into it.
    Type { selector: String, text: String },
    /// A PNG of the visible part of the page.
    Screenshot,
    /// Ends the session: the browser and its profile are gone.
    Close,
}

/// One action on the owner's browser session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BrowserRequest {
    /// The runner's caller token.
    #[serde(default)]
    pub token: String,
    /// Whose session this is; a runner never lets one owner act on another's.
    pub owner: String,
    /// The agent's egress proxy socket, as the sandbox sees it (used when a session
    /// starts).
    pub egress_socket: String,
    /// The key the egress proxy asks the browser for (used when a session starts).
    pub egress_key: String,
    /// Seconds an action may take at most.
    pub timeout_seconds: u64,
    /// The most sessions this runner keeps at once (over all owners).
    pub max_sessions: u32,
    /// Seconds a session may sit unused before the runner ends it.
    pub idle_seconds: u64,
    pub action: BrowserAction,
}

impl BrowserRequest {
    /// Every string a request carries, named, for the shape checks.
    pub fn strings(&self) -> Vec<(&'static str, &str)> {
        let mut strings = vec![
            ("egressSocket", self.egress_socket.as_str()),
            ("egressKey", self.egress_key.as_str()),
        ];
        match &self.action {
            BrowserAction::Open { url } => strings.push(("url", url)),
            BrowserAction::Click { selector, text } => {
                strings.extend(selector.as_deref().map(|value| ("selector", value)));
                strings.extend(text.as_deref().map(|value| ("text", value)));
            }
            BrowserAction::Type { selector, text } => {
                strings.push(("selector", selector));
                strings.push(("text", text));
            }
            BrowserAction::Read { .. } | BrowserAction::Screenshot | BrowserAction::Close => {}
        }
        strings
    }
}

/// Where the page stands after an action.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BrowserReply {
    /// The page's URL after the action (after redirects).
    pub url: String,
    /// The page's title.
    pub title: String,
    /// What happened, for the model (`clicked "Show"`, `load timed out`...).
    pub note: String,
    /// Whether this action started the session (a fresh browser and profile).
    pub started: bool,
    /// Milliseconds the action took in the runner.
    pub milliseconds: u64,
}

/// Why a `Browser` frame payload was refused.
#[derive(Debug, Error)]
pub enum BrowserReplyError {
    #[error("failed to parse browser reply")]
    Json(#[source] serde_json::Error),
}

impl BrowserReply {
    /// Parses a `Browser` frame payload (its size is bounded by the frame layer).
    pub fn parse(payload: &[u8]) -> Result<Self, BrowserReplyError> {
        serde_json::from_slice(payload).map_err(BrowserReplyError::Json)
    }

    /// Serialises the payload.
    pub fn to_payload(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("browser reply is always serialisable")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_tagged_in_camel_case() {
        let request = BrowserRequest {
            token: "t".into(),
            owner: "o".into(),
            egress_socket: "/run/saint/sandbox/browser.sock".into(),
            egress_key: "k".into(),
            timeout_seconds: 30,
            max_sessions: 2,
            idle_seconds: 300,
            action: BrowserAction::Click {
                selector: None,
                text: Some("Show".into()),
            },
        };
        let text = serde_json::to_string(&request).unwrap();
        assert!(
            text.contains(r#""action":{"action":"click","text":"Show"}"#),
            "{text}"
        );
        assert_eq!(
            serde_json::from_str::<BrowserRequest>(&text).unwrap(),
            request
        );
        assert_eq!(request.strings().len(), 3);
    }

    #[test]
    fn replies_round_trip() {
        let reply = BrowserReply {
            url: "http://a.example/".into(),
            title: "A".into(),
            note: "loaded".into(),
            started: true,
            milliseconds: 12,
        };
        assert_eq!(BrowserReply::parse(&reply.to_payload()).unwrap(), reply);
        assert!(BrowserReply::parse(b"{}").is_err());
    }
}
