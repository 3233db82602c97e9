//! The dispatcher: runs a turn for every waiting inbox row, oldest first.
//!
//! At most one turn per lane at a time — one session: a person's direct messages on
//! every channel, or one group conversation — in order, and a bounded number in all:
//! one person flooding the bot holds one slot and one place in each batch, not all of
//! them. A turn's answer queues the reply in the transaction that stores it; a turn
//! that fails (the model down) is retried with backoff, and after [`MAX_ATTEMPTS`]
//! the person is told it failed. Rows left by a crash are picked up at start:
//! `accepted` ones resume without storing the person's message again.

use std::{collections::HashSet, path::Path, sync::Arc, time::Duration};

use saint_channels::{
    AttachmentRef, OutboundBody, attachments,
    queue::{self, InboxRow},
};
use saint_config::ErrorChain;
use tokio::sync::Semaphore;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use super::hub::{ChannelHub, ServedChannel};
use crate::runtime::{Delivery, Inbound, InboundAttachment, Runtime, TurnError};
use parking_lot::Mutex;

/// Turns running at once for channel messages.
pub const MAX_CONCURRENT_TURNS: usize = 8;
/// Turn attempts for one message before the person is told it failed.
pub const MAX_ATTEMPTS: u32 = 5;
/// Largest attachment saved; bigger ones are refused with a note to the model.
pub const ATTACHMENT_MAX_BYTES: u64 = 16 * 1024 * 1024;
/// What the person gets when every attempt failed.
pub const FAILED_REPLY: &str =
    "Sorry, I couldn't answer that just now. Please try again a bit later.";

/// Runs turns for inbox rows until `stop`; turns are spawned on `turns` so shutdown
/// can wait for them, and `abort` cancels them past the drain deadline.
pub async fn run(
    hub: Arc<ChannelHub>,
    runtime: Arc<Runtime>,
    turns: TaskTracker,
    abort: CancellationToken,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONCURRENT_TURNS));
    let busy: Arc<Mutex<HashSet<String>>> = Arc::default();
    loop {
        if stop.is_cancelled() {
            return;
        }
        let order = hub.guards.order();
        let due = hub.store.queue("read the inbox", |transaction| {
            queue::due_inbound_with(transaction, queue::now_ms(), 256, order)
        });
        let rows = match due {
            Ok(rows) => rows,
            Err(error) => {
                tracing::error!(error = %ErrorChain(&error), "failed to read the inbox; retrying");
                Vec::new()
            }
        };
        for row in rows {
            // One turn per lane: one session — a person's direct messages on every
            // channel, or one group conversation — whose turns would only wait for each
            // other, and a resumed turn must not find a newer message of its session
            // answered before it. Without the ordering guard (a benchmark) only each row
            // is run once at a time.
            let sender = match order {
                queue::Order::PerConversation => row.lane.clone(),
                queue::Order::Unordered => format!("row {}", row.id),
            };
            if !busy.lock().insert(sender.clone()) {
                continue;
            }
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                busy.lock().remove(&sender);
                break;
            };
            let (hub, runtime, busy, abort) =
                (hub.clone(), runtime.clone(), busy.clone(), abort.clone());
            turns.spawn(async move {
                process(&hub, &runtime, row, abort).await;
                busy.lock().remove(&sender);
                drop(slot);
                // The sender's next message (or another waiting one) may run now.
                hub.inbox_ready.notify_one();
            });
        }
        let next_due = hub
            .store
            .queue("read the inbox", |transaction| {
                queue::next_inbound_due(transaction)
            })
            .ok()
            .flatten();
        let wait = next_due.map_or(Duration::from_secs(30), |at| {
            Duration::from_millis((at - queue::now_ms()).clamp(50, 30_000) as u64)
        });
        tokio::select! {
            _ = hub.inbox_ready.notified() => {}
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
    }
}

