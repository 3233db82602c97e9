//! Approvals: a role's risky tool calls wait for someone else's yes.
//!
//! A role's `approvals` rules say which calls (tools, and globs over their arguments)
//! need a decision and who may give it (roles and contacts; never the requester). When
//! a turn reaches such a call it does not run: the call is stored here with a digest
//! of its exact arguments and a short code, the approvers are told on their own
//! channels, and the turn goes on (it holds no slot while the request waits). An
//! approver answers `approve <code>` or `reject <code>`; the decision is one state
//! change of a pending row, so a second answer, an expired request or one whose stored
//! arguments no longer match their digest is refused. Every event is a line of
//! `logs/approvals.jsonl` (the ledger reads it).
//!
//! A rule may name requests a command makes through Porter instead of tools. Porter
//! refuses those while the command runs and reports them when its key is revoked; the
//! request stored here is then the command's call (`exec`, or `process` start) together
//! with the requests Porter held, all under one digest, and an approved rerun gets a
//! one-time Porter grant for exactly those requests.
//!
//! This module is the store and the rules; the runtime (`runtime/approval.rs`) asks
//! and decides.

use std::{
    io::Write,
    path::{Path, PathBuf},
};

use parking_lot::Mutex;
use rusqlite::{Connection, OptionalExtension, params};
use saint_config::{ApprovalRule, Approvers, BotConfig, RoleConfig};
use saint_tools::exec::PorterRequest;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Characters of a code: no look-alikes (0/O, 1/I/L).
const CODE_ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
const CODE_LENGTH: usize = 6;

/// The first rule of `role` that the call `tool(input)` falls under. `process start`
/// runs a command line as `exec` does (the same `command` argument, the same admission
/// checks), so a rule naming `exec` covers it too: starting a command in the background
/// is never a way around an approval.
pub fn rule_for<'r>(role: &'r RoleConfig, tool: &str, input: &Value) -> Option<&'r ApprovalRule> {
    let starts_a_command = tool == "process" && input["action"] == "start";
    let names: &[&str] = if starts_a_command {
        &[tool, "exec"]
    } else {
        &[tool]
    };
    role.approvals.iter().find(|rule| {
        rule.tools.iter().any(|pattern| {
            names
                .iter()
                .any(|name| saint_tools::policy::pattern_matches(pattern, name))
        }) && rule.when.iter().all(|(argument, glob)| {
            let text = match &input[argument.as_str()] {
                Value::String(text) => text.clone(),
                Value::Null => return false,
                other => other.to_string(),
            };
            globset::Glob::new(glob)
                .map(|glob| glob.compile_matcher().is_match(&text))
                .unwrap_or(false)
        })
    })
}

/// The digest a decision is bound to: the tool, its exact arguments and the Porter
/// requests it waits for (none: the digest of the tool and arguments alone, as before
/// Porter requests could be approved).
pub fn digest(tool: &str, input: &Value, porter: &[PorterRequest]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(tool.as_bytes());
    hasher.update([0]);
    // serde_json's maps are sorted: one input, one text.
    hasher.update(input.to_string().as_bytes());
    if !porter.is_empty() {
        hasher.update([0]);
        hasher.update(
            serde_json::to_string(porter)
                .expect("porter requests serialise")
                .as_bytes(),
        );
    }
    hex::encode(hasher.finalize())
}

/// The contacts who may decide a request of `requester` under `approvers`, in the
/// config's order, the requester left out.
pub fn deciders<'c>(config: &'c BotConfig, approvers: &Approvers, requester: &str) -> Vec<&'c str> {
    config
        .contacts
        .iter()
        .filter(|contact| {
            contact.slug != requester
                && (approvers.roles.contains(&contact.role)
                    || approvers.contacts.contains(&contact.slug))
        })
        .map(|contact| contact.slug.as_str())
        .collect()
}

/// An answer to an approval request: `approve K7QX2P` or `reject K7QX2P` (any case,
/// alone in the message).
pub fn parse_decision(text: &str) -> Option<(bool, String)> {
    let mut words = text.split_whitespace();
    let verb = words.next()?.to_ascii_lowercase();
    let code = words.next()?.to_ascii_uppercase();
    if words.next().is_some()
        || code.len() != CODE_LENGTH
        || !code.bytes().all(|byte| CODE_ALPHABET.contains(&byte))
    {
        return None;
    }
    match verb.as_str() {
        "approve" => Some((true, code)),
        "reject" => Some((false, code)),
        _ => None,
    }
}

