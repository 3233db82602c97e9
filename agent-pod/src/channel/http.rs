//! The HTTP channel and server: an authenticated API to send a message as a channel
//! identity and get the reply (plain JSON, or SSE streaming), plus `/healthz` and a
//! `/readyz` that says only ready or not. What names people (`/metrics`, with each
//! person's spend and tool calls) and what explains readiness (`/readyz` with its
//! warnings) are served on the metrics listener only, never on this port.
//!
//! The bearer token is read from the environment variable the config's `http` channel
//! names in `secretEnv.token`; without one every message is refused (fail closed).
//! Turns run as tracked tasks, not inside the request future, so a client that hangs up
//! does not abort a turn halfway and shutdown can wait for every turn to finish.

use std::{convert::Infallible, time::Duration};

use axum::{
    Json, Router,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
    routing::{get, post},
};
use futures::Stream;
use saint_config::{ChannelKind, ErrorChain};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::mpsc;

// The server's state, where callers building the server look for it.
pub use super::state::AppState;
use super::state::{ApiError, Stoppable, authorise, speaks_as_holder, turn_error_status};
use crate::runtime::{Inbound, TurnError, TurnEvent, TurnReply};

/// The router of the HTTP channel's port: the API, webhooks, the chat page when asked
/// for, and probes that reveal nothing but readiness.
pub fn app(state: AppState) -> Router {
    let mut router = Router::new()
        .route("/v1/messages", post(post_message))
        .route(
            "/channels/{name}/webhook",
            get(super::webhook::verify).post(super::webhook::receive),
        )
        .merge(super::chat_page::api_routes())
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz));
    if state.chat_page.is_some() {
        router = router.merge(super::chat_page::page_routes());
    }
    router.with_state(state)
}

/// The router of the metrics listener (the chart's `metrics` port): `/metrics`, whose
/// series carry each person's slug, role, spend and tool calls, and `/readyz` with the
/// lines that say why a channel or persona file does not work.
pub fn metrics_app(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/readyz", get(readyz_details))
        .with_state(state)
}

/// Body of `POST /v1/messages`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MessageRequest {
    /// Channel kind the message is sent as (`whatsapp`, `email`, `http`, …).
    pub channel: String,
    /// Sender id on that channel.
    pub peer: String,
    /// Message text.
    pub text: String,
    /// Stream the reply as server-sent events.
    #[serde(default)]
    pub stream: bool,
}

/// Body of a plain reply.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageResponse {
    /// The answer.
    pub reply: String,
    /// Session key.
    pub session_key: String,
    /// Id of the stored message (it is durable once this is returned).
    pub message_id: i64,
    /// How the turn ended: `answered`, `over_budget` or `iteration_cap`.
    pub outcome: String,
}

impl From<TurnReply> for MessageResponse {
    fn from(reply: TurnReply) -> Self {
        Self {
            reply: reply.text,
            session_key: reply.session_key,
            message_id: reply.message_id,
            outcome: reply.outcome.label().to_string(),
        }
    }
}

async fn post_message(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Json<MessageRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let access = authorise(&state, &headers)?;
    let Json(request) = body.map_err(|rejection| ApiError::BadRequest(rejection.body_text()))?;
    // From here on the request is someone's message: whatever becomes of it is recorded.
    let outcome = Outcome::start(&state, &request);
    if state.draining.is_cancelled() {
        outcome.refused(&state, "the bot is shutting down").await;
        return Err(ApiError::Draining);
    }
    let Ok(channel) = request.channel.parse::<ChannelKind>() else {
        let error = format!("unknown channel {:?}", request.channel);
        outcome.refused(&state, &error).await;
        return Err(ApiError::BadRequest(error));
    };
    if request.text.trim().is_empty() {
        outcome
            .finish(&state, "ignored", Some("empty message".to_string()), None)
            .await;
        return Err(ApiError::BadRequest("text must not be empty".to_string()));
    }
    if let Err(error) = speaks_as_holder(&state, &access, channel, &request.peer) {
        outcome.refused(&state, &error.to_string()).await;
        return Err(error);
    }
    let wants_stream = request.stream
        || headers
            .get(header::ACCEPT)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|accept| accept.contains("text/event-stream"));
    let sender = match crate::identity::parse_peer(channel, &request.peer) {
        Ok(sender) => sender,
        Err(error) => {
            outcome.refused(&state, &error.to_string()).await;
            return Err(ApiError::Turn(TurnError::Identity(error)));
        }
    };
    let inbound = Inbound::direct(sender, request.text);
    let (sender, receiver) = mpsc::unbounded_channel();
    let runtime = state.runtime.clone();
    // Its own token, so one turn can be stopped; shutdown still stops them all.
    let cancel = state.abort_turns.child_token();
    let abort = cancel.clone();
    // The outcome is recorded when the turn ends, whether or not the client still
    // waits, and committed before the client gets the answer.
    let recorder = state.clone();
    let turn = state.turns.spawn(async move {
        let result = runtime.handle(inbound, Some(sender), abort).await;
        outcome.of_turn(&recorder, &result).await;
        result
    });
    if wants_stream {
        let stoppable = Stoppable::new(state.running.clone(), cancel, access);
        return Ok(Sse::new(event_stream(receiver, turn, stoppable))
            .keep_alive(KeepAlive::default())
            .into_response());
    }
    drop(receiver);
    let reply = turn.await.map_err(|_| ApiError::Turn(TurnError::Join))??;
    Ok(Json(MessageResponse::from(reply)).into_response())
}

