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

use std::{path::Path, sync::Arc, time::Duration};

use saint_channels::{
    ChannelState, FilePayload, OutboundFile, SendError,
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
    // A reply that is only a voice note has no text part.
    let parts = if row.body.text.trim().is_empty() && !row.body.files.is_empty() {
        Vec::new()
    } else {
        split_message(
            &channel.transport.render(&row.body.text),
            channel.transport.max_chars(),
        )
    };
    let context = saint_channels::ReplyContext {
        outbox_id: Some(row.id),
        ..row.body.context.clone()
    };
    // The text parts, then each file as its own message: a part counts as sent once
    // recorded, so a restart sends only what is missing.
    let total = parts.len() + row.body.files.len();
    let last = total.saturating_sub(1);
    for index in (row.parts_sent as usize)..total {
        // An approval's buttons go under the last part, after the text they answer.
        let context = if index == last {
            context.clone()
        } else {
            saint_channels::ReplyContext {
                approval: None,
                ..context.clone()
            }
        };
        let sent = match parts.get(index) {
            Some(part) => {
                channel
                    .transport
                    .send(&recipient, part, &context, index)
                    .await
            }
            None => {
                let file = &row.body.files[index - parts.len()];
                match read_file(&hub.workspace, file).await {
                    Ok(payload) => {
                        channel
                            .transport
                            .send_file(&recipient, &payload, &context)
                            .await
                    }
                    Err(error) => Err(SendError::Permanent {
                        reason: error.to_string(),
                    }),
                }
            }
        };
        match sent {
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
    forget_sent_files(hub, &row).await;
}

/// Removes the files of a sent row that no queued row still needs (one voice note may
/// go to several recipients, one row each): nothing of a delivered voice note stays.
async fn forget_sent_files(hub: &ChannelHub, row: &OutboxRow) {
    for file in &row.body.files {
        let needed = hub.store.queue("read the outbox", |transaction| {
            transaction.query_row(
                "SELECT EXISTS(SELECT 1 FROM outbox WHERE state = 'queued' AND id != ?1 \
                 AND instr(body, ?2) > 0)",
                rusqlite::params![
                    row.id,
                    serde_json::to_string(&file.path).unwrap_or_default()
                ],
                |found| found.get::<_, bool>(0),
            )
        });
        if let Ok(false) = needed
            && saint_config::is_workspace_relative(&file.path)
            && file.path.starts_with(".saint/outbox/")
            && let Err(error) = tokio::fs::remove_file(hub.workspace.join(&file.path)).await
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %file.path, %error, "failed to remove a sent file");
        }
    }
}

/// Largest file a reply carries (every platform's voice-message limit is above it).
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Why a reply's file was not sent: the dead letter's reason.
#[derive(Debug, thiserror::Error)]
enum FileError {
    #[error("the file {0:?} is not a reply's file")]
    NotAReplyFile(String),
    #[error("the file {0} is gone")]
    Gone(String),
    #[error("the file {0} is larger than 16 MiB")]
    TooLarge(String),
    #[error("the file {path} could not be read: {error}")]
    Unreadable { path: String, error: std::io::Error },
}

/// Reads a reply's file from under the workspace; why not, for the dead letter.
async fn read_file(workspace: &Path, file: &OutboundFile) -> Result<FilePayload, FileError> {
    // The path was written by the agent itself; it is still held to a plain relative
    // path under the runtime's own folder, so a row can never send another file.
    if !saint_config::is_workspace_relative(&file.path) || !file.path.starts_with(".saint/outbox/")
    {
        return Err(FileError::NotAReplyFile(file.path.clone()));
    }
    let path = workspace.join(&file.path);
    let size = tokio::fs::symlink_metadata(&path)
        .await
        .ok()
        .filter(|metadata| metadata.is_file())
        .map(|metadata| metadata.len())
        .ok_or_else(|| FileError::Gone(file.path.clone()))?;
    if size > MAX_FILE_BYTES {
        return Err(FileError::TooLarge(file.path.clone()));
    }
    let bytes = tokio::fs::read(&path)
        .await
        .map_err(|error| FileError::Unreadable {
            path: file.path.clone(),
            error,
        })?;
    let extension = match file.mime_type.as_str() {
        "audio/ogg" => "ogg",
        "audio/mpeg" => "mp3",
        _ => "bin",
    };
    Ok(FilePayload {
        bytes,
        mime_type: file.mime_type.clone(),
        kind: file.kind,
        file_name: format!("voice-note.{extension}"),
    })
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

#[cfg(test)]
mod tests {
    use saint_channels::FileKind;

    use super::*;

    fn file(path: &str) -> OutboundFile {
        OutboundFile {
            path: path.to_string(),
            mime_type: "audio/ogg".to_string(),
            kind: FileKind::Voice,
        }
    }

    #[tokio::test]
    async fn a_row_sends_only_a_file_the_runtime_put_in_its_outbox_folder() {
        let workspace = tempfile::tempdir().unwrap();
        let root = workspace.path();
        std::fs::create_dir_all(root.join(".saint/outbox/audio")).unwrap();
        std::fs::write(root.join(".saint/outbox/audio/a.ogg"), b"OggS voice").unwrap();
        std::fs::create_dir_all(root.join("config")).unwrap();
        std::fs::write(root.join("config/secrets.json"), b"{}").unwrap();
        std::os::unix::fs::symlink(
            root.join("config/secrets.json"),
            root.join(".saint/outbox/audio/link.ogg"),
        )
        .unwrap();

        let payload = read_file(root, &file(".saint/outbox/audio/a.ogg"))
            .await
            .unwrap();
        assert_eq!(payload.bytes, b"OggS voice");
        assert_eq!(payload.file_name, "voice-note.ogg");
        // A tampered row naming anything else is a dead letter, never an upload.
        for path in [
            "config/secrets.json",
            ".saint/outbox/../../config/secrets.json",
            "/etc/passwd",
            ".saint/outbox/audio/link.ogg",
            ".saint/outbox/audio/missing.ogg",
        ] {
            let refused = read_file(root, &file(path)).await;
            assert!(refused.is_err(), "{path}: {refused:?}");
        }
    }
}