/// A request waiting for (or past) its decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub code: String,
    pub requester: String,
    pub requester_role: String,
    /// The session and identity the request came from (its answer goes there).
    pub session_key: String,
    pub identity: String,
    pub tool: String,
    pub input: Value,
    /// Requests through Porter the call's command made that wait for this decision:
    /// an approved rerun gets a one-time grant for each.
    pub porter: Vec<PorterRequest>,
    pub digest: String,
    pub approvers: Approvers,
    pub created_ms: i64,
    pub expires_ms: i64,
}

/// Why a decision was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("there is no request {0}")]
    Unknown(String),
    #[error("request {0} was already decided")]
    AlreadyDecided(String),
    #[error("request {0} expired")]
    Expired(String),
    #[error("you may not decide request {0}")]
    NotAnApprover(String),
    #[error("request {0} was made by you: someone else must decide it")]
    OwnRequest(String),
    #[error("the arguments of request {0} changed after it was made")]
    Altered(String),
}

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    #[error("failed to open the approvals database {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("failed to use the approvals database")]
    Database(#[from] rusqlite::Error),
    #[error(
        "{waiting} of your requests already wait for a decision (at most {MOST_WAITING_PER_PERSON}); ask again once one is decided"
    )]
    TooManyWaiting { waiting: usize },
}

/// Requests one person may have waiting at once: their approvers are asked in their
/// own chats, so a loop (or a flood) of risky calls cannot flood them.
pub const MOST_WAITING_PER_PERSON: usize = 5;

/// The requests of one workspace (`sessions/approvals.sqlite3`).
pub struct ApprovalStore {
    connection: Mutex<Connection>,
    audit: PathBuf,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AuditLine<'a> {
    ts: String,
    event: &'a str,
    code: &'a str,
    requester: &'a str,
    role: &'a str,
    tool: &'a str,
    digest: &'a str,
    /// The Porter requests the call waits for.
    #[serde(skip_serializing_if = "<[PorterRequest]>::is_empty")]
    porter: &'a [PorterRequest],
    #[serde(skip_serializing_if = "Option::is_none")]
    by: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

impl ApprovalStore {
    /// Opens (creating) the store of `workspace`.
    pub fn open(workspace: &Path) -> Result<Self, ApprovalError> {
        let path = workspace.join("sessions").join("approvals.sqlite3");
        let open = || -> Result<Connection, rusqlite::Error> {
            if let Some(parent) = path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            let connection = Connection::open(&path)?;
            connection.pragma_update(None, "journal_mode", "WAL")?;
            connection.pragma_update(None, "synchronous", "FULL")?;
            connection.execute_batch(
                "CREATE TABLE IF NOT EXISTS approvals (
                    code TEXT PRIMARY KEY,
                    requester TEXT NOT NULL,
                    requester_role TEXT NOT NULL,
                    session_key TEXT NOT NULL,
                    identity TEXT NOT NULL,
                    tool TEXT NOT NULL,
                    input TEXT NOT NULL,
                    digest TEXT NOT NULL,
                    approvers TEXT NOT NULL,
                    created_ms INTEGER NOT NULL,
                    expires_ms INTEGER NOT NULL,
                    state TEXT NOT NULL DEFAULT 'pending',
                    decided_by TEXT,
                    decided_ms INTEGER,
                    porter TEXT NOT NULL DEFAULT '[]'
                 );
                 CREATE INDEX IF NOT EXISTS approvals_pending
                    ON approvals (state, expires_ms);",
            )?;
            // A store made before Porter requests could be approved gains the column.
            let has_porter: bool = connection.query_row(
                "SELECT COUNT(*) FROM pragma_table_info('approvals') WHERE name = 'porter'",
                [],
                |row| row.get::<_, i64>(0).map(|count| count > 0),
            )?;
            if !has_porter {
                connection.execute_batch(
                    "ALTER TABLE approvals ADD COLUMN porter TEXT NOT NULL DEFAULT '[]'",
                )?;
            }
            Ok(connection)
        };
        let connection = open().map_err(|source| ApprovalError::Open {
            path: path.clone(),
            source,
        })?;
        Ok(Self {
            connection: Mutex::new(connection),
            audit: workspace.join("logs").join("approvals.jsonl"),
        })
    }

