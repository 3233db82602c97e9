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
//! Every inbox row ends with one outcome the sender can see or an operator can query
//! (`outcome`, `outcome_reason`; [`outcomes`]): `answered` (a reply is queued),
//! `refused` (the sender was told why: over their message rate), `ignored` (nothing was
//! sent, and the reason says why: an auto-reply, an empty or withdrawn message) or
//! `failed` (the bot could not handle it). A sender who withdraws a message (a Matrix
//! redaction, a deletion) before its turn starts is not answered; its text is removed
//! from the row either way ([`withdraw_inbound`]).
//!
//! Outbox rows move `queued` → `sent` | `failed` (the dead letters: refused for good, or
//! retried past the cap; `error` says why). A dead letter is told to the bot's owners
//! once: `owner_notice` is the notice's outbox row, set in the transaction that queued it
//! ([`unreported_dead_letters`], [`mark_dead_letters_reported`]). A reply split into parts records how
//! many parts went out, so a retry sends only the rest. A conversation's rows go out
//! one after the other: a row waits until every older row of its conversation was sent
//! or given up on, so a rate limit on one reply never lets a later one overtake it.
//! Times used for scheduling are Unix milliseconds.

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
    outcome TEXT CHECK (outcome IN ('answered', 'refused', 'ignored', 'failed')),
    outcome_reason TEXT,
    lane TEXT,
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
    updated_at INTEGER NOT NULL,
    owner_notice INTEGER
);
CREATE INDEX IF NOT EXISTS outbox_due ON outbox(channel, state, next_attempt_at);
CREATE UNIQUE INDEX IF NOT EXISTS outbox_one_reply ON outbox(inbox_id) WHERE origin = 'reply';
CREATE INDEX IF NOT EXISTS outbox_by_inbox ON outbox(inbox_id);
CREATE INDEX IF NOT EXISTS outbox_queued_by_conversation
    ON outbox(channel, COALESCE(json_extract(body, '$.chat'), recipient), id)
    WHERE state = 'queued';
CREATE TABLE IF NOT EXISTS channel_cursor (
    channel TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
";

/// Brings a database created before the inbox had outcomes (or before dead letters were
/// told to the owners) up to date (run after [`SCHEMA`]); idempotent.
pub fn migrate(connection: &Connection) -> rusqlite::Result<()> {
    let has_outcome: bool = connection.query_row(
        "SELECT COUNT(*) > 0 FROM pragma_table_info('inbox') WHERE name = 'outcome'",
        [],
        |row| row.get(0),
    )?;
    if !has_outcome {
        connection.execute_batch(
            "ALTER TABLE inbox ADD COLUMN outcome TEXT
                 CHECK (outcome IN ('answered', 'refused', 'ignored', 'failed'));
             ALTER TABLE inbox ADD COLUMN outcome_reason TEXT;",
        )?;
    }
    let has_owner_notice: bool = connection.query_row(
        "SELECT COUNT(*) > 0 FROM pragma_table_info('outbox') WHERE name = 'owner_notice'",
        [],
        |row| row.get(0),
    )?;
    if !has_owner_notice {
        // Dead letters from before owners were told are not told now, all at once.
        connection.execute_batch(
            "ALTER TABLE outbox ADD COLUMN owner_notice INTEGER;
             UPDATE outbox SET owner_notice = 0 WHERE state = 'failed';",
        )?;
    }
    let has_lane: bool = connection.query_row(
        "SELECT COUNT(*) > 0 FROM pragma_table_info('inbox') WHERE name = 'lane'",
        [],
        |row| row.get(0),
    )?;
    if !has_lane {
        connection.execute_batch("ALTER TABLE inbox ADD COLUMN lane TEXT;")?;
    }
    // Rows stored before lanes were kept (or by a caller that named none) wait in their
    // channel's lane for their sender or conversation.
    let unlaned: Vec<(i64, String)> = connection
        .prepare(
            "SELECT id, body FROM inbox WHERE lane IS NULL AND state IN ('received', 'accepted')",
        )?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (id, body) in unlaned {
        if let Ok(message) = serde_json::from_str::<InboundMessage>(&body) {
            connection.execute(
                "UPDATE inbox SET lane = ?2 WHERE id = ?1",
                params![id, message.lane()],
            )?;
        }
    }
    connection.execute_batch(
        "CREATE INDEX IF NOT EXISTS inbox_waiting_by_lane ON inbox(lane, id)
             WHERE state IN ('received', 'accepted');",
    )?;
    Ok(())
}

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
    /// The lane it waits in ([`insert_inbound_in_lane`]): one turn per lane at a time.
    pub lane: String,
}