async fn process(hub: &ChannelHub, runtime: &Runtime, row: InboxRow, abort: CancellationToken) {
    let Some(channel) = hub.channel(&row.message.channel).cloned() else {
        let reason = format!("channel {:?} is no longer served", row.message.channel);
        tracing::warn!(inbox_id = row.id, %reason, "inbound message dropped");
        let _ = hub.store.queue("update the inbox", |transaction| {
            queue::fail_inbound(transaction, row.id, &reason)
        });
        return;
    };
    if row.state == queue::InboxState::Received && row.attempts == 0 {
        // Read receipts are a courtesy; a failure changes nothing else.
        if let Err(error) = channel.transport.mark_read(&row.message).await {
            tracing::debug!(channel = %channel.name, %error, "read receipt not sent");
        }
    }
    let mut text = row.message.text.clone();
    let mut saved = Vec::new();
    for (index, attachment) in row.message.attachments.iter().enumerate() {
        let note = save_attachment(&hub.workspace, &channel, &row, index, attachment).await;
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&note);
        // The runtime shows saved images and documents to the model (saint-media).
        let path =
            attachments::relative_path(&channel.name, &row.message.platform_id, index, attachment);
        if tokio::fs::metadata(hub.workspace.join(&path))
            .await
            .is_ok_and(|metadata| metadata.is_file())
        {
            saved.push(InboundAttachment { path });
        }
    }
    let inbound = Inbound {
        sender: row.message.sender.clone(),
        text,
        sender_verified: row.message.sender_verified,
        unverified_origin: row.message.unverified_origin.clone(),
        delivery: Some(Delivery {
            inbox_id: row.id,
            channel: channel.name.clone(),
            context: row.message.context.clone(),
            accepted_message_id: row.message_id,
            conversation: row.message.conversation.clone(),
        }),
        pressed: row.message.pressed,
        attachments: saved,
    };
    match runtime.handle(inbound, None, abort).await {
        Ok(_) => channel.outbox_ready.notify_one(),
        Err(TurnError::Identity(error)) => {
            let reason = error.to_string();
            tracing::warn!(inbox_id = row.id, %reason, "inbound message cannot be answered");
            let _ = hub.store.queue("update the inbox", |transaction| {
                queue::ignore_inbound(transaction, row.id, &reason)
            });
        }
        // Its sender withdrew the message before its turn stored it or before the reply
        // was queued: nothing is stored or sent, and the row says so already.
        Err(_)
            if hub
                .store
                .queue("read the inbox", |transaction| {
                    queue::inbound_settled(transaction, row.id)
                })
                .unwrap_or(false) =>
        {
            tracing::info!(
                inbox_id = row.id,
                "message withdrawn by its sender during its turn; not answered"
            );
            channel.outbox_ready.notify_one();
        }
        Err(error) => {
            let reason = ErrorChain(&error).to_string();
            let attempts = row.attempts + 1;
            let result = if attempts >= MAX_ATTEMPTS {
                tracing::error!(inbox_id = row.id, attempts, %reason, "giving up on a message; telling the sender");
                hub.store.queue("queue the failure notice", |transaction| {
                    queue::queue_reply(
                        transaction,
                        row.id,
                        &channel.name,
                        row.message.sender.as_ref(),
                        &OutboundBody {
                            text: FAILED_REPLY.to_string(),
                            files: Vec::new(),
                            context: row.message.context.clone(),
                        },
                    )?;
                    queue::record_failure_told(transaction, row.id, &reason)
                })
            } else {
                let delay = retry_delay(attempts);
                tracing::warn!(inbox_id = row.id, attempts, retry_in_ms = delay.as_millis() as u64, %reason, "turn failed; will retry");
                hub.store.queue("update the inbox", |transaction| {
                    queue::retry_inbound(
                        transaction,
                        row.id,
                        queue::now_ms() + delay.as_millis() as i64,
                        &reason,
                    )
                })
            };
            if let Err(error) = result {
                tracing::error!(error = %ErrorChain(&error), "failed to record a failed turn");
            }
            channel.outbox_ready.notify_one();
        }
    }
}

/// Doubling from one second, at most five minutes.
pub fn retry_delay(attempts: u32) -> Duration {
    Duration::from_secs(1u64 << attempts.min(9)).min(Duration::from_secs(300))
}

/// Downloads an attachment into `inbox/<channel>/<message>/` under the workspace and
/// returns the note the model sees (where it is, or why it is not there).
async fn save_attachment(
    workspace: &Path,
    channel: &ServedChannel,
    row: &InboxRow,
    index: usize,
    attachment: &AttachmentRef,
) -> String {
    let file =
        attachments::relative_path(&channel.name, &row.message.platform_id, index, attachment);
    let directory = file
        .parent()
        .expect("attachment paths have a folder")
        .to_path_buf();
    let target = workspace.join(&file);
    if let Ok(metadata) = tokio::fs::metadata(&target).await {
        return attachment_note(attachment, &file, metadata.len());
    }
    match channel
        .transport
        .fetch_attachment(attachment, ATTACHMENT_MAX_BYTES)
        .await
    {
        Ok(data) => {
            let written = async {
                tokio::fs::create_dir_all(workspace.join(&directory)).await?;
                // Written under a temporary name and renamed, so a crash never leaves a
                // half file that a resumed turn would take for the whole one.
                let partial = target.with_extension("partial");
                tokio::fs::write(&partial, &data).await?;
                tokio::fs::rename(&partial, &target).await
            };
            match written.await {
                Ok(()) => attachment_note(attachment, &file, data.len() as u64),
                Err(error) => {
                    tracing::error!(%error, path = %target.display(), "failed to save an attachment");
                    format!("[{} attachment could not be saved]", attachment.kind)
                }
            }
        }
        Err(error) => {
            tracing::warn!(channel = %channel.name, media = %attachment.id, %error, "attachment not fetched");
            format!("[{} attachment not available: {error}]", attachment.kind)
        }
    }
}

fn attachment_note(attachment: &AttachmentRef, file: &Path, size: u64) -> String {
    format!(
        "[{} attachment ({}, {size} bytes) saved as {}]",
        attachment.kind,
        attachment.mime_type,
        file.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_to_five_minutes() {
        assert_eq!(retry_delay(1), Duration::from_secs(2));
        assert_eq!(retry_delay(4), Duration::from_secs(16));
        assert_eq!(retry_delay(30), Duration::from_secs(300));
    }
}
