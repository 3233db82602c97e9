//! Webhook endpoints on the agent's HTTP server: `/channels/<name>/webhook`.
//!
//! Before anything is parsed a request passes a body-size limit and the platform's
//! signature (an HMAC over at most that many bytes: cheap to refuse). Requests are never
//! throttled by address: behind an Ingress every request comes from the controller, so
//! an address block would let anyone sending forged requests lock out the platform's
//! genuine deliveries. What is limited is each verified sender's message rate — a
//! stranger flooding the bot is recorded, not answered, and the dispatcher runs one
//! turn per sender at a time, so nobody else waits behind them. Each message is stored
//! in the inbox and the platform gets its 200 only after that commit; a redelivery is
//! acknowledged and not stored again.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::{
    extract::{ConnectInfo, Path, Query, Request, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use saint_channels::WebhookRefusal;
use saint_config::ErrorChain;

use super::{
    hub::{store_inbound, withdraw_inbound},
    state::AppState,
};

/// Largest webhook body accepted (the platform's deliveries are a few kilobytes).
pub const MAX_WEBHOOK_BYTES: usize = 256 * 1024;

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "no such channel").into_response()
}

fn refused(refusal: &WebhookRefusal) -> Response {
    let status = match refusal {
        WebhookRefusal::Unauthorized(_) => StatusCode::UNAUTHORIZED,
        WebhookRefusal::Forbidden(_) => StatusCode::FORBIDDEN,
        WebhookRefusal::BadRequest(_) => StatusCode::BAD_REQUEST,
        WebhookRefusal::NotFound => StatusCode::NOT_FOUND,
    };
    (status, refusal.to_string()).into_response()
}

/// `GET`: the platform's verification handshake.
pub async fn verify(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let Some(webhook) = state
        .channels
        .as_ref()
        .and_then(|hub| hub.channel(&name))
        .and_then(|channel| channel.webhook.clone())
    else {
        return not_found();
    };
    match webhook.handshake(&query) {
        Ok(challenge) => {
            tracing::info!(channel = %name, "webhook verified by the platform");
            challenge.into_response()
        }
        Err(refusal) => {
            tracing::warn!(channel = %name, error = %refusal, "webhook verification refused");
            refused(&refusal)
        }
    }
}

/// `POST`: a delivery.
pub async fn receive(
    State(state): State<AppState>,
    Path(name): Path<String>,
    request: Request,
) -> Response {
    let Some(hub) = state.channels.clone() else {
        return not_found();
    };
    let Some(webhook) = hub
        .channel(&name)
        .and_then(|channel| channel.webhook.clone())
    else {
        return not_found();
    };
    let address = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |info| info.0.ip());
    if state.draining.is_cancelled() {
        // The platform retries; the next pod takes it.
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    }
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_WEBHOOK_BYTES).await else {
        tracing::warn!(channel = %name, %address, limit = MAX_WEBHOOK_BYTES, "webhook body too large or unreadable; refused");
        return (StatusCode::PAYLOAD_TOO_LARGE, "body too large").into_response();
    };
    let delivery = match webhook
        .receive(&parts.headers, &body, &|identity| hub.is_contact(identity))
    {
        Ok(delivery) => delivery,
        Err(refusal) => {
            match &refusal {
                WebhookRefusal::Unauthorized(_) => {
                    tracing::warn!(channel = %name, %address, error = %refusal, "webhook refused: not signed by the platform")
                }
                _ => {
                    tracing::warn!(channel = %name, error = %refusal, "webhook body could not be read; nothing stored")
                }
            }
            return refused(&refusal);
        }
    };
    for skipped in &delivery.skipped {
        tracing::info!(channel = %name, "{skipped}");
    }
    let ok = || match &delivery.response {
        Some((content_type, body)) => (
            StatusCode::OK,
            [(axum::http::header::CONTENT_TYPE, *content_type)],
            body.clone(),
        )
            .into_response(),
        None => StatusCode::OK.into_response(),
    };
    let messages = delivery.messages.clone();
    let withdrawn = delivery.withdrawn.clone();
    if messages.is_empty() && withdrawn.is_empty() {
        return ok();
    }
    let decisions: Vec<_> = messages
        .into_iter()
        .map(|message| {
            let decision = hub.not_to_answer(&message);
            let lane = hub.lane_of(&message);
            (message, lane, decision)
        })
        .collect();
    let store = hub.store.clone();
    let channel = name.clone();
    let forget = withdrawn.clone();
    let stored = tokio::task::spawn_blocking(move || {
        store.queue("store inbound messages", |transaction| {
            let mut new = 0;
            for (message, lane, decision) in &decisions {
                new += usize::from(store_inbound(
                    transaction,
                    message,
                    lane,
                    decision.as_ref(),
                )?);
            }
            if withdraw_inbound(transaction, &channel, &withdrawn)? {
                // Before the commit: a turn that reads the transcript from now on reads
                // it whole, after the change.
                store.note_rewrite();
            }
            Ok(new)
        })
    })
    .await;
    match stored {
        Ok(Ok(new)) => {
            hub.forget_attachments(&name, &forget);
            for _ in 0..new {
                hub.metering.metrics.channel_message(&name, "in");
            }
            hub.inbox_ready.notify_one();
            // A refusal notice waits in the outbox.
            if let Some(channel) = hub.channel(&name) {
                channel.outbox_ready.notify_one();
            }
            ok()
        }
        Ok(Err(error)) => {
            // No 200: the platform delivers again later.
            tracing::error!(channel = %name, error = %ErrorChain(&error), "failed to store inbound messages");
            (StatusCode::INTERNAL_SERVER_ERROR, "not stored").into_response()
        }
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "not stored").into_response(),
    }
}