/// Stores an inbound message in its channel's lane for its sender or conversation
/// ([`InboundMessage::lane`]); `None` when the platform delivered it before (same
/// channel and platform id), so a redelivery is acknowledged but not answered twice.
pub fn insert_inbound(
    connection: &Connection,
    message: &InboundMessage,
) -> rusqlite::Result<Option<i64>> {
    insert_inbound_in_lane(connection, message, &message.lane())
}

/// [`insert_inbound`] in `lane`: the rows of one lane get their turns one at a time, in
/// the order they were stored. The agent passes the message's session, so one person's
/// messages on several channels wait for each other.
pub fn insert_inbound_in_lane(
    connection: &Connection,
    message: &InboundMessage,
    lane: &str,
) -> rusqlite::Result<Option<i64>> {
    let body = serde_json::to_string(message).expect("inbound messages serialise");
    let now = now_ms();
    let inserted = connection.execute(
        "INSERT INTO inbox (channel, platform_id, sender, body, state, next_attempt_at, received_at, lane)
         VALUES (?1, ?2, ?3, ?4, 'received', ?5, ?5, ?6)
         ON CONFLICT (channel, platform_id) DO NOTHING",
        params![
            message.channel,
            message.platform_id,
            message.sender.as_ref(),
            body,
            now,
            lane
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
        "UPDATE inbox SET state = 'failed', error = ?2, outcome = 'ignored', outcome_reason = ?2
         WHERE id = ?1",
        params![id, reason],
    )?;
    Ok(Some(id))
}

/// Stores an inbound message that is refused (`reason`: over the sender's message
/// rate) and tells the sender `notice`, in reply to it — once per `window`: a sender
/// told within the window is not told again (the refusal is still recorded). `None`
/// when the platform delivered the message before.
pub fn insert_refused(
    connection: &Connection,
    message: &InboundMessage,
    reason: &str,
    notice: &str,
    window: std::time::Duration,
) -> rusqlite::Result<Option<i64>> {
    let Some(id) = insert_inbound(connection, message)? else {
        return Ok(None);
    };
    let since = now_ms() - window.as_millis() as i64;
    let told: bool = connection.query_row(
        "SELECT COUNT(*) > 0 FROM outbox WHERE channel = ?1 AND recipient = ?2
         AND origin = 'refusal' AND created_at >= ?3",
        params![message.channel, message.sender.as_ref(), since],
        |row| row.get(0),
    )?;
    let outcome_reason = if told {
        format!("{reason} (the sender was already told in this window)")
    } else {
        let body = OutboundBody {
            text: notice.to_string(),
            files: Vec::new(),
            context: message.context.clone(),
        };
        enqueue(
            connection,
            &message.channel,
            message.sender.as_ref(),
            &body,
            "refusal",
            Some(id),
        )?;
        format!("{reason} (the sender was told)")
    };
    connection.execute(
        "UPDATE inbox SET state = 'failed', error = ?2, outcome = 'refused', outcome_reason = ?3
         WHERE id = ?1",
        params![id, reason, outcome_reason],
    )?;
    Ok(Some(id))
}

/// Rows waiting for a turn whose next attempt is due by `now`, oldest first.
pub fn due_inbound(
    connection: &Connection,
    now: i64,
    limit: usize,
) -> rusqlite::Result<Vec<InboxRow>> {
    due_inbound_with(connection, now, limit, Order::PerConversation)
}

/// [`due_inbound`] with the order given: [`Order::Unordered`] hands out every due row,
/// oldest first, lanes or not (only for measuring what the order costs).
pub fn due_inbound_with(
    connection: &Connection,
    now: i64,
    limit: usize,
    order: Order,
) -> rusqlite::Result<Vec<InboxRow>> {
    // Only the oldest waiting row of each lane — one session: a person's direct
    // messages on every channel, or one group conversation ([`insert_inbound_in_lane`])
    // — and only once it is due: a lane's messages run in order, a row waiting for its
    // retry holds back the newer ones, and however many rows one person queued,
    // everyone else's oldest message is in the batch too. One waiting row (the common
    // case) is the oldest of its lane: the plain query is enough.
    let order = match order {
        Order::PerConversation if waiting_inbound(connection)? <= 1 => Order::Unordered,
        order => order,
    };
    let mut statement = connection.prepare_cached(match order {
        Order::PerConversation => {
            "SELECT id, body, state, message_id, attempts, lane FROM inbox
             WHERE id IN (
                 SELECT MIN(id) FROM inbox WHERE state IN ('received', 'accepted')
                 GROUP BY lane
             ) AND next_attempt_at <= ?1
             ORDER BY id LIMIT ?2"
        }
        Order::Unordered => {
            "SELECT id, body, state, message_id, attempts, lane FROM inbox
             WHERE state IN ('received', 'accepted') AND next_attempt_at <= ?1
             ORDER BY id LIMIT ?2"
        }
    })?;
    let rows = statement.query_map(params![now, limit as i64], |row| {
        Ok((
            row.get::<_, i64>(0)?,
            row.get::<_, String>(1)?,
            row.get::<_, String>(2)?,
            row.get::<_, Option<i64>>(3)?,
            row.get::<_, u32>(4)?,
            row.get::<_, Option<String>>(5)?,
        ))
    })?;
    let mut due = Vec::new();
    for row in rows {
        let (id, body, state, message_id, attempts, lane) = row?;
        match serde_json::from_str::<InboundMessage>(&body) {
            Ok(message) => due.push(InboxRow {
                id,
                lane: lane.unwrap_or_else(|| message.lane()),
                message,
                state: InboxState::parse(&state),
                message_id,
                attempts,
            }),
            Err(error) => {
                // Written by this module; unreadable only if the format changed. Park it
                // with the reason instead of retrying it forever.
                fail_inbound(connection, id, &format!("unreadable inbox row: {error}"))?;
            }
        }
    }
    Ok(due)
}

/// How many inbox rows wait for a turn (an index count: cheaper than the ordered
/// query, which it spares when there is at most one).
fn waiting_inbound(connection: &Connection) -> rusqlite::Result<i64> {
    connection
        .prepare_cached("SELECT COUNT(*) FROM inbox WHERE state IN ('received', 'accepted')")?
        .query_row([], |row| row.get(0))
}

/// How many rows of `channel` are queued (an index count: cheaper than the ordered
/// queries, which it spares when there is at most one).
fn queued_outbound(connection: &Connection, channel: &str) -> rusqlite::Result<i64> {
    connection
        .prepare_cached("SELECT COUNT(*) FROM outbox WHERE channel = ?1 AND state = 'queued'")?
        .query_row([channel], |row| row.get(0))
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
/// Call inside the transaction that stored that message. Fails (so that transaction
/// stores nothing) when the row no longer waits: its sender withdrew the message.
pub fn mark_accepted(
    connection: &Connection,
    inbox_id: i64,
    message_id: i64,
) -> rusqlite::Result<()> {
    let updated = connection.execute(
        "UPDATE inbox SET state = 'accepted', message_id = ?2 WHERE id = ?1 AND state = 'received'",
        params![inbox_id, message_id],
    )?;
    if updated == 0 {
        return Err(rusqlite::Error::QueryReturnedNoRows);
    }
    Ok(())
}

/// Queues the reply to inbox row `inbox_id` and marks the row answered. Call inside
/// the transaction that stored the assistant message. A second reply to the same row
/// is refused by the `outbox_one_reply` index, so a resumed turn cannot answer twice;
/// a row withdrawn by its sender while its turn ran is refused too (nothing is sent,
/// and the transaction stores nothing).
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
    let updated = connection.execute(
        "UPDATE inbox SET state = 'answered', error = NULL, outcome = 'answered', outcome_reason = NULL
         WHERE id = ?1 AND state IN ('received', 'accepted')",
        params![inbox_id],
    )?;
    if updated == 0 {
        return Err(rusqlite::Error::QueryReturnedNoRows);
    }
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
    // A row withdrawn meanwhile keeps its outcome.
    connection.execute(
        "UPDATE inbox SET attempts = attempts + 1, next_attempt_at = ?2, error = ?3
         WHERE id = ?1 AND state IN ('received', 'accepted')",
        params![inbox_id, retry_at, error],
    )?;
    Ok(())
}

/// Gives up on an inbox row: the bot could not handle it (outcome `failed`).
pub fn fail_inbound(connection: &Connection, inbox_id: i64, error: &str) -> rusqlite::Result<()> {
    connection.execute(
        "UPDATE inbox SET state = 'failed', error = ?2, outcome = 'failed', outcome_reason = ?2
         WHERE id = ?1",
        params![inbox_id, error],
    )?;
    Ok(())
}

/// Records that an inbox row is not answered, on purpose (outcome `ignored`: the
/// sender may not be served, say).
pub fn ignore_inbound(
    connection: &Connection,
    inbox_id: i64,
    reason: &str,
) -> rusqlite::Result<()> {
    connection.execute(
        "UPDATE inbox SET state = 'failed', error = ?2, outcome = 'ignored', outcome_reason = ?2
         WHERE id = ?1",
        params![inbox_id, reason],
    )?;
    Ok(())
}

/// Records the outcome of an inbox row whose failure notice was queued: the turn failed
/// for good, and the sender was told so.
pub fn record_failure_told(
    connection: &Connection,
    inbox_id: i64,
    reason: &str,
) -> rusqlite::Result<()> {
    connection.execute(
        "UPDATE inbox SET outcome = 'failed', outcome_reason = ?2 WHERE id = ?1",
        params![
            inbox_id,
            format!("{reason} (the sender was told it failed)")
        ],
    )?;
    Ok(())
}

/// What withdrawing a message changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Withdrawn {
    /// No such message in the inbox (never received, or not stored: a room message
    /// that did not address the bot).
    Unknown,
    /// Its turn had not started: it will not be answered.
    BeforeTurn,
    /// Its turn had started or it was answered: transcript message `message_id` holds
    /// its text, which the caller removes in the same transaction.
    Stored { message_id: i64 },
    /// It was not to be answered anyway.
    NotAnswered,
}

