//! What the HTTP server shares between its routes (the API, webhooks, the chat page)
//! and the checks every route makes: whose token a request carries, whom it may speak
//! as, which streaming turns its holder may stop. A leaf under the routes: `http`,
//! `webhook` and `chat_page` read it, it reads none of them.

use std::{collections::HashMap, sync::Arc};

use axum::{
    Json,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use saint_config::{ChannelKind, ErrorChain};
use serde_json::{Value, json};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use super::{http_outcomes::HttpOutcomes, hub::ChannelHub};
use crate::runtime::{EnvLookup, Runtime, TurnError};
use parking_lot::Mutex;

/// Shared state of the HTTP server.
#[derive(Clone)]
pub struct AppState {
    /// The runtime.
    pub runtime: Arc<Runtime>,
    /// Where secrets (the channel token) are looked up.
    pub env: EnvLookup,
    /// Every running turn.
    pub turns: TaskTracker,
    /// Cancelled when shutdown starts: readiness turns false, new messages are refused.
    pub draining: CancellationToken,
    /// Cancelled when the drain deadline passes: running turns stop.
    pub abort_turns: CancellationToken,
    /// The chat page at `/chat`, when served: what it shows, whom it may speak as.
    pub chat_page: Option<Arc<PageSettings>>,
    /// The channels served besides HTTP (webhooks land here).
    pub channels: Option<Arc<ChannelHub>>,
    /// Streaming turns a client may stop (the chat page's stop button).
    pub running: Arc<RunningTurns>,
    /// Each message's outcome row.
    pub outcomes: Arc<HttpOutcomes>,
}

impl AppState {
    /// State with fresh trackers and tokens.
    pub fn new(runtime: Arc<Runtime>, env: EnvLookup) -> Self {
        Self {
            runtime,
            env,
            turns: TaskTracker::new(),
            draining: CancellationToken::new(),
            abort_turns: CancellationToken::new(),
            chat_page: None,
            channels: None,
            running: Arc::default(),
            outcomes: Arc::default(),
        }
    }

    /// Serves the webhooks of `hub`'s channels.
    pub fn with_channels(mut self, hub: Arc<ChannelHub>) -> Self {
        self.channels = Some(hub);
        self
    }

    /// Serves the chat page as `page` says.
    pub fn with_chat_page(mut self, page: PageSettings) -> Self {
        self.chat_page = Some(Arc::new(page));
        self
    }
}

/// Errors as the API shows them: internals are logged, never returned.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("unauthorized")]
    Unauthorized,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("the bot is shutting down")]
    Draining,
    #[error("turn failed")]
    Turn(#[from] TurnError),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, message) = match &self {
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, self.to_string()),
            ApiError::Forbidden(message) => (StatusCode::FORBIDDEN, message.clone()),
            ApiError::BadRequest(message) => (StatusCode::BAD_REQUEST, message.clone()),
            ApiError::Draining => (StatusCode::SERVICE_UNAVAILABLE, self.to_string()),
            ApiError::Turn(error) => {
                tracing::error!(error = %ErrorChain(error), "turn failed");
                turn_error_status(error)
            }
        };
        (status, Json(json!({"error": message}))).into_response()
    }
}

pub(crate) fn turn_error_status(error: &TurnError) -> (StatusCode, String) {
    match error {
        TurnError::Identity(error) => (StatusCode::BAD_REQUEST, error.to_string()),
        // A setup problem names what to set (variable names, never values): the person
        // at the page or the operator's client can fix it; a silent 502 helps no one.
        TurnError::ModelSetup(error) => (StatusCode::SERVICE_UNAVAILABLE, error.to_string()),
        TurnError::Model(_) => (
            StatusCode::BAD_GATEWAY,
            "failed to answer: the assistant is unavailable right now".to_string(),
        ),
        TurnError::Session(_) | TurnError::Join => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "failed to store the message".to_string(),
        ),
    }
}

// Same time whatever the first differing byte, so the token cannot be guessed bytewise
// (`subtle`, as Porter and the channels compare their secrets).
pub(crate) fn constant_time_equal(left: &[u8], right: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    left.ct_eq(right).into()
}

/// Whom a request's token speaks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// The HTTP channel's token: any channel identity (the API's clients, the page's
    /// person picker).
    Channel,
    /// A contact's own page token (slug): that contact's identities only.
    Person(String),
}

pub(crate) fn authorise(state: &AppState, headers: &HeaderMap) -> Result<Access, ApiError> {
    let config = state.runtime.config().current();
    let expected = config
        .channels
        .iter()
        .find(|channel| channel.kind == ChannelKind::Http)
        .and_then(|channel| channel.secret_env.get("token"))
        .and_then(|name| (state.env)(name))
        .ok_or(ApiError::Unauthorized)?;
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .ok_or(ApiError::Unauthorized)?;
    let presented = presented.trim();
    if constant_time_equal(presented.as_bytes(), expected.as_bytes()) {
        return Ok(Access::Channel);
    }
    state
        .chat_page
        .as_ref()
        .and_then(|page| page.person_tokens.as_ref())
        .and_then(|tokens| tokens.holder(presented))
        .map(|slug| Access::Person(slug.to_string()))
        .ok_or(ApiError::Unauthorized)
}

