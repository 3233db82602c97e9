//! The durable inbox and outbox: two tables in the bot's transcript database, so a
//! turn's answer and its outbox row commit in one transaction.
//!
//! Inbox rows move `received` → `accepted` (the person's message is in the transcript,
//! committed with that change) → `answered` (the reply is in the outbox, same
//! transaction as the assistant message). A row is unique on (channel, platform id),
//! so a platform's redelivery is stored once and answered once. After a crash,
//! `received` rows run as new turns and `accepted` rows resume without storing the
//! person's message twice.
//!
//! Outbox rows move `queued` → `sent` | `failed` (the dead letters: refused for good, or
//! retried past the cap; `error` says why). A reply split into parts records how
//! many parts went out, so a retry sends only the rest. Times used for scheduling are
//! Unix milliseconds.

use rusqlite::{Connection, OptionalExtension, params};

use crate::message::{InboundMessage, OutboundBody};

/// Tables and indexes; idempotent.
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS inbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    channel TEXT NOT NULL,
    platform_id TEXT NOT NULL,
    sender TEXT NOT NULL,
    body TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('received', 'accepted', 'answered', 'failed')),
    message_id INTEGER,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    error TEXT,
    received_at INTEGER NOT NULL,
    UNIQUE (channel, platform_id)
);
CREATE INDEX IF NOT EXISTS inbox_due ON inbox(state, next_attempt_at);
CREATE INDEX IF NOT EXISTS inbox_by_sender ON inbox(channel, sender, received_at);
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    channel TEXT NOT NULL,
    recipient TEXT NOT NULL,
    body TEXT NOT NULL,
    origin TEXT NOT NULL,
    inbox_id INTEGER,
    state TEXT NOT NULL CHECK (state IN ('queued', 'sent', 'failed')),
    parts_sent INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    platform_ids TEXT NOT NULL DEFAULT '[]',
    error TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS outbox_due ON outbox(channel, state, next_attempt_at);
CREATE UNIQUE INDEX IF NOT EXISTS outbox_one_reply ON outbox(inbox_id) WHERE origin = 'reply';
CREATE TABLE IF NOT EXISTS channel_cursor (
    channel TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
";

/// A polling channel's saved position (IMAP UIDVALIDITY and UID, an update offset).
pub fn cursor(connection: &Connection, channel: &str) -> rusqlite::Result<Option<String>> {
    connection
        .query_row(
            "SELECT value FROM channel_cursor WHERE channel = ?1",
            [channel],
            |row| row.get(0),
        )
        .optional()
}

/// Saves a polling channel's position; call in the transaction that stored what was
/// read up to it, so a crash never skips a message or stores one twice.
pub fn set_cursor(connection: &Connection, channel: &str, value: &str) -> rusqlite::Result<()> {
    connection.execute(
        "INSERT INTO channel_cursor (channel, value) VALUES (?1, ?2)
         ON CONFLICT (channel) DO UPDATE SET value = ?2",
        params![channel, value],
    )?;
    Ok(())
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// Where an inbox row stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InboxState {
    /// Stored; no turn has stored the person's message yet.
    Received,
    /// The person's message is in the transcript; no reply is queued yet.
    Accepted,
    /// Its reply is in the outbox.
    Answered,
    /// Given up on (the log and `error` say why).
    Failed,
}

impl InboxState {
    fn parse(text: &str) -> Self {
        match text {
            "received" => Self::Received,
            "accepted" => Self::Accepted,
            "answered" => Self::Answered,
            _ => Self::Failed,
        }
    }
}

/// An inbox row due for a turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InboxRow {
    /// Row id.
    pub id: i64,
    /// The message.
    pub message: InboundMessage,
    /// Received or accepted.
    pub state: InboxState,
    /// Transcript id of the person's message once accepted.
    pub message_id: Option<i64>,
    /// Failed attempts so far.
    pub attempts: u32,
}