/// The sender withdrew (redacted, deleted) message `platform_id` of `channel`: a row
/// still waiting is not answered (outcome `ignored`, `reason`), a row whose turn started
/// is not answered if its reply is not queued yet; the row's text and attachments are
/// removed whatever its state.
pub fn withdraw_inbound(
    connection: &Connection,
    channel: &str,
    platform_id: &str,
    reason: &str,
) -> rusqlite::Result<Withdrawn> {
    let found = connection
        .query_row(
            "SELECT id, state, message_id FROM inbox WHERE channel = ?1 AND platform_id = ?2",
            params![channel, platform_id],
            |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, Option<i64>>(2)?,
                ))
            },
        )
        .optional()?;
    let Some((id, state, message_id)) = found else {
        return Ok(Withdrawn::Unknown);
    };
    connection.execute(
        "UPDATE inbox SET body = json_set(json_remove(body, '$.attachments'), '$.text', '')
         WHERE id = ?1",
        [id],
    )?;
    let withdrawn = match InboxState::parse(&state) {
        InboxState::Received => Withdrawn::BeforeTurn,
        InboxState::Accepted | InboxState::Answered => match message_id {
            Some(message_id) => Withdrawn::Stored { message_id },
            None => Withdrawn::BeforeTurn,
        },
        InboxState::Failed => Withdrawn::NotAnswered,
    };
    match InboxState::parse(&state) {
        InboxState::Received | InboxState::Accepted => {
            connection.execute(
                "UPDATE inbox SET state = 'failed', error = ?2, outcome = 'ignored', outcome_reason = ?2
                 WHERE id = ?1",
                params![id, reason],
            )?;
        }
        InboxState::Answered => {
            connection.execute(
                "UPDATE inbox SET outcome_reason = ?2 WHERE id = ?1",
                params![id, format!("{reason} after it was answered")],
            )?;
        }
        InboxState::Failed => {}
    }
    Ok(withdrawn)
}

