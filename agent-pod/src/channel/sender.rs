//! A channel's sender: delivers its outbox rows, oldest first, part by part. Rows of
//! one conversation go out in order: while one waits for a retry (a rate limit), the
//! later ones wait behind it ([`queue::due_outbound`] hands out only each
//! conversation's oldest queued row).
//!
//! The text is rendered in the platform's markup and split at its limit on paragraph
//! boundaries; each part sent is recorded before the next, so a retry (or a restart)
//! sends only what is missing. Rate limits and server errors are retried with backoff,
//! at least as long as the platform asked, for at most [`MAX_SEND_ATTEMPTS`] tries and
//! [`MAX_RETRY_AGE`]; a refused token keeps rows queued (they go out once the
//! credentials are fixed); a message the platform refuses for good (an address it
//! cannot take, a 5xx) becomes a dead letter at once, with the platform's reason —
//! counted in `saint_channel_dead_letters`, shown on `/readyz`, told to the bot's owners
//! in a chat notice ([`super::dead_letters`]) and, in a cluster, a Warning Event on the
//! SaintBot.

use std::{sync::Arc, time::Duration};

use saint_channels::{
    ChannelState, SendError,
    format::split_message,
    queue::{self, OutboxRow},
};
use saint_config::{ChannelIdentity, ErrorChain};
use tokio_util::sync::CancellationToken;

use super::{
    dispatch::retry_delay,
    hub::{ChannelHub, ServedChannel},
};

/// Retried sends before a row is given up on (a little over two hours of backoff).
pub const MAX_SEND_ATTEMPTS: u32 = 30;
/// How long after it was queued a row is still retried: a reply hours late helps
/// nobody, and the person may have written again since.
pub const MAX_RETRY_AGE: Duration = Duration::from_secs(2 * 3600);
/// How long a channel whose credentials were refused waits before trying again.
const CREDENTIALS_RETRY: Duration = Duration::from_secs(60);

/// Delivers `channel`'s outbox until `stop`.
pub async fn run(hub: Arc<ChannelHub>, channel: Arc<ServedChannel>, stop: CancellationToken) {
    loop {
        let order = hub.guards.order();
        let due = hub.store.queue("read the outbox", |transaction| {
            queue::due_outbound_with(transaction, &channel.name, queue::now_ms(), 32, order)
        });
        match due {
            Ok(rows) => {
                for row in rows {
                    if stop.is_cancelled() {
                        return;
                    }
                    deliver(&hub, &channel, row).await;
                }
            }
            Err(error) => {
                tracing::error!(channel = %channel.name, error = %ErrorChain(&error), "failed to read the outbox")
            }
        }
        let next_due = hub
            .store
            .queue("read the outbox", |transaction| {
                queue::next_outbound_due_with(transaction, &channel.name, order)
            })
            .ok()
            .flatten();
        let wait = next_due.map_or(Duration::from_secs(30), |at| {
            Duration::from_millis((at - queue::now_ms()).clamp(0, 30_000) as u64)
        });
        tokio::select! {
            _ = channel.outbox_ready.notified() => {}
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
    }
}

fn record(
    hub: &ChannelHub,
    action: &'static str,
    operation: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<()>,
) {
    if let Err(error) = hub.store.queue(action, operation) {
        tracing::error!(error = %ErrorChain(&error), "failed to update the outbox");
    }
}

async fn deliver(hub: &ChannelHub, channel: &ServedChannel, row: OutboxRow) {
    let metrics = &hub.metering.metrics;
    let recipient: ChannelIdentity = match row.recipient.parse() {
        Ok(recipient) => recipient,
        Err(error) => {
            let reason = format!("recipient {:?} is not an identity: {error}", row.recipient);
            dead_letter(hub, channel, &row, &reason);
            return;
        }
    };
    let parts = split_message(
        &channel.transport.render(&row.body.text),
        channel.transport.max_chars(),
    );
    let context = saint_channels::ReplyContext {
        outbox_id: Some(row.id),
        ..row.body.context.clone()
    };
    let last = parts.len().saturating_sub(1);
    for (index, part) in parts.iter().enumerate().skip(row.parts_sent as usize) {
        // An approval's buttons go under the last part, after the text they answer.
        let context = if index == last {
            context.clone()
        } else {
            saint_channels::ReplyContext {
                approval: None,
                ..context.clone()
            }
        };
        match channel
            .transport
            .send(&recipient, part, &context, index)
            .await
        {
            Ok(platform_id) => {
                metrics.channel_message(&channel.name, "out");
                record(hub, "record a sent part", |transaction| {
                    queue::record_part_sent(transaction, row.id, index as u32 + 1, &platform_id)
                });
            }
            Err(SendError::Retry { reason, after }) => {
                metrics.delivery_failure(&channel.name, "retry");
                let attempts = row.attempts + 1;
                let delay = retry_delay(attempts).max(after.unwrap_or_default());
                let retry_at = queue::now_ms() + delay.as_millis() as i64;
                if attempts >= MAX_SEND_ATTEMPTS
                    || retry_at - row.created_at > MAX_RETRY_AGE.as_millis() as i64
                {
                    let reason = format!("gave up after {attempts} attempts: {reason}");
                    dead_letter(hub, channel, &row, &reason);
                    return;
                }
                hub.set_state(channel, ChannelState::Retrying(reason.clone()));
                record(hub, "reschedule an outbox row", |transaction| {
                    queue::retry_outbound(transaction, row.id, retry_at, &reason)
                });
                return;
            }
            Err(SendError::Credentials { reason }) => {
                metrics.delivery_failure(&channel.name, "credentials");
                hub.set_state(channel, ChannelState::CredentialsRefused(reason.clone()));
                record(hub, "reschedule an outbox row", |transaction| {
                    queue::retry_outbound(
                        transaction,
                        row.id,
                        queue::now_ms() + CREDENTIALS_RETRY.as_millis() as i64,
                        &reason,
                    )
                });
                return;
            }
            Err(SendError::Permanent { reason }) => {
                metrics.delivery_failure(&channel.name, "rejected");
                dead_letter(hub, channel, &row, &reason);
                return;
            }
        }
    }
    record(hub, "mark an outbox row sent", |transaction| {
        queue::mark_sent(transaction, row.id)
    });
    hub.set_state(channel, ChannelState::Up);
}

/// Gives up on `row` for good: its state and reason in the outbox, the metric, the
/// `/readyz` line, one Event (a row is dead-lettered once), and the owners' notice.
fn dead_letter(hub: &ChannelHub, channel: &ServedChannel, row: &OutboxRow, reason: &str) {
    tracing::error!(channel = %channel.name, outbox_id = row.id, recipient = %row.recipient, %reason,
        "message not delivered: moved to the dead letters");
    record(hub, "fail an outbox row", |transaction| {
        queue::fail_outbound(transaction, row.id, reason)
    });
    hub.record_dead_letter(channel, &row.recipient, reason);
}