/// Stores an inbound message; `None` when the platform delivered it before (same
/// channel and platform id), so a redelivery is acknowledged but not answered twice.
pub fn insert_inbound(
    connection: &Connection,
    message: &InboundMessage,
) -> rusqlite::Result<Option<i64>> {
    let body = serde_json::to_string(message).expect("inbound messages serialise");
    let now = now_ms();
    let inserted = connection.execute(
        "INSERT INTO inbox (channel, platform_id, sender, body, state, next_attempt_at, received_at)
         VALUES (?1, ?2, ?3, ?4, 'received', ?5, ?5)
         ON CONFLICT (channel, platform_id) DO NOTHING",
        params![
            message.channel,
            message.platform_id,
            message.sender.as_ref(),
            body,
            now
        ],
    )?;
    Ok((inserted == 1).then(|| connection.last_insert_rowid()))
}

/// Stores an inbound message that will not get a turn (`reason` says why: a flood, an
/// auto-reply), so a redelivery is recognised and the record shows it arrived.
pub fn insert_ignored(
    connection: &Connection,
    message: &InboundMessage,
    reason: &str,
) -> rusqlite::Result<Option<i64>> {
    let Some(id) = insert_inbound(connection, message)? else {
        return Ok(None);
    };
    connection.execute(
        "UPDATE inbox SET state = 'failed', error = ?2 WHERE id = ?1",
        params![id, reason],
    )?;
    Ok(Some(id))
}

/// Rows waiting for a turn whose next attempt is due by `now`, oldest first.
pub fn due_inbound(
    connection: &Connection,
    now: i64,
    limit: usize,
) -> rusqlite::Result<Vec<InboxRow>> {
    // Only the oldest waiting row of each lane — a sender's direct messages, or one
    // group conversation ([`InboundMessage::lane`]) — and only once it is due: a lane's
    // messages run in order, and however many rows one person queued, everyone else's
    // oldest message is in the batch too.
    let mut statement = connection.prepare_cached(
        "SELECT id, body, state, message_id, attempts FROM inbox
         WHERE id IN (
             SELECT MIN(id) FROM inbox WHERE state IN ('received', 'accepted')
             GROUP BY channel, COALESCE(json_extract(body, '$.conversation.id'), sender)
         ) AND next_attempt_at <= ?1
         ORDER BY id LIMIT ?2",
    )?;
    let rows = statement.query_map(params![now, limit as i64], |row| {
        Ok((
            row.get::<_, i64>(0)?,
            row.get::<_, String>(1)?,
            row.get::<_, String>(2)?,
            row.get::<_, Option<i64>>(3)?,
            row.get::<_, u32>(4)?,
        ))
    })?;
    let mut due = Vec::new();
    for row in rows {
        let (id, body, state, message_id, attempts) = row?;
        match serde_json::from_str(&body) {
            Ok(message) => due.push(InboxRow {
                id,
                message,
                state: InboxState::parse(&state),
                message_id,
                attempts,
            }),
            Err(error) => {
                // Written by this module; unreadable only if the format changed. Park it
                // with the reason instead of retrying it forever.
                connection.execute(
                    "UPDATE inbox SET state = 'failed', error = ?2 WHERE id = ?1",
                    params![id, format!("unreadable inbox row: {error}")],
                )?;
            }
        }
    }
    Ok(due)
}

/// When the next waiting inbox row is due, if any.
pub fn next_inbound_due(connection: &Connection) -> rusqlite::Result<Option<i64>> {
    connection.query_row(
        "SELECT MIN(next_attempt_at) FROM inbox WHERE state IN ('received', 'accepted')",
        [],
        |row| row.get(0),
    )
}

/// Marks a row accepted: the person's message is transcript message `message_id`.
/// Call inside the transaction that stored that message.
pub fn mark_accepted(
    connection: &Connection,
    inbox_id: i64,
    message_id: i64,
) -> rusqlite::Result<()> {
    connection.execute(
        "UPDATE inbox SET state = 'accepted', message_id = ?2 WHERE id = ?1",
        params![inbox_id, message_id],
    )?;
    Ok(())
}