/// Whether inbox row `inbox_id` was withdrawn by its sender (or otherwise settled)
/// while it waited or ran: it is no longer `received` or `accepted`.
pub fn inbound_settled(connection: &Connection, inbox_id: i64) -> rusqlite::Result<bool> {
    connection
        .query_row(
            "SELECT state NOT IN ('received', 'accepted') FROM inbox WHERE id = ?1",
            [inbox_id],
            |row| row.get(0),
        )
        .optional()
        .map(|settled| settled.unwrap_or(true))
}

/// One inbound message and what became of it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// Inbox row id.
    pub id: i64,
    /// Channel name.
    pub channel: String,
    /// The platform's id of the message.
    pub platform_id: String,
    /// Who sent it.
    pub sender: String,
    /// When it was stored (RFC 3339).
    pub received_at: String,
    /// `answered`, `refused`, `ignored`, `failed`, or `pending` while it waits or runs.
    pub outcome: String,
    /// Why, for every outcome but a plain answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where the reply or notice to it stands in the outbox (`queued`, `sent`, `failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
}

/// Inbound messages after row `after_id`, oldest first, at most `limit`, each with its
/// outcome. Rows stored before outcomes were recorded get one from their state.
pub fn outcomes(
    connection: &Connection,
    after_id: i64,
    limit: usize,
) -> rusqlite::Result<Vec<Outcome>> {
    let mut statement = connection.prepare_cached(
        "SELECT inbox.id, inbox.channel, inbox.platform_id, inbox.sender, inbox.received_at,
                COALESCE(inbox.outcome, CASE inbox.state
                    WHEN 'answered' THEN 'answered'
                    WHEN 'failed' THEN 'ignored'
                    ELSE 'pending' END),
                COALESCE(inbox.outcome_reason, CASE WHEN inbox.state = 'failed' THEN inbox.error END),
                (SELECT state FROM outbox WHERE outbox.inbox_id = inbox.id ORDER BY outbox.id LIMIT 1)
         FROM inbox WHERE inbox.id > ?1 ORDER BY inbox.id LIMIT ?2",
    )?;
    let rows = statement.query_map(params![after_id, limit as i64], |row| {
        let received_at: i64 = row.get(4)?;
        Ok(Outcome {
            id: row.get(0)?,
            channel: row.get(1)?,
            platform_id: row.get(2)?,
            sender: row.get(3)?,
            received_at: jiff::Timestamp::from_millisecond(received_at)
                .map(|at| at.to_string())
                .unwrap_or_default(),
            outcome: row.get(5)?,
            reason: row.get(6)?,
            reply: row.get(7)?,
        })
    })?;
    rows.collect()
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

/// Queued rows of `channel` due by `now`, oldest first: only the oldest queued row of
/// each conversation (the chat it goes to, else its recipient), so a later reply waits
/// for an earlier one that a rate limit put off.
pub fn due_outbound(
    connection: &Connection,
    channel: &str,
    now: i64,
    limit: usize,
) -> rusqlite::Result<Vec<OutboxRow>> {
    due_outbound_with(connection, channel, now, limit, Order::PerConversation)
}

/// Which waiting rows are handed out: the inbox's to the dispatcher, the outbox's to a
/// channel's sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Only each conversation's oldest waiting row (what the agent uses).
    PerConversation,
    /// Every due row, oldest first (only for measuring what the order costs).
    Unordered,
}