    fn connection(&self) -> parking_lot::MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves no half-written row (each change is
        // one statement), so the connection is still good.
        self.connection.lock()
    }

    fn audit(
        &self,
        event: &str,
        request: &Request,
        by: Option<&str>,
        reason: Option<String>,
        now_ms: i64,
    ) {
        let line = AuditLine {
            ts: jiff::Timestamp::from_millisecond(now_ms)
                .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
                .to_string(),
            event,
            code: &request.code,
            requester: &request.requester,
            role: &request.requester_role,
            tool: &request.tool,
            digest: &request.digest,
            porter: &request.porter,
            by,
            reason,
        };
        let mut text = serde_json::to_string(&line).expect("audit lines serialise");
        text.push('\n');
        if let Some(parent) = self.audit.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.audit)
            .and_then(|mut file| file.write_all(text.as_bytes()));
        if let Err(error) = written {
            tracing::error!(%error, path = %self.audit.display(), "failed to write an approval audit line");
        }
    }

    /// Stores a new request under a fresh code and returns it.
    #[allow(clippy::too_many_arguments)]
    pub fn request(
        &self,
        requester: &str,
        requester_role: &str,
        session_key: &str,
        identity: &str,
        tool: &str,
        input: &Value,
        porter: &[PorterRequest],
        rule: &ApprovalRule,
        now_ms: i64,
    ) -> Result<Request, ApprovalError> {
        let request = Request {
            code: String::new(),
            requester: requester.to_string(),
            requester_role: requester_role.to_string(),
            session_key: session_key.to_string(),
            identity: identity.to_string(),
            tool: tool.to_string(),
            input: input.clone(),
            porter: porter.to_vec(),
            digest: digest(tool, input, porter),
            approvers: rule.approvers.clone(),
            created_ms: now_ms,
            expires_ms: now_ms.saturating_add((rule.timeout_seconds as i64).saturating_mul(1000)),
        };
        let connection = self.connection();
        let waiting: i64 = connection.query_row(
            "SELECT COUNT(*) FROM approvals
             WHERE requester = ?1 AND state = 'pending' AND expires_ms > ?2",
            params![requester, now_ms],
            |row| row.get(0),
        )?;
        let waiting = usize::try_from(waiting).unwrap_or(usize::MAX);
        if waiting >= MOST_WAITING_PER_PERSON {
            return Err(ApprovalError::TooManyWaiting { waiting });
        }
        // A clash of random codes is unlikely; try again rather than reuse one.
        for _ in 0..16 {
            let code = new_code();
            let inserted = connection.execute(
                "INSERT OR IGNORE INTO approvals (code, requester, requester_role, session_key,
                    identity, tool, input, digest, approvers, created_ms, expires_ms, porter)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                params![
                    code,
                    request.requester,
                    request.requester_role,
                    request.session_key,
                    request.identity,
                    request.tool,
                    request.input.to_string(),
                    request.digest,
                    serde_json::to_string(&request.approvers).expect("approvers serialise"),
                    request.created_ms,
                    request.expires_ms,
                    serde_json::to_string(&request.porter).expect("porter requests serialise"),
                ],
            )?;
            if inserted == 1 {
                drop(connection);
                let request = Request { code, ..request };
                self.audit("requested", &request, None, None, now_ms);
                return Ok(request);
            }
        }
        Err(ApprovalError::Database(
            rusqlite::Error::QueryReturnedNoRows,
        ))
    }

    /// The request `code`, whatever its state, with that state.
    pub fn get(&self, code: &str) -> Result<Option<(Request, String)>, ApprovalError> {
        let connection = self.connection();
        Ok(connection
            .query_row(
                "SELECT code, requester, requester_role, session_key, identity, tool, input,
                        digest, approvers, created_ms, expires_ms, state, porter
                 FROM approvals WHERE code = ?1",
                params![code],
                |row| Ok((read_request(row)?, row.get::<_, String>(11)?)),
            )
            .optional()?)
    }

    /// Takes `decider`'s decision on `code`, if they may make it now: exactly one
    /// decision per request, by someone `may_decide` admits who is not the requester,
    /// before it expires, on arguments that still match their digest.
    pub fn decide(
        &self,
        code: &str,
        decider: &str,
        may_decide: impl Fn(&Approvers) -> bool,
        approve: bool,
        now_ms: i64,
    ) -> Result<Result<Request, Refusal>, ApprovalError> {
        let Some((request, state)) = self.get(code)? else {
            return Ok(Err(Refusal::Unknown(code.to_string())));
        };
        let refuse = |refusal: Refusal| {
            self.audit(
                "refused",
                &request,
                Some(decider),
                Some(refusal.to_string()),
                now_ms,
            );
            Ok(Err(refusal))
        };
        if state != "pending" {
            return refuse(Refusal::AlreadyDecided(code.to_string()));
        }
        if decider == request.requester {
            return refuse(Refusal::OwnRequest(code.to_string()));
        }
        if !may_decide(&request.approvers) {
            return refuse(Refusal::NotAnApprover(code.to_string()));
        }
        if now_ms >= request.expires_ms {
            return refuse(Refusal::Expired(code.to_string()));
        }
        if digest(&request.tool, &request.input, &request.porter) != request.digest {
            return refuse(Refusal::Altered(code.to_string()));
        }
        let new_state = if approve { "approved" } else { "rejected" };
        // One decision: the row changes only while it is still pending.
        let changed = self.connection().execute(
            "UPDATE approvals SET state = ?1, decided_by = ?2, decided_ms = ?3
             WHERE code = ?4 AND state = 'pending' AND digest = ?5",
            params![new_state, decider, now_ms, code, request.digest],
        )?;
        if changed != 1 {
            return refuse(Refusal::AlreadyDecided(code.to_string()));
        }
        self.audit(new_state, &request, Some(decider), None, now_ms);
        Ok(Ok(request))
    }

    /// Marks every pending request due by `now_ms` expired and returns them.
    pub fn expire(&self, now_ms: i64) -> Result<Vec<Request>, ApprovalError> {
        let due: Vec<Request> = {
            let connection = self.connection();
            let mut statement = connection.prepare(
                "SELECT code, requester, requester_role, session_key, identity, tool, input,
                        digest, approvers, created_ms, expires_ms, state, porter
                 FROM approvals WHERE state = 'pending' AND expires_ms <= ?1",
            )?;
            statement
                .query_map(params![now_ms], read_request)?
                .collect::<Result<_, _>>()?
        };
        let mut expired = Vec::new();
        for request in due {
            let changed = self.connection().execute(
                "UPDATE approvals SET state = 'expired', decided_ms = ?1
                 WHERE code = ?2 AND state = 'pending'",
                params![now_ms, request.code],
            )?;
            if changed == 1 {
                self.audit("expired", &request, None, None, now_ms);
                expired.push(request);
            }
        }
        Ok(expired)
    }

    /// How many requests wait for a decision.
    pub fn pending(&self) -> Result<usize, ApprovalError> {
        let count: i64 = self.connection().query_row(
            "SELECT COUNT(*) FROM approvals WHERE state = 'pending'",
            [],
            |row| row.get(0),
        )?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// Notes how an approved request's run ended.
    pub fn ran(&self, request: &Request, outcome: &str, now_ms: i64) {
        self.audit("ran", request, None, Some(outcome.to_string()), now_ms);
    }
}

fn read_request(row: &rusqlite::Row<'_>) -> rusqlite::Result<Request> {
    let input: String = row.get(6)?;
    let approvers: String = row.get(8)?;
    Ok(Request {
        code: row.get(0)?,
        requester: row.get(1)?,
        requester_role: row.get(2)?,
        session_key: row.get(3)?,
        identity: row.get(4)?,
        tool: row.get(5)?,
        // A row that does not parse fails its digest check and is refused.
        input: serde_json::from_str(&input).unwrap_or(Value::Null),
        digest: row.get(7)?,
        approvers: serde_json::from_str(&approvers).unwrap_or_default(),
        created_ms: row.get(9)?,
        expires_ms: row.get(10)?,
        // A row whose requests do not parse fails its digest check and is refused.
        porter: serde_json::from_str(&row.get::<_, String>(12)?).unwrap_or_else(|_| {
            vec![PorterRequest {
                cli: String::new(),
                host: String::new(),
                method: String::new(),
                path: String::new(),
            }]
        }),
    })
}

fn new_code() -> String {
    use rand::Rng;
    let mut random = rand::thread_rng();
    (0..CODE_LENGTH)
        .map(|_| CODE_ALPHABET[random.gen_range(0..CODE_ALPHABET.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests;