/// Queues the reply to inbox row `inbox_id` and marks the row answered. Call inside
/// the transaction that stored the assistant message. A second reply to the same row
/// is refused by the `outbox_one_reply` index, so a resumed turn cannot answer twice.
pub fn queue_reply(
    connection: &Connection,
    inbox_id: i64,
    channel: &str,
    recipient: &str,
    body: &OutboundBody,
) -> rusqlite::Result<i64> {
    let id = enqueue(
        connection,
        channel,
        recipient,
        body,
        "reply",
        Some(inbox_id),
    )?;
    connection.execute(
        "UPDATE inbox SET state = 'answered', error = NULL WHERE id = ?1",
        params![inbox_id],
    )?;
    Ok(id)
}

/// Queues a message (`origin`: `reply`, `message_tool`, …).
pub fn enqueue(
    connection: &Connection,
    channel: &str,
    recipient: &str,
    body: &OutboundBody,
    origin: &str,
    inbox_id: Option<i64>,
) -> rusqlite::Result<i64> {
    let body = serde_json::to_string(body).expect("outbound bodies serialise");
    let now = now_ms();
    connection.execute(
        "INSERT INTO outbox (channel, recipient, body, origin, inbox_id, state, next_attempt_at, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, 'queued', ?6, ?6, ?6)",
        params![channel, recipient, body, origin, inbox_id, now],
    )?;
    Ok(connection.last_insert_rowid())
}

/// Records a failed attempt at a turn for an inbox row; it is tried again at `retry_at`.
pub fn retry_inbound(
    connection: &Connection,
    inbox_id: i64,
    retry_at: i64,
    error: &str,
) -> rusqlite::Result<()> {
    connection.execute(
        "UPDATE inbox SET attempts = attempts + 1, next_attempt_at = ?2, error = ?3 WHERE id = ?1",
        params![inbox_id, retry_at, error],
    )?;
    Ok(())
}

/// Gives up on an inbox row.
pub fn fail_inbound(connection: &Connection, inbox_id: i64, error: &str) -> rusqlite::Result<()> {
    connection.execute(
        "UPDATE inbox SET state = 'failed', error = ?2 WHERE id = ?1",
        params![inbox_id, error],
    )?;
    Ok(())
}

/// How many messages of `message`'s sending identity (its sender and, for an
/// unauthenticated one, its origin: a forger's mail never uses up the real sender's
/// answers) received since `since` (Unix milliseconds) have had or will have a turn:
/// every row not recorded as ignored.
pub fn answered_since(
    connection: &Connection,
    message: &InboundMessage,
    since: i64,
) -> rusqlite::Result<u32> {
    connection.query_row(
        "SELECT COUNT(*) FROM inbox WHERE channel = ?1 AND sender = ?2 AND received_at >= ?3
         AND state IN ('received', 'accepted', 'answered')
         AND json_extract(body, '$.unverifiedOrigin') IS ?4",
        params![
            message.channel,
            message.sender.as_ref(),
            since,
            message.unverified_origin
        ],
        |row| row.get(0),
    )
}

/// When `sender` last wrote on `channel`, in Unix milliseconds.
pub fn last_inbound_at(
    connection: &Connection,
    channel: &str,
    sender: &str,
) -> rusqlite::Result<Option<i64>> {
    connection.query_row(
        "SELECT MAX(received_at) FROM inbox WHERE channel = ?1 AND sender = ?2",
        params![channel, sender],
        |row| row.get(0),
    )
}

/// An outbox row due for sending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxRow {
    /// Row id.
    pub id: i64,
    /// Channel name.
    pub channel: String,
    /// Recipient identity (`whatsapp:+385…`).
    pub recipient: String,
    /// What to send.
    pub body: OutboundBody,
    /// Parts already sent.
    pub parts_sent: u32,
    /// Failed attempts so far.
    pub attempts: u32,
    /// When it was queued (Unix milliseconds).
    pub created_at: i64,
}