/// [`due_outbound`] with the order given.
pub fn due_outbound_with(
    connection: &Connection,
    channel: &str,
    now: i64,
    limit: usize,
    order: Order,
) -> rusqlite::Result<Vec<OutboxRow>> {
    // One queued row (the common case) has no older one in its conversation.
    let order = match order {
        Order::PerConversation if queued_outbound(connection, channel)? <= 1 => Order::Unordered,
        order => order,
    };
    let mut statement = connection.prepare_cached(match order {
        // A row is due only when no older row of its conversation (the chat it goes to,
        // else its recipient) still waits: one probe of the conversation index each.
        Order::PerConversation => {
            "SELECT id, channel, recipient, body, parts_sent, attempts, created_at FROM outbox AS candidate
             WHERE channel = ?1 AND state = 'queued' AND next_attempt_at <= ?2
             AND NOT EXISTS (
                 SELECT 1 FROM outbox AS earlier
                 WHERE earlier.channel = ?1 AND earlier.state = 'queued'
                 AND COALESCE(json_extract(earlier.body, '$.chat'), earlier.recipient)
                     = COALESCE(json_extract(candidate.body, '$.chat'), candidate.recipient)
                 AND earlier.id < candidate.id
             )
             ORDER BY id LIMIT ?3"
        }
        Order::Unordered => {
            "SELECT id, channel, recipient, body, parts_sent, attempts, created_at FROM outbox
             WHERE channel = ?1 AND state = 'queued' AND next_attempt_at <= ?2
             ORDER BY id LIMIT ?3"
        }
    })?;
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

/// When the next queued row of `channel` that may go out (its conversation's oldest)
/// is due, if any.
pub fn next_outbound_due(connection: &Connection, channel: &str) -> rusqlite::Result<Option<i64>> {
    next_outbound_due_with(connection, channel, Order::PerConversation)
}

/// [`next_outbound_due`] with the order given.
pub fn next_outbound_due_with(
    connection: &Connection,
    channel: &str,
    order: Order,
) -> rusqlite::Result<Option<i64>> {
    let order = match order {
        Order::PerConversation if queued_outbound(connection, channel)? <= 1 => Order::Unordered,
        order => order,
    };
    let sql = match order {
        Order::PerConversation => {
            "SELECT MIN(next_attempt_at) FROM outbox AS candidate
             WHERE channel = ?1 AND state = 'queued'
             AND NOT EXISTS (
                 SELECT 1 FROM outbox AS earlier
                 WHERE earlier.channel = ?1 AND earlier.state = 'queued'
                 AND COALESCE(json_extract(earlier.body, '$.chat'), earlier.recipient)
                     = COALESCE(json_extract(candidate.body, '$.chat'), candidate.recipient)
                 AND earlier.id < candidate.id
             )"
        }
        Order::Unordered => {
            "SELECT MIN(next_attempt_at) FROM outbox WHERE channel = ?1 AND state = 'queued'"
        }
    };
    connection
        .prepare_cached(sql)?
        .query_row([channel], |row| row.get(0))
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

/// The `origin` of outbox rows that tell the bot's owners about dead letters. Such a row
/// that cannot be delivered either is not told about in turn (no loop of notices).
pub const DEAD_LETTER_NOTICE: &str = "dead_letter_notice";

/// A message given up on that the owners have not been told about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// Outbox row id.
    pub id: i64,
    /// Channel name.
    pub channel: String,
    /// Recipient identity.
    pub recipient: String,
    /// The platform's (or the sender's) reason.
    pub reason: String,
    /// The text that was not delivered: only to keep it out of what the owners are told.
    pub text: String,
    /// When it was given up on (Unix milliseconds).
    pub failed_at: i64,
}

/// Dead letters not yet told to the owners, oldest first (notices about dead letters
/// excepted).
pub fn unreported_dead_letters(connection: &Connection) -> rusqlite::Result<Vec<DeadLetter>> {
    let mut statement = connection.prepare_cached(
        "SELECT id, channel, recipient, COALESCE(error, ''), COALESCE(json_extract(body, '$.text'), ''), updated_at
         FROM outbox WHERE state = 'failed' AND owner_notice IS NULL AND origin != ?1
         ORDER BY id",
    )?;
    let rows = statement.query_map([DEAD_LETTER_NOTICE], |row| {
        Ok(DeadLetter {
            id: row.get(0)?,
            channel: row.get(1)?,
            recipient: row.get(2)?,
            reason: row.get(3)?,
            text: row.get(4)?,
            failed_at: row.get(5)?,
        })
    })?;
    rows.collect()
}

/// When the last notice about dead letters was queued (Unix milliseconds), if ever.
pub fn last_dead_letter_notice_at(connection: &Connection) -> rusqlite::Result<Option<i64>> {
    connection
        .prepare_cached("SELECT MAX(created_at) FROM outbox WHERE origin = ?1")?
        .query_row([DEAD_LETTER_NOTICE], |row| row.get(0))
}

/// Records that dead letters `ids` were told to the owners by outbox row `notice_id`
/// (0: nobody could be told). Call in the transaction that queued the notice, so each
/// dead letter is told once.
pub fn mark_dead_letters_reported(
    connection: &Connection,
    ids: &[i64],
    notice_id: i64,
) -> rusqlite::Result<()> {
    let mut statement =
        connection.prepare_cached("UPDATE outbox SET owner_notice = ?2 WHERE id = ?1")?;
    for id in ids {
        statement.execute(params![id, notice_id])?;
    }
    Ok(())
}

/// A message handled when it arrived, outside the inbox's queue — the HTTP channel
/// answers in the request — recorded with its final outcome so [`outcomes`] lists it
/// beside the queued channels' messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handled {
    /// Channel name (the HTTP channel's).
    pub channel: String,
    /// Unique per channel: the HTTP channel has no platform id, so its own.
    pub platform_id: String,
    /// Who it came as (`telegram:333333333`), or what the request named when that is not
    /// an identity.
    pub sender: String,
    /// When it arrived (Unix milliseconds).
    pub received_at: i64,
    /// The person's message in the transcript, when it was stored.
    pub message_id: Option<i64>,
    /// `answered`, `refused`, `ignored` or `failed`.
    pub outcome: &'static str,
    /// Why, for every outcome but a plain answer.
    pub reason: Option<String>,
}

/// Stores handled messages, each with its outcome (the text stays in the transcript
/// only: the row's body holds none). One that is there already is left as it is.
pub fn record_handled(connection: &Connection, handled: &[Handled]) -> rusqlite::Result<()> {
    let mut statement = connection.prepare_cached(
        "INSERT INTO inbox (channel, platform_id, sender, body, state, message_id,
                            next_attempt_at, received_at, error, outcome, outcome_reason)
         VALUES (?1, ?2, ?3, '{}', CASE ?6 WHEN 'answered' THEN 'answered' ELSE 'failed' END,
                 ?4, ?5, ?5, ?7, ?6, ?7)
         ON CONFLICT (channel, platform_id) DO NOTHING",
    )?;
    for row in handled {
        statement.execute(params![
            row.channel,
            row.platform_id,
            row.sender,
            row.message_id,
            row.received_at,
            row.outcome,
            row.reason
        ])?;
    }
    Ok(())
}
