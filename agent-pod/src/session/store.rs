//! The SQLite transcript store: one database file on the workspace volume holding every
//! session's messages, compaction summaries and per-contact spend.
//!
//! Durability: WAL journal with `synchronous=FULL`, so a commit returns only after the
//! WAL is fsynced. A message is acknowledged to its sender only after its insert
//! committed, so neither a killed process nor a lost node (power cut) loses an
//! acknowledged message. (`NORMAL` would survive a killed process but could lose the
//! last commits on power loss; the per-turn fsync costs well under a millisecond on SSDs
//! and the benchmark measures it.) Single writer: one connection behind a mutex; callers
//! on async code go through `spawn_blocking`. Touches only its own database file.

use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use rusqlite::{Connection, OptionalExtension, params};
use saint_llm::{ChatRole, ContentBlock, Message};

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("failed to open session database {path}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("failed to create session directory {path}")]
    Directory {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to {action}")]
    Sql {
        action: &'static str,
        source: rusqlite::Error,
    },
    #[error("failed to decode stored message {id}")]
    Decode { id: i64, source: serde_json::Error },
}

fn sql(action: &'static str) -> impl FnOnce(rusqlite::Error) -> SessionError {
    move |source| SessionError::Sql { action, source }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS sessions (
    key TEXT PRIMARY KEY,
    contact TEXT NOT NULL,
    role TEXT NOT NULL,
    last_identity TEXT NOT NULL,
    summary TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key TEXT NOT NULL REFERENCES sessions(key),
    role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    content TEXT NOT NULL,
    identity TEXT NOT NULL,
    compacted INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_session ON messages(session_key, id);
CREATE TABLE IF NOT EXISTS spend (
    contact TEXT NOT NULL,
    day TEXT NOT NULL,
    usd REAL NOT NULL,
    PRIMARY KEY (contact, day)
);
";

/// What a message its sender withdrew (a redaction, a deletion) reads as afterwards.
pub const WITHDRAWN_MESSAGE: &str = "[message deleted by its sender]";

/// Replaces the text of stored message `id` with [`WITHDRAWN_MESSAGE`], in the caller's
/// transaction: the turn order of the session stays as it was, the words are gone.
/// Call [`SessionStore::note_rewrite`] in the same transaction, before it commits.
pub fn withdraw_message(transaction: &rusqlite::Transaction<'_>, id: i64) -> rusqlite::Result<()> {
    let content = serde_json::to_string(&Message::user_text(WITHDRAWN_MESSAGE).content)
        .expect("content blocks serialise");
    transaction.execute(
        "UPDATE messages SET content = ?2 WHERE id = ?1",
        params![id, content],
    )?;
    Ok(())
}

/// A message as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredMessage {
    /// Row id (monotonic).
    pub id: i64,
    /// The message.
    pub message: Message,
    /// Channel identity of the sender (for user messages) or of the person replied to.
    pub identity: String,
}

/// What the model should see of a session.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Transcript {
    /// Summary of compacted older turns (empty if none).
    pub summary: String,
    /// Messages not yet compacted, oldest first.
    pub messages: Vec<StoredMessage>,
}

/// One row of the session list.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionInfo {
    /// Session key.
    pub key: String,
    /// Contact slug.
    pub contact: String,
    /// Role of the contact when they last wrote.
    pub role: String,
    /// Identity they last wrote from.
    pub last_identity: String,
    /// Messages in the session.
    pub message_count: u64,
    /// RFC 3339 time of the last message.
    pub updated_at: String,
}

/// The store.
pub struct SessionStore {
    path: PathBuf,
    connection: Mutex<Connection>,
    /// Bumped whenever stored messages are rewritten or removed (not appended), so a
    /// transcript kept in memory is read again.
    rewrites: std::sync::atomic::AtomicU64,
}

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