/// Refuses a message a person's own token sends as anyone but that person.
pub(crate) fn speaks_as_holder(
    state: &AppState,
    access: &Access,
    channel: ChannelKind,
    peer: &str,
) -> Result<(), ApiError> {
    let Access::Person(slug) = access else {
        return Ok(());
    };
    let config = state.runtime.config().current();
    let caller = crate::identity::caller_for(&config, channel, peer).ok();
    if caller.is_some_and(|caller| caller.known && caller.slug == *slug) {
        return Ok(());
    }
    let name = config
        .contacts
        .iter()
        .find(|contact| contact.slug.as_str() == slug)
        .map_or(slug.as_str(), |contact| contact.name.as_str());
    Err(ApiError::Forbidden(format!(
        "this link speaks only as {name}"
    )))
}

/// What the page shows and whom it may speak as.
#[derive(Clone, Debug, Default)]
pub struct PageSettings {
    /// Start-up lines (`up`: which model, memory on or off, what to set).
    pub notices: Vec<String>,
    /// Lines the person who started the bot must not miss (it listens past loopback).
    pub warnings: Vec<String>,
    /// `Some`: no person picker; each contact speaks through their own token only.
    pub person_tokens: Option<PersonTokens>,
}

/// Each contact's own page token (`up` past loopback).
#[derive(Clone, Default)]
pub struct PersonTokens {
    /// Contact slug and token.
    tokens: Vec<(String, String)>,
}

impl PersonTokens {
    /// Tokens by contact slug.
    pub fn new(tokens: Vec<(String, String)>) -> Self {
        Self { tokens }
    }

    /// Slug and token of each contact.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.tokens
            .iter()
            .map(|(slug, token)| (slug.as_str(), token.as_str()))
    }

    /// The contact `presented` is the token of. Every token is compared, so the time
    /// taken says nothing about which one came close.
    pub fn holder(&self, presented: &str) -> Option<&str> {
        self.tokens.iter().fold(None, |found, (slug, token)| {
            if constant_time_equal(presented.as_bytes(), token.as_bytes()) {
                Some(slug.as_str())
            } else {
                found
            }
        })
    }
}

impl std::fmt::Debug for PersonTokens {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let slugs: Vec<&str> = self.tokens.iter().map(|(slug, _)| slug.as_str()).collect();
        formatter
            .debug_struct("PersonTokens")
            .field("contacts", &slugs)
            .finish_non_exhaustive()
    }
}

/// Streaming turns by the id of the message that started them, with who started each:
/// the page's stop button cancels one, and only its starter (or the channel's token)
/// may.
#[derive(Default)]
pub struct RunningTurns {
    turns: Mutex<HashMap<i64, (CancellationToken, Access)>>,
}

impl RunningTurns {
    pub(crate) fn turns(
        &self,
    ) -> parking_lot::MutexGuard<'_, HashMap<i64, (CancellationToken, Access)>> {
        self.turns.lock()
    }
}

/// One streaming turn's registration in [`RunningTurns`], removed when its stream ends
/// (finished, or the client left: the turn then runs on, as a hang-up never stops one).
pub(crate) struct Stoppable {
    running: Arc<RunningTurns>,
    cancel: CancellationToken,
    access: Access,
    registered: Option<i64>,
    /// The last model failure sent, repeated with the final error.
    pub trouble: Option<Value>,
}

impl Stoppable {
    /// A turn `access` started, stopped through `cancel`.
    pub fn new(running: Arc<RunningTurns>, cancel: CancellationToken, access: Access) -> Self {
        Self {
            running,
            cancel,
            access,
            registered: None,
            trouble: None,
        }
    }

    /// The turn's message is stored as `message_id`: from now on it can be stopped.
    pub fn register(&mut self, message_id: i64) {
        self.running
            .turns()
            .insert(message_id, (self.cancel.clone(), self.access.clone()));
        self.registered = Some(message_id);
    }

    /// Whether the client may read how the bot is run (the model's address, its error):
    /// the channel's token yes, a person's own link no.
    pub fn detailed(&self) -> bool {
        self.access == Access::Channel
    }
}

impl Drop for Stoppable {
    fn drop(&mut self) {
        if let Some(id) = self.registered {
            self.running.turns().remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison_requires_equal_length_and_bytes() {
        assert!(constant_time_equal(b"secret", b"secret"));
        assert!(!constant_time_equal(b"secret", b"secreT"));
        assert!(!constant_time_equal(b"secret", b"secret2"));
    }
}