/// The outcome row of one HTTP message, begun when it arrived.
struct Outcome {
    channel: String,
    sender: String,
    received_at: i64,
}

impl Outcome {
    fn start(state: &AppState, request: &MessageRequest) -> Self {
        // The HTTP channel's name in the config; its kind when the config has none.
        let channel = state
            .runtime
            .config()
            .last_good()
            .channels
            .iter()
            .find(|channel| channel.kind == ChannelKind::Http)
            .map_or_else(|| "http".to_string(), |channel| channel.name.clone());
        // The canonical identity (so erasure finds the row), or what was asked for.
        let sender = request
            .channel
            .parse::<ChannelKind>()
            .ok()
            .and_then(|kind| saint_config::ChannelIdentity::parse(kind, &request.peer).ok())
            .map(|identity| identity.to_string())
            .unwrap_or_else(|| {
                format!("{}:{}", request.channel, request.peer)
                    .chars()
                    .take(200)
                    .collect()
            });
        Self {
            channel,
            sender,
            received_at: saint_channels::queue::now_ms(),
        }
    }

    async fn refused(self, state: &AppState, reason: &str) {
        self.finish(state, "refused", Some(reason.to_string()), None)
            .await;
    }

    async fn of_turn(self, state: &AppState, result: &Result<TurnReply, TurnError>) {
        match result {
            Ok(reply) => {
                let reason = (reply.outcome != crate::runtime::TurnOutcome::Answered)
                    .then(|| format!("{}: the reply says why", reply.outcome.label()));
                self.finish(state, "answered", reason, Some(reply.message_id))
                    .await;
            }
            Err(TurnError::Identity(error)) => self.refused(state, &error.to_string()).await,
            Err(TurnError::Model(saint_llm::LlmError::Cancelled)) => {
                self.finish(
                    state,
                    "failed",
                    Some("stopped before it was answered".to_string()),
                    None,
                )
                .await
            }
            Err(error) => {
                let reason = ErrorChain(error).to_string();
                self.finish(state, "failed", Some(reason), None).await
            }
        }
    }

    async fn finish(
        self,
        state: &AppState,
        outcome: &'static str,
        reason: Option<String>,
        message_id: Option<i64>,
    ) {
        let row = saint_channels::queue::Handled {
            platform_id: state.outcomes.platform_id(self.received_at),
            channel: self.channel,
            sender: self.sender,
            received_at: self.received_at,
            message_id,
            outcome,
            reason,
        };
        state.outcomes.record(state.runtime.store(), row).await;
    }
}

enum StreamPhase {
    Events(
        mpsc::UnboundedReceiver<TurnEvent>,
        tokio::task::JoinHandle<Result<TurnReply, TurnError>>,
        Stoppable,
    ),
    Finished,
}