/// Queued rows of `channel` due by `now`, oldest first.
pub fn due_outbound(
    connection: &Connection,
    channel: &str,
    now: i64,
    limit: usize,
) -> rusqlite::Result<Vec<OutboxRow>> {
    let mut statement = connection.prepare_cached(
        "SELECT id, channel, recipient, body, parts_sent, attempts, created_at FROM outbox
         WHERE channel = ?1 AND state = 'queued' AND next_attempt_at <= ?2
         ORDER BY id LIMIT ?3",
    )?;
    let rows = statement.query_map(params![channel, now, limit as i64], |row| {
        Ok((
            row.get::<_, i64>(0)?,
            row.get::<_, String>(1)?,
            row.get::<_, String>(2)?,
            row.get::<_, String>(3)?,
            row.get::<_, u32>(4)?,
            row.get::<_, u32>(5)?,
            row.get::<_, i64>(6)?,
        ))
    })?;
    let mut due = Vec::new();
    for row in rows {
        let (id, channel, recipient, body, parts_sent, attempts, created_at) = row?;
        match serde_json::from_str(&body) {
            Ok(body) => due.push(OutboxRow {
                id,
                channel,
                recipient,
                body,
                parts_sent,
                attempts,
                created_at,
            }),
            Err(error) => {
                fail_outbound(connection, id, &format!("unreadable outbox row: {error}"))?
            }
        }
    }
    Ok(due)
}

/// When the next queued row of `channel` is due, if any.
pub fn next_outbound_due(connection: &Connection, channel: &str) -> rusqlite::Result<Option<i64>> {
    connection.query_row(
        "SELECT MIN(next_attempt_at) FROM outbox WHERE channel = ?1 AND state = 'queued'",
        [channel],
        |row| row.get(0),
    )
}

/// Records that part `parts_sent - 1` went out as `platform_id`.
pub fn record_part_sent(
    connection: &Connection,
    outbox_id: i64,
    parts_sent: u32,
    platform_id: &str,
) -> rusqlite::Result<()> {
    connection.execute(
        "UPDATE outbox SET parts_sent = ?2, platform_ids = json_insert(platform_ids, '$[#]', ?3), updated_at = ?4
         WHERE id = ?1",
        params![outbox_id, parts_sent, platform_id, now_ms()],
    )?;
    Ok(())
}

/// Marks a row sent.
pub fn mark_sent(connection: &Connection, outbox_id: i64) -> rusqlite::Result<()> {
    connection.execute(
        "UPDATE outbox SET state = 'sent', error = NULL, updated_at = ?2 WHERE id = ?1",
        params![outbox_id, now_ms()],
    )?;
    Ok(())
}

/// Records a failed attempt; the row is tried again at `retry_at`.
pub fn retry_outbound(
    connection: &Connection,
    outbox_id: i64,
    retry_at: i64,
    error: &str,
) -> rusqlite::Result<()> {
    connection.execute(
        "UPDATE outbox SET attempts = attempts + 1, next_attempt_at = ?2, error = ?3, updated_at = ?4
         WHERE id = ?1",
        params![outbox_id, retry_at, error, now_ms()],
    )?;
    Ok(())
}

/// Gives up on a row, keeping the platform's reason.
pub fn fail_outbound(connection: &Connection, outbox_id: i64, error: &str) -> rusqlite::Result<()> {
    connection.execute(
        "UPDATE outbox SET state = 'failed', error = ?2, updated_at = ?3 WHERE id = ?1",
        params![outbox_id, error, now_ms()],
    )?;
    Ok(())
}

/// Where an outbox row stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutboxStatus {
    /// Waiting (`error` is the last attempt's reason, if one failed).
    Queued { error: Option<String> },
    /// Every part went out.
    Sent,
    /// Given up on, with the reason.
    Failed { error: String },
}

/// The state of outbox row `outbox_id`.
pub fn outbound_status(
    connection: &Connection,
    outbox_id: i64,
) -> rusqlite::Result<Option<OutboxStatus>> {
    connection
        .query_row(
            "SELECT state, error FROM outbox WHERE id = ?1",
            [outbox_id],
            |row| Ok((row.get::<_, String>(0)?, row.get::<_, Option<String>>(1)?)),
        )
        .optional()
        .map(|found| {
            found.map(|(state, error)| match state.as_str() {
                "sent" => OutboxStatus::Sent,
                "failed" => OutboxStatus::Failed {
                    error: error.unwrap_or_default(),
                },
                _ => OutboxStatus::Queued { error },
            })
        })
}