impl SessionStore {
    /// Opens (creating if needed) the database at `path`.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, SessionError> {
        let path = path.into();
        let connection = super::open_durable(&path, &[SCHEMA, saint_channels::queue::SCHEMA])
            .map_err(|failure| match failure {
                super::OpenFailure::Directory { path, source } => {
                    SessionError::Directory { path, source }
                }
                super::OpenFailure::Open(source) => SessionError::Open {
                    path: path.clone(),
                    source,
                },
            })?;
        saint_channels::queue::migrate(&connection).map_err(|source| SessionError::Open {
            path: path.clone(),
            source,
        })?;
        Ok(Self {
            path,
            connection: Mutex::new(connection),
            rewrites: Default::default(),
        })
    }

    /// How many times stored messages were rewritten or removed since the store opened:
    /// a transcript kept from before a change is stale.
    pub fn rewrites(&self) -> u64 {
        self.rewrites.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Records that stored messages are being rewritten or removed: call it before the
    /// change commits, so a transcript read after the commit is never a kept copy.
    pub fn note_rewrite(&self) {
        self.rewrites
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn with<T>(
        &self,
        body: impl FnOnce(&mut Connection) -> Result<T, SessionError>,
    ) -> Result<T, SessionError> {
        let mut connection = self.connection.lock();
        body(&mut connection)
    }

    /// Appends a message to a session (creating the session), in one transaction.
    /// Returns the message id once the commit is durable.
    pub fn append(
        &self,
        key: &str,
        contact: &str,
        role: &str,
        identity: &str,
        message: &Message,
    ) -> Result<i64, SessionError> {
        self.append_with_spend(key, contact, role, identity, message, None)
    }

    /// Like [`SessionStore::append`], also adding `(day, usd)` to the contact's spend in
    /// the same transaction: one fsync instead of two per model answer, and the spend
    /// is recorded exactly when the answer is.
    pub fn append_with_spend(
        &self,
        key: &str,
        contact: &str,
        role: &str,
        identity: &str,
        message: &Message,
        spend: Option<(&str, f64)>,
    ) -> Result<i64, SessionError> {
        self.append_then(key, contact, role, identity, message, spend, |_, _| Ok(()))
    }

    /// Like [`SessionStore::append_with_spend`], also running `then` (given the new
    /// message's id) in the same transaction: the channel queue's bookkeeping (the
    /// inbox row accepted, the reply queued) commits exactly when the message does.
    #[allow(clippy::too_many_arguments)]
    pub fn append_then(
        &self,
        key: &str,
        contact: &str,
        role: &str,
        identity: &str,
        message: &Message,
        spend: Option<(&str, f64)>,
        then: impl FnOnce(&rusqlite::Transaction<'_>, i64) -> rusqlite::Result<()>,
    ) -> Result<i64, SessionError> {
        let content = serde_json::to_string(&message.content).expect("content blocks serialise");
        let speaker = match message.role {
            ChatRole::User => "user",
            ChatRole::Assistant => "assistant",
        };
        self.with(|connection| {
            let transaction = connection.transaction().map_err(sql("begin append"))?;
            let time = now();
            transaction
                .execute(
                    "INSERT INTO sessions (key, contact, role, last_identity, created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?5)
                     ON CONFLICT(key) DO UPDATE SET contact = ?2, role = ?3, last_identity = ?4, updated_at = ?5",
                    params![key, contact, role, identity, time],
                )
                .map_err(sql("upsert session"))?;
            transaction
                .execute(
                    "INSERT INTO messages (session_key, role, content, identity, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![key, speaker, content, identity, time],
                )
                .map_err(sql("insert message"))?;
            let id = transaction.last_insert_rowid();
            if let Some((day, usd)) = spend {
                add_spend(&transaction, contact, day, usd)?;
            }
            then(&transaction, id).map_err(sql("update the channel queue"))?;
            transaction.commit().map_err(sql("commit message"))?;
            Ok(id)
        })
    }

    /// Runs `operation` on the database (the channel queue's tables live here too), as
    /// one transaction.
    pub fn queue<T>(
        &self,
        action: &'static str,
        operation: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<T>,
    ) -> Result<T, SessionError> {
        self.with(|connection| {
            let transaction = connection.transaction().map_err(sql(action))?;
            let value = operation(&transaction).map_err(sql(action))?;
            transaction.commit().map_err(sql(action))?;
            Ok(value)
        })
    }

    /// The summary and uncompacted messages of a session.
    pub fn transcript(&self, key: &str) -> Result<Transcript, SessionError> {
        self.with(|connection| {
            let summary: String = connection
                .query_row(
                    "SELECT summary FROM sessions WHERE key = ?1",
                    [key],
                    |row| row.get(0),
                )
                .optional()
                .map_err(sql("read summary"))?
                .unwrap_or_default();
            let messages = read_messages(connection, key, false, 0)?;
            Ok(Transcript { summary, messages })
        })
    }

    /// The uncompacted messages of a session stored after message `after_id`, oldest
    /// first: what a turn that kept the transcript in memory has not seen yet.
    pub fn messages_after(
        &self,
        key: &str,
        after_id: i64,
    ) -> Result<Vec<StoredMessage>, SessionError> {
        self.with(|connection| read_messages(connection, key, false, after_id))
    }

    /// Every message of a session, compacted or not (for `sessions_history` and audits).
    pub fn all_messages(&self, key: &str) -> Result<Vec<StoredMessage>, SessionError> {
        self.with(|connection| read_messages(connection, key, true, 0))
    }

    /// Up to `limit` messages of a session stored before message `before` (all when
    /// `None`), compacted or not, oldest first, each with its RFC 3339 time: a page of
    /// what a person reads back (the chat page's history).
    pub fn page_before(
        &self,
        key: &str,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Vec<(StoredMessage, String)>, SessionError> {
        self.with(|connection| {
            let mut statement = connection
                .prepare_cached(
                    "SELECT id, role, content, identity, created_at FROM messages
                     WHERE session_key = ?1 AND id < ?2 ORDER BY id DESC LIMIT ?3",
                )
                .map_err(sql("prepare history page"))?;
            let rows = statement
                .query_map(
                    params![key, before.unwrap_or(i64::MAX), limit as i64],
                    |row| {
                        Ok((
                            row.get::<_, i64>(0)?,
                            row.get::<_, String>(1)?,
                            row.get::<_, String>(2)?,
                            row.get::<_, String>(3)?,
                            row.get::<_, String>(4)?,
                        ))
                    },
                )
                .map_err(sql("read history page"))?;
            let mut page = Vec::new();
            for row in rows {
                let (id, speaker, content, identity, created_at) =
                    row.map_err(sql("read history row"))?;
                let content: Vec<ContentBlock> = serde_json::from_str(&content)
                    .map_err(|source| SessionError::Decode { id, source })?;
                let role = if speaker == "assistant" {
                    ChatRole::Assistant
                } else {
                    ChatRole::User
                };
                let message = StoredMessage {
                    id,
                    message: Message { role, content },
                    identity,
                };
                page.push((message, created_at));
            }
            page.reverse();
            Ok(page)
        })
    }

    /// Replaces messages up to and including `through_id` by `summary`.
    pub fn compact(&self, key: &str, through_id: i64, summary: &str) -> Result<(), SessionError> {
        self.with(|connection| {
            let transaction = connection.transaction().map_err(sql("begin compaction"))?;
            transaction
                .execute(
                    "UPDATE sessions SET summary = ?2 WHERE key = ?1",
                    params![key, summary],
                )
                .map_err(sql("store summary"))?;
            transaction
                .execute(
                    "UPDATE messages SET compacted = 1 WHERE session_key = ?1 AND id <= ?2",
                    params![key, through_id],
                )
                .map_err(sql("mark compacted"))?;
            transaction.commit().map_err(sql("commit compaction"))
        })
    }

    /// All sessions, most recently active first.
    pub fn list(&self) -> Result<Vec<SessionInfo>, SessionError> {
        self.with(|connection| {
            let mut statement = connection
                .prepare(
                    "SELECT s.key, s.contact, s.role, s.last_identity, s.updated_at,
                            (SELECT COUNT(*) FROM messages m WHERE m.session_key = s.key)
                     FROM sessions s ORDER BY s.updated_at DESC, s.key",
                )
                .map_err(sql("prepare session list"))?;
            let rows = statement
                .query_map([], |row| {
                    Ok(SessionInfo {
                        key: row.get(0)?,
                        contact: row.get(1)?,
                        role: row.get(2)?,
                        last_identity: row.get(3)?,
                        updated_at: row.get(4)?,
                        message_count: row.get::<_, i64>(5)?.max(0) as u64,
                    })
                })
                .map_err(sql("list sessions"))?;
            rows.collect::<Result<Vec<_>, _>>()
                .map_err(sql("read session row"))
        })
    }

    /// USD spent by `contact` on the days `first..=last` (`YYYY-MM-DD`, which sort as text).
    pub fn spent_between(
        &self,
        contact: &str,
        first: &str,
        last: &str,
    ) -> Result<f64, SessionError> {
        self.with(|connection| {
            connection
                .query_row(
                    "SELECT COALESCE(SUM(usd), 0.0) FROM spend WHERE contact = ?1 AND day BETWEEN ?2 AND ?3",
                    [contact, first, last],
                    |row| row.get(0),
                )
                .map_err(sql("read spend"))
        })
    }

    /// Adds `usd` to `contact`'s spend on `day`; returns that day's new total.
    pub fn add_spend(&self, contact: &str, day: &str, usd: f64) -> Result<f64, SessionError> {
        self.with(|connection| add_spend(connection, contact, day, usd))
    }

    /// The channel identities that wrote in session `key`, in the order they first did.
    pub fn writers(&self, key: &str) -> Result<Vec<String>, SessionError> {
        self.with(|connection| {
            let mut statement = connection
                .prepare_cached(
                    "SELECT identity FROM messages WHERE session_key = ?1 AND role = 'user'
                     GROUP BY identity ORDER BY MIN(id)",
                )
                .map_err(sql("prepare a session's writers"))?;
            let rows = statement
                .query_map(params![key], |row| row.get(0))
                .map_err(sql("list a session's writers"))?;
            rows.collect::<Result<Vec<String>, _>>()
                .map_err(sql("read a session's writers"))
        })
    }

    /// `PRAGMA integrity_check`: `"ok"` for a healthy database.
    pub fn integrity_check(&self) -> Result<String, SessionError> {
        self.with(|connection| {
            connection
                .query_row("PRAGMA integrity_check", [], |row| row.get(0))
                .map_err(sql("check integrity"))
        })
    }
}

fn add_spend(
    connection: &Connection,
    contact: &str,
    day: &str,
    usd: f64,
) -> Result<f64, SessionError> {
    connection
        .query_row(
            "INSERT INTO spend (contact, day, usd) VALUES (?1, ?2, ?3)
             ON CONFLICT(contact, day) DO UPDATE SET usd = usd + ?3
             RETURNING usd",
            params![contact, day, usd],
            |row| row.get(0),
        )
        .map_err(sql("add spend"))
}

fn read_messages(
    connection: &Connection,
    key: &str,
    include_compacted: bool,
    after_id: i64,
) -> Result<Vec<StoredMessage>, SessionError> {
    let mut statement = connection
        .prepare_cached(
            "SELECT id, role, content, identity FROM messages
             WHERE session_key = ?1 AND (compacted = 0 OR ?2) AND id > ?3 ORDER BY id",
        )
        .map_err(sql("prepare history"))?;
    let rows = statement
        .query_map(params![key, include_compacted, after_id], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
            ))
        })
        .map_err(sql("read history"))?;
    let mut messages = Vec::new();
    for row in rows {
        let (id, speaker, content, identity) = row.map_err(sql("read history row"))?;
        let content: Vec<ContentBlock> =
            serde_json::from_str(&content).map_err(|source| SessionError::Decode { id, source })?;
        let role = if speaker == "assistant" {
            ChatRole::Assistant
        } else {
            ChatRole::User
        };
        messages.push(StoredMessage {
            id,
            message: Message { role, content },
            identity,
        });
    }
    Ok(messages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_survive_reopen_and_compaction_hides_older_ones() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("sessions/transcripts.sqlite3");
        let first = {
            let store = SessionStore::open(&path).unwrap();
            let first = store
                .append(
                    "person:ana",
                    "ana",
                    "owner",
                    "email:ana@x",
                    &Message::user_text("one"),
                )
                .unwrap();
            store
                .append(
                    "person:ana",
                    "ana",
                    "owner",
                    "email:ana@x",
                    &Message::assistant_text("two"),
                )
                .unwrap();
            first
        };
        let store = SessionStore::open(&path).unwrap();
        let transcript = store.transcript("person:ana").unwrap();
        assert_eq!(transcript.messages.len(), 2);
        assert_eq!(transcript.messages[0].message.text(), "one");
        store.compact("person:ana", first, "ana said one").unwrap();
        let transcript = store.transcript("person:ana").unwrap();
        assert_eq!(transcript.summary, "ana said one");
        assert_eq!(transcript.messages.len(), 1);
        assert_eq!(store.all_messages("person:ana").unwrap().len(), 2);
        assert_eq!(store.list().unwrap()[0].message_count, 2);
        assert_eq!(store.integrity_check().unwrap(), "ok");
    }

    #[test]
    fn spend_accumulates_per_contact_over_the_days_asked_for() {
        let directory = tempfile::tempdir().unwrap();
        let store = SessionStore::open(directory.path().join("db.sqlite3")).unwrap();
        assert_eq!(
            store
                .spent_between("ivan", "2026-11-01", "2026-11-30")
                .unwrap(),
            0.0
        );
        store.add_spend("ivan", "2026-11-02", 0.25).unwrap();
        assert_eq!(store.add_spend("ivan", "2026-11-02", 0.5).unwrap(), 0.75);
        store.add_spend("ivan", "2026-11-30", 0.125).unwrap();
        store.add_spend("ivan", "2026-12-01", 4.0).unwrap();
        assert_eq!(
            store
                .spent_between("ivan", "2026-11-01", "2026-11-30")
                .unwrap(),
            0.875
        );
        assert_eq!(
            store
                .spent_between("ivan", "2026-11-03", "2026-11-03")
                .unwrap(),
            0.0
        );
        assert_eq!(
            store
                .spent_between("ana", "2026-11-01", "2026-11-30")
                .unwrap(),
            0.0
        );
    }
}