/// SSE events: `accepted` {messageId, sessionKey, at}, `caller` {contact, role, model,
/// tools}, `delta` {text}, `tool` {name, outcome, arguments, preview}, `model` {address,
/// error, retryInMs} when a model call fails, then `done` {reply, sessionKey, messageId,
/// at} or `error` {error}. A person's own token is told that the model failed, not
/// where it lives or why (that is for whoever runs the bot).
fn event_stream(
    receiver: mpsc::UnboundedReceiver<TurnEvent>,
    turn: tokio::task::JoinHandle<Result<TurnReply, TurnError>>,
    stoppable: Stoppable,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let initial = StreamPhase::Events(receiver, turn, stoppable);
    futures::stream::unfold(initial, |phase| async move {
        let StreamPhase::Events(mut receiver, turn, mut stoppable) = phase else {
            return None;
        };
        if let Some(event) = receiver.recv().await {
            let event = match event {
                TurnEvent::Accepted {
                    message_id,
                    session_key,
                } => {
                    stoppable.register(message_id);
                    Event::default().event("accepted").data(
                        json!({
                            "messageId": message_id,
                            "sessionKey": session_key,
                            "at": jiff::Timestamp::now().to_string(),
                        })
                        .to_string(),
                    )
                }
                TurnEvent::Caller {
                    contact,
                    role,
                    model,
                    tools,
                } => Event::default().event("caller").data(
                    json!({"contact": contact, "role": role, "model": model, "tools": tools})
                        .to_string(),
                ),
                TurnEvent::TextDelta(text) => Event::default()
                    .event("delta")
                    .data(json!({"text": text}).to_string()),
                TurnEvent::ToolCall {
                    name,
                    outcome,
                    arguments,
                    preview,
                } => Event::default().event("tool").data(
                    json!({"name": name, "outcome": outcome, "arguments": arguments, "preview": preview})
                        .to_string(),
                ),
                TurnEvent::ModelTrouble {
                    address,
                    error,
                    retry_in,
                } => {
                    let retry_in_ms = retry_in.map(|delay| delay.as_millis() as u64);
                    let trouble = if stoppable.detailed() {
                        json!({"address": address, "error": error, "retryInMs": retry_in_ms})
                    } else {
                        json!({"retryInMs": retry_in_ms})
                    };
                    stoppable.trouble = Some(trouble.clone());
                    Event::default().event("model").data(trouble.to_string())
                }
            };
            return Some((Ok(event), StreamPhase::Events(receiver, turn, stoppable)));
        }
        // The sender is dropped when the turn ends: report how it ended.
        let event = match turn.await {
            Ok(Ok(reply)) => {
                let mut done = json!(MessageResponse::from(reply));
                done["at"] = json!(jiff::Timestamp::now().to_string());
                Event::default().event("done").data(done.to_string())
            }
            Ok(Err(TurnError::Model(saint_llm::LlmError::Cancelled))) => {
                Event::default().event("error").data(
                    json!({"error": "stopped: the turn was cancelled", "stopped": true})
                        .to_string(),
                )
            }
            Ok(Err(error)) => {
                tracing::error!(error = %ErrorChain(&error), "turn failed");
                let mut body = json!({"error": turn_error_status(&error).1});
                if let (TurnError::Model(_), Some(trouble)) = (&error, stoppable.trouble.take()) {
                    body["model"] = trouble;
                }
                Event::default().event("error").data(body.to_string())
            }
            Err(_) => Event::default()
                .event("error")
                .data(json!({"error": "failed: the turn stopped"}).to_string()),
        };
        Some((Ok(event), StreamPhase::Finished))
    })
}

/// `ready`, or 503 `draining`: the kubelet's probe on the HTTP port. Nothing else, for
/// anyone who can reach the port.
async fn readyz(State(state): State<AppState>) -> Response {
    if state.draining.is_cancelled() {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining\n").into_response();
    }
    "ready\n".into_response()
}

/// The metrics listener's `/readyz`: `ready` (or 503 `draining`), then one `warning:`
/// line per declared channel that cannot work with the config and environment in force
/// and per persona file refused (the lines the agent logged at start, kept current
/// across config reloads). The warnings do not make the bot unready: it still serves
/// what it can.
async fn readyz_details(State(state): State<AppState>) -> Response {
    if state.draining.is_cancelled() {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining\n").into_response();
    }
    let config = state.runtime.config().current();
    let mut body = String::from("ready\n");
    for problem in super::startup::channel_problems(&config, |name| (state.env)(name)) {
        body.push_str(&format!("warning: {problem}\n"));
    }
    // The persona directory is re-checked: a ConfigMap update can break it at any time.
    for problem in
        crate::persona::PersonaSources::check(&config, crate::prompt::MAX_PROMPT_FILE_BYTES)
            .problems()
    {
        body.push_str(&format!("warning: {problem}\n"));
    }
    // A model without a price: its calls are refused, or allowed and counted as free.
    if let Some(warning) = config.unpriced_models_warning() {
        body.push_str(&format!("warning: {warning}\n"));
    }
    // Failover chain entries cooling down after a refused call, and keys left out.
    for line in state.runtime.model_health_lines() {
        body.push_str(&format!("warning: {line}\n"));
    }
    if let Some(hub) = &state.channels {
        for line in hub.health_lines() {
            body.push_str(&format!("warning: {line}\n"));
        }
    }
    body.into_response()
}

async fn metrics(State(state): State<AppState>) -> Response {
    // Cool-downs end with time, not with an event: the health gauge is read fresh.
    state.runtime.model_health_lines();
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.runtime.metering().metrics.encode(),
    )
        .into_response()
}

/// Waits for running turns after the server stopped accepting, up to `deadline`; then
/// cancels the rest (their messages are already durable) and waits briefly for them to
/// notice; then writes the last outcome rows. Returns whether every turn finished in
/// time.
pub async fn drain_turns(state: &AppState, deadline: Duration) -> bool {
    state.draining.cancel();
    state.turns.close();
    let finished = if tokio::time::timeout(deadline, state.turns.wait())
        .await
        .is_ok()
    {
        true
    } else {
        tracing::warn!(
            remaining = state.turns.len(),
            "drain deadline passed; cancelling running turns"
        );
        state.abort_turns.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(2), state.turns.wait()).await;
        false
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), state.outcomes.flush()).await;
    finished
}
