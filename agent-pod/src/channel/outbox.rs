//! The `message` tool's outbox: queues the message in the durable outbox of the
//! channel it goes through and waits briefly for the channel's sender, so the tool can
//! say whether it was sent, is still queued (and why), or was refused.

use std::{sync::Arc, time::Duration};

use futures::future::BoxFuture;
use saint_channels::{
    OutboundBody,
    queue::{self, OutboxStatus},
};
use saint_config::ErrorChain;
use saint_tools::message::{DeliveryStatus, OutboundMessage, Outbox, OutboxError};

use super::hub::ChannelHub;

/// How long the tool waits for the sender before answering "queued".
const WAIT_FOR_SEND: Duration = Duration::from_secs(10);

/// Delivers through the hub's channels.
pub struct DurableOutbox {
    hub: Arc<ChannelHub>,
}

impl DurableOutbox {
    /// An outbox over `hub`'s channels.
    pub fn new(hub: Arc<ChannelHub>) -> Self {
        Self { hub }
    }
}

impl Outbox for DurableOutbox {
    fn deliver(
        &self,
        message: OutboundMessage,
    ) -> BoxFuture<'_, Result<DeliveryStatus, OutboxError>> {
        Box::pin(async move {
            let channel = self.hub.channel(&message.channel).cloned().ok_or_else(|| {
                OutboxError(format!(
                    "channel {:?} cannot send messages (it has no running transport; see /readyz on the bot's metrics port)",
                    message.channel
                ))
            })?;
            let window = channel.transport.reply_window();
            let store = self.hub.store.clone();
            let queued = tokio::task::spawn_blocking(move || {
                store.queue("queue a message", |transaction| {
                    if let Some(window) = window {
                        let last = queue::last_inbound_at(
                            transaction,
                            &message.channel,
                            &message.recipient,
                        )?;
                        let open =
                            last.is_some_and(|at| queue::now_ms() - at < window.as_millis() as i64);
                        if !open {
                            return Ok(None);
                        }
                    }
                    let body = OutboundBody {
                        text: message.text.clone(),
                        files: Vec::new(),
                        context: Default::default(),
                    };
                    queue::enqueue(
                        transaction,
                        &message.channel,
                        &message.recipient,
                        &body,
                        "message_tool",
                        None,
                    )
                    .map(Some)
                })
            })
            .await
            .map_err(|_| OutboxError("the outbox task failed".to_string()))?
            .map_err(|error| {
                tracing::error!(error = %ErrorChain(&error), "failed to queue a message");
                OutboxError("the outbox is unavailable".to_string())
            })?;
            let Some(id) = queued else {
                let hours = window.map_or(0, |window| window.as_secs() / 3600);
                return Err(OutboxError(format!(
                    "{} has not written on {} in the last {hours} hours, so the platform takes \
                     only an approved template message to start the conversation; ask them to \
                     write to the bot first",
                    message.recipient_slug, channel.name
                )));
            };
            channel.outbox_ready.notify_one();
            let deadline = tokio::time::Instant::now() + WAIT_FOR_SEND;
            let mut last_error = None;
            while tokio::time::Instant::now() < deadline {
                let store = self.hub.store.clone();
                let status = tokio::task::spawn_blocking(move || {
                    store.queue("read the outbox", |transaction| {
                        queue::outbound_status(transaction, id)
                    })
                })
                .await
                .ok()
                .and_then(Result::ok)
                .flatten();
                match status {
                    Some(OutboxStatus::Sent) => return Ok(DeliveryStatus::Sent),
                    Some(OutboxStatus::Failed { error }) => return Err(OutboxError(error)),
                    Some(OutboxStatus::Queued { error }) if error.is_some() => {
                        last_error = error;
                        break;
                    }
                    _ => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
            Ok(DeliveryStatus::Queued { last_error })
        })
    }
}
