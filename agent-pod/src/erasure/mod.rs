//! What the bot keeps about one person, found, erased, exported and aged out: their
//! transcripts (their sessions, the group messages they wrote, their jobs' and
//! sub-agents' sessions), the files that came with their messages, their memory notes
//! and index rows, their channel inbox and outbox rows, their scheduled jobs, and their
//! usage lines (pseudonymised, costs kept).
//!
//! Works on the workspace's files directly (no running runtime needed): `saint-agent
//! erase` and `export` run it with the agent stopped, the running agent runs it for a
//! Contact rendered with `erase: true` and for its roles' retention ([`retention`]).
//! SQLite rows are deleted with `secure_delete` on, then each database is vacuumed and
//! its write-ahead log truncated, so no freed page still holds what was erased.

pub mod export;
pub mod retention;

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    io::Read,
    path::{Path, PathBuf},
};

use rusqlite::{Connection, Transaction, params};
use saint_channels::attachments::safe_name;
use saint_config::BotConfig;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The transcript database (transcripts, spend, channel inbox and outbox).
pub const TRANSCRIPTS: &str = "sessions/transcripts.sqlite3";
/// The scheduled jobs' database.
pub const JOBS: &str = "sessions/jobs.sqlite3";
/// The usage log.
pub const USAGE_LOG: &str = "logs/usage.jsonl";

/// The approval requests (their arguments may quote the person).
pub const APPROVALS: &str = "sessions/approvals.sqlite3";

/// The approvals' audit log.
pub const APPROVALS_LOG: &str = "logs/approvals.jsonl";
/// One line per erasure done: when, the pseudonym, the counts (never the slug).
pub const ERASURE_LOG: &str = "logs/erasures.jsonl";
/// The secret the pseudonyms are keyed with (so a slug cannot be guessed back from one).
const PSEUDONYM_KEY: &str = "sessions/pseudonym.key";

/// Why an erasure, export or sweep failed.
#[derive(Debug, thiserror::Error)]
pub enum ErasureError {
    #[error("failed to {action} {}", path.display())]
    Sqlite {
        action: &'static str,
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("failed to {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to erase from the memory index")]
    Memory(#[from] saint_memory::IndexError),
    #[error("failed to write the archive {}", path.display())]
    Archive {
        path: PathBuf,
        source: zip::result::ZipError,
    },
    #[error("{0:?} is not a contact slug")]
    Slug(String),
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ErasureError {
    let path = path.to_path_buf();
    move |source| ErasureError::Io {
        action,
        path,
        source,
    }
}

fn sql(action: &'static str, path: &Path) -> impl FnOnce(rusqlite::Error) -> ErasureError {
    let path = path.to_path_buf();
    move |source| ErasureError::Sqlite {
        action,
        path,
        source,
    }
}

/// One person as their data names them: the slug and every channel identity they
/// wrote from (the config's, and those the stores remember, for a Contact already gone
/// from the config).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Person {
    /// Contact slug.
    pub slug: String,
    /// Channel identities (`telegram:333`), sorted.
    pub identities: Vec<String>,
}

impl Person {
    /// `slug` with the identities `config` gives them and those found in the
    /// workspace's stores.
    pub fn find(
        workspace: &Path,
        config: Option<&BotConfig>,
        slug: &str,
    ) -> Result<Self, ErasureError> {
        if saint_config::ContactSlug::parse(slug).is_err() {
            return Err(ErasureError::Slug(slug.to_string()));
        }
        let mut identities = BTreeSet::new();
        if let Some(config) = config {
            for contact in config
                .contacts
                .iter()
                .filter(|contact| contact.slug == slug)
            {
                identities.extend(contact.identities.iter().map(|id| id.to_string()));
            }
            if let Some(linked) = config.identity_links.get(slug) {
                identities.extend(linked.iter().map(|id| id.to_string()));
            }
        }
        let transcripts = workspace.join(TRANSCRIPTS);
        if transcripts.exists() {
            let connection = open(&transcripts)?;
            if has_table(&connection, "messages") {
                let mut statement = connection
                    .prepare(
                        "SELECT DISTINCT identity FROM messages WHERE session_key = ?1
                         UNION SELECT last_identity FROM sessions WHERE key = ?1",
                    )
                    .map_err(sql("read identities from", &transcripts))?;
                let found = statement
                    .query_map([format!("person:{slug}")], |row| row.get::<_, String>(0))
                    .map_err(sql("read identities from", &transcripts))?;
                for identity in found {
                    identities.insert(identity.map_err(sql("read identities from", &transcripts))?);
                }
            }
        }
        let jobs = workspace.join(JOBS);
        if jobs.exists() {
            let connection = open(&jobs)?;
            if has_table(&connection, "jobs") {
                let mut statement = connection
                    .prepare("SELECT DISTINCT owner_identity FROM jobs WHERE owner = ?1")
                    .map_err(sql("read identities from", &jobs))?;
                let found = statement
                    .query_map([slug], |row| row.get::<_, String>(0))
                    .map_err(sql("read identities from", &jobs))?;
                for identity in found {
                    identities.insert(identity.map_err(sql("read identities from", &jobs))?);
                }
            }
        }
        identities.retain(|identity| !identity.is_empty());
        Ok(Self {
            slug: slug.to_string(),
            identities: identities.into_iter().collect(),
        })
    }

    /// Their memory directory, workspace-relative.
    pub fn memory_directory(&self) -> String {
        format!("memory/users/{}", self.slug)
    }

    fn session_key(&self) -> String {
        format!("person:{}", self.slug)
    }
}

/// What an erasure removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErasureReport {
    /// The stable pseudonym their usage lines now carry.
    pub pseudonym: String,
    /// How many of each kind were removed (or rewritten, for usage lines).
    pub counts: BTreeMap<&'static str, usize>,
    /// Files and directories removed, workspace-relative.
    pub paths: Vec<String>,
}

impl ErasureReport {
    fn add(&mut self, kind: &'static str, count: usize) {
        *self.counts.entry(kind).or_default() += count;
    }

    /// Everything counted.
    pub fn total(&self) -> usize {
        self.counts.values().sum()
    }
}

impl fmt::Display for ErasureReport {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(formatter, "pseudonym in usage lines: {}", self.pseudonym)?;
        for (kind, count) in &self.counts {
            writeln!(formatter, "{kind}: {count}")?;
        }
        for path in &self.paths {
            writeln!(formatter, "removed: {path}")?;
        }
        Ok(())
    }
}

/// Erases everything kept about `person` under `workspace` and returns what was
/// removed. Idempotent: a second run finds nothing and reports zeros.
pub fn erase(workspace: &Path, person: &Person) -> Result<ErasureReport, ErasureError> {
    let mut report = ErasureReport {
        pseudonym: pseudonym(workspace, &person.slug)?,
        ..ErasureReport::default()
    };
    // Jobs first: the sessions of the jobs removed go with the transcripts.
    let job_sessions = erase_jobs(workspace, person, &mut report)?;
    let files = erase_transcripts(workspace, person, &job_sessions, &mut report)?;
    for path in files.outbox_files {
        // Written by the agent itself; still held to its own folder, so a row can never
        // make erasure remove anything else.
        if !saint_config::is_workspace_relative(&path) || !path.starts_with(".saint/outbox/") {
            continue;
        }
        match std::fs::remove_file(workspace.join(&path)) {
            Ok(()) => {
                report.add("voice note files", 1);
                report.paths.push(path);
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(io("remove", &workspace.join(&path))(error)),
        }
    }
    for (channel, platform_id) in files.attachments {
        let relative = format!("inbox/{}/{}", safe_name(&channel), safe_name(&platform_id));
        let removed = remove_tree(&workspace.join(&relative))?;
        if removed > 0 {
            report.add("attachment files", removed);
            report.paths.push(relative);
        }
    }
    erase_memory(workspace, person, &mut report)?;
    let pseudonym = report.pseudonym.clone();
    let rewritten = filter_log(workspace, USAGE_LOG, |line| {
        Some(pseudonymise_line(line, person, &pseudonym))
    })?;
    report.add("usage lines pseudonymised", rewritten);
    erase_approvals(workspace, person, &pseudonym, &mut report)?;
    record_erasure(workspace, &report)?;
    Ok(report)
}

/// Whether `slug`'s erasure is already on record (the running agent erases a Contact
/// marked `erase: true` once, not at every reload).
pub fn already_erased(workspace: &Path, slug: &str) -> Result<bool, ErasureError> {
    let pseudonym = pseudonym(workspace, slug)?;
    let log = workspace.join(ERASURE_LOG);
    let text = match std::fs::read_to_string(&log) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(error) => return Err(io("read", &log)(error)),
    };
    Ok(text.lines().any(|line| {
        serde_json::from_str::<Value>(line)
            .is_ok_and(|entry| entry["pseudonym"].as_str() == Some(pseudonym.as_str()))
    }))
}

fn record_erasure(workspace: &Path, report: &ErasureReport) -> Result<(), ErasureError> {
    use std::io::Write;
    let log = workspace.join(ERASURE_LOG);
    std::fs::create_dir_all(log.parent().expect("has a parent")).map_err(io("create", &log))?;
    let mut line = serde_json::json!({
        "ts": jiff::Timestamp::now().to_string(),
        "pseudonym": report.pseudonym,
        "counts": report.counts,
    })
    .to_string();
    line.push('\n');
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .and_then(|mut file| file.write_all(line.as_bytes()))
        .map_err(io("append to", &log))
}

/// Removes their jobs and those delivering to them; returns the jobs' session keys.
fn erase_jobs(
    workspace: &Path,
    person: &Person,
    report: &mut ErasureReport,
) -> Result<Vec<String>, ErasureError> {
    let path = workspace.join(JOBS);
    let mut sessions = Vec::new();
    scrub(&path, |transaction| {
        if !has_table(transaction, "jobs") {
            return Ok(());
        }
        let ids = person_identities_json(person);
        sessions = job_session_keys(transaction, person)?;
        let removed = transaction.execute(
            &format!("DELETE FROM jobs WHERE {JOB_CONDITION}"),
            params![person.slug, ids],
        )?;
        report.add("scheduled jobs", removed);
        if has_table(transaction, "budget_notices") {
            transaction.execute(
                "DELETE FROM budget_notices WHERE owner = ?1",
                [&person.slug],
            )?;
        }
        Ok(())
    })?;
    Ok(sessions)
}

/// What of a person's files the transcript database points at: the attachment folders
/// of their inbox rows and the voice notes their outbox rows carry.
#[derive(Default)]
struct PersonFiles {
    /// (channel, platform id) of each inbox row they sent.
    attachments: Vec<(String, String)>,
    /// Files (`.saint/outbox/…`) named by their outbox rows that no other row names.
    outbox_files: Vec<String>,
}

/// Removes their sessions and messages, their group messages, spend, inbox and outbox
/// rows; returns the files those rows pointed at.
fn erase_transcripts(
    workspace: &Path,
    person: &Person,
    job_sessions: &[String],
    report: &mut ErasureReport,
) -> Result<PersonFiles, ErasureError> {
    let path = workspace.join(TRANSCRIPTS);
    let mut files = PersonFiles::default();
    let ids = person_identities_json(person);
    let pseudonym = report.pseudonym.clone();
    scrub(&path, |transaction| {
        if has_table(transaction, "sessions") {
            let keys = serde_json::to_string(&session_keys(transaction, person, job_sessions)?)
                .expect("strings serialise");
            let messages = transaction.execute(
                "DELETE FROM messages WHERE session_key IN (SELECT value FROM json_each(?1))",
                [&keys],
            )?;
            let sessions = transaction.execute(
                "DELETE FROM sessions WHERE key IN (SELECT value FROM json_each(?1))",
                [&keys],
            )?;
            report.add("sessions", sessions);
            report.add("transcript messages", messages);
            // Group conversations: their messages (and the turns answering them, which
            // carry their identity) go; the session stays for the others.
            let touched: Vec<String> = {
                let mut statement = transaction.prepare(
                    "SELECT DISTINCT session_key FROM messages WHERE session_key LIKE 'group:%'
                     AND identity IN (SELECT value FROM json_each(?1))",
                )?;
                statement
                    .query_map([&ids], |row| row.get(0))?
                    .collect::<Result<_, _>>()?
            };
            let group_messages = transaction.execute(
                "DELETE FROM messages WHERE session_key LIKE 'group:%'
                 AND identity IN (SELECT value FROM json_each(?1))",
                [&ids],
            )?;
            report.add("group messages", group_messages);
            for key in touched.iter().map(String::as_str).chain(
                group_sessions_naming(transaction, person, &ids)?
                    .iter()
                    .map(String::as_str),
            ) {
                forget_in_group_session(transaction, key, person, &ids, &pseudonym)?;
            }
        }
        if has_table(transaction, "spend") {
            let spend =
                transaction.execute("DELETE FROM spend WHERE contact = ?1", [&person.slug])?;
            report.add("spend rows", spend);
        }
        if has_table(transaction, "inbox") {
            let mut statement = transaction.prepare(
                "SELECT channel, platform_id FROM inbox
                 WHERE sender IN (SELECT value FROM json_each(?1))",
            )?;
            files.attachments = statement
                .query_map([&ids], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<Result<_, _>>()?;
            // The voice notes (`tts`) of the rows about to go: a file another person's
            // row still names (one note sent to several recipients) stays for them.
            let doomed = "recipient IN (SELECT value FROM json_each(?1))
                 OR inbox_id IN (SELECT id FROM inbox WHERE sender IN (SELECT value FROM json_each(?1)))";
            let mut statement = transaction.prepare(&format!(
                "SELECT DISTINCT file.value ->> '$.path' FROM outbox, json_each(outbox.body, '$.files') AS file
                 WHERE {doomed}"
            ))?;
            let named: Vec<String> = statement
                .query_map([&ids], |row| row.get(0))?
                .collect::<Result<_, _>>()?;
            let outbox = transaction.execute(
                "DELETE FROM outbox WHERE recipient IN (SELECT value FROM json_each(?1))
                 OR inbox_id IN (SELECT id FROM inbox WHERE sender IN (SELECT value FROM json_each(?1)))",
                [&ids],
            )?;
            let inbox = transaction.execute(
                "DELETE FROM inbox WHERE sender IN (SELECT value FROM json_each(?1))",
                [&ids],
            )?;
            report.add("inbox rows", inbox);
            report.add("outbox rows", outbox);
            for path in named {
                let still_named: bool = transaction.query_row(
                    "SELECT EXISTS(SELECT 1 FROM outbox, json_each(outbox.body, '$.files') AS file
                     WHERE file.value ->> '$.path' = ?1)",
                    [&path],
                    |row| row.get(0),
                )?;
                if !still_named {
                    files.outbox_files.push(path);
                }
            }
        }
        Ok(())
    })?;
    Ok(files)
}

/// Their jobs, and those delivering to them (`?1`: slug, `?2`: identities as JSON).
const JOB_CONDITION: &str = "owner = ?1 OR deliver_to = ?1
     OR owner_identity IN (SELECT value FROM json_each(?2))
     OR deliver_identity IN (SELECT value FROM json_each(?2))";

/// The sessions that are wholly theirs: their own, their jobs', their sub-agents', and
/// those of the identities they wrote from as a stranger (never a group's, which keeps
/// everyone else's messages).
fn session_keys(
    connection: &Connection,
    person: &Person,
    job_sessions: &[String],
) -> rusqlite::Result<Vec<String>> {
    let jobs = serde_json::to_string(job_sessions).expect("strings serialise");
    let mut statement = connection.prepare(
        "SELECT key FROM sessions
         WHERE key NOT LIKE 'group:%' AND (
             key = ?1 OR contact = ?2
             OR key IN (SELECT value FROM json_each(?3))
             OR EXISTS (SELECT 1 FROM json_each(?4) AS identity WHERE
                 key = 'peer:' || identity.value
                 OR substr(key, 1, length(identity.value) + 6) = 'peer:' || identity.value || '~'))
         ORDER BY key",
    )?;
    statement
        .query_map(
            params![
                person.session_key(),
                person.slug,
                jobs,
                person_identities_json(person)
            ],
            |row| row.get(0),
        )?
        .collect()
}

/// The session keys of their jobs, and of jobs delivering to them.
fn job_session_keys(connection: &Connection, person: &Person) -> rusqlite::Result<Vec<String>> {
    if !has_table(connection, "jobs") {
        return Ok(Vec::new());
    }
    let mut statement =
        connection.prepare(&format!("SELECT id FROM jobs WHERE {JOB_CONDITION}"))?;
    statement
        .query_map(
            params![person.slug, person_identities_json(person)],
            |row| row.get::<_, i64>(0),
        )?
        .map(|id| {
            id.map(|id| saint_config::SessionKey::for_job(&crate::schedule::jobs::label(id)).into())
        })
        .collect()
}

/// Group sessions whose row names them (they were the last to write).
fn group_sessions_naming(
    transaction: &Transaction<'_>,
    person: &Person,
    ids: &str,
) -> rusqlite::Result<Vec<String>> {
    let mut statement = transaction.prepare(
        "SELECT key FROM sessions WHERE key LIKE 'group:%' AND (contact = ?1
         OR last_identity IN (SELECT value FROM json_each(?2)))",
    )?;
    statement
        .query_map(params![person.slug, ids], |row| row.get(0))?
        .collect()
}

/// A group session they wrote in: its summary (which may retell what they said) is
/// dropped, and a row naming them names the last remaining writer, or goes when no
/// message is left.
fn forget_in_group_session(
    transaction: &Transaction<'_>,
    key: &str,
    person: &Person,
    ids: &str,
    pseudonym: &str,
) -> rusqlite::Result<()> {
    let remaining: i64 = transaction.query_row(
        "SELECT count(*) FROM messages WHERE session_key = ?1",
        [key],
        |row| row.get(0),
    )?;
    if remaining == 0 {
        transaction.execute("DELETE FROM sessions WHERE key = ?1", [key])?;
        return Ok(());
    }
    transaction.execute("UPDATE sessions SET summary = '' WHERE key = ?1", [key])?;
    transaction.execute(
        "UPDATE sessions SET contact = ?3,
             last_identity = COALESCE((SELECT identity FROM messages WHERE session_key = ?1
                                       ORDER BY id DESC LIMIT 1), '')
         WHERE key = ?1 AND (contact = ?2 OR last_identity IN (SELECT value FROM json_each(?4)))",
        params![key, person.slug, pseudonym, ids],
    )?;
    Ok(())
}

/// Removes their memory folder and its files' index rows, keyword entries and vectors.
fn erase_memory(
    workspace: &Path,
    person: &Person,
    report: &mut ErasureReport,
) -> Result<(), ErasureError> {
    let directory = person.memory_directory();
    let database = workspace.join(saint_memory::DEFAULT_DATABASE_PATH);
    let mut paths: BTreeSet<String> = saint_memory::erase::indexed_under(&database, &directory)?
        .into_iter()
        .collect();
    let on_disk = list_files(&workspace.join(&directory))?;
    for file in &on_disk {
        if let Ok(relative) = file.strip_prefix(workspace) {
            paths.insert(relative.to_string_lossy().into_owned());
        }
    }
    let paths: Vec<String> = paths.into_iter().collect();
    let chunks = saint_memory::erase::forget_files(&database, &paths)?;
    report.add("memory index chunks", chunks);
    let removed = remove_tree(&workspace.join(&directory))?;
    report.add("memory files", removed);
    if removed > 0 {
        report.paths.push(directory);
    }
    Ok(())
}

/// A usage line of theirs names the pseudonym instead and keeps only what it cost; any
/// other line naming one of their identities names the pseudonym instead. Returns
/// whether the line changed.
fn pseudonymise_line(line: &mut Value, person: &Person, pseudonym: &str) -> bool {
    let mut changed = false;
    if line["user"].as_str() == Some(person.slug.as_str()) {
        line["user"] = Value::String(pseudonym.to_string());
        // Tool parameters may carry what they asked for; the costs and counts stay.
        if let Some(fields) = line.as_object_mut()
            && fields.contains_key("params")
        {
            fields.insert("params".into(), serde_json::json!("<erased>"));
        }
        changed = true;
    }
    changed |= replace_strings(line, person, pseudonym);
    changed
}

fn replace_strings(value: &mut Value, person: &Person, pseudonym: &str) -> bool {
    match value {
        Value::String(text) => {
            let mut changed = false;
            if *text == person.slug {
                *text = pseudonym.to_string();
                return true;
            }
            for identity in &person.identities {
                if text.contains(identity.as_str()) {
                    *text = text.replace(identity.as_str(), pseudonym);
                    changed = true;
                }
            }
            changed
        }
        Value::Array(items) => items.iter_mut().fold(false, |changed, item| {
            replace_strings(item, person, pseudonym) | changed
        }),
        Value::Object(fields) => fields.values_mut().fold(false, |changed, item| {
            replace_strings(item, person, pseudonym) | changed
        }),
        _ => false,
    }
}

/// Their approval requests go (with the arguments they asked to run); decisions they
/// took and audit lines naming them keep the pseudonym.
fn erase_approvals(
    workspace: &Path,
    person: &Person,
    pseudonym: &str,
    report: &mut ErasureReport,
) -> Result<(), ErasureError> {
    let mut requests = 0;
    scrub(&workspace.join(APPROVALS), |transaction| {
        if has_table(transaction, "approvals") {
            requests = transaction.execute(
                "DELETE FROM approvals WHERE requester = ?1",
                [person.slug.as_str()],
            )?;
            transaction.execute(
                "UPDATE approvals SET decided_by = ?1 WHERE decided_by = ?2",
                [pseudonym, person.slug.as_str()],
            )?;
        }
        Ok(())
    })?;
    report.add("approval requests", requests);
    let rewritten = filter_log(workspace, APPROVALS_LOG, |line| {
        Some(replace_strings(line, person, pseudonym))
    })?;
    report.add("approval lines pseudonymised", rewritten);
    Ok(())
}

/// Rewrites the JSON-lines log `relative` in place: `decide` returns `None` to drop a
/// line, else whether it changed it. Returns how many lines were changed or dropped.
fn filter_log(
    workspace: &Path,
    relative: &str,
    mut decide: impl FnMut(&mut Value) -> Option<bool>,
) -> Result<usize, ErasureError> {
    let path = workspace.join(relative);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(error) => return Err(io("read", &path)(error)),
    };
    let mut output = String::with_capacity(text.len());
    let mut touched = 0;
    for line in text.lines() {
        let Ok(mut value) = serde_json::from_str::<Value>(line) else {
            output.push_str(line);
            output.push('\n');
            continue;
        };
        match decide(&mut value) {
            None => touched += 1,
            Some(changed) => {
                if changed {
                    touched += 1;
                    output.push_str(&value.to_string());
                } else {
                    output.push_str(line);
                }
                output.push('\n');
            }
        }
    }
    if touched > 0 {
        // In place, not write-and-rename: the agent's append handle keeps writing here.
        std::fs::write(&path, output).map_err(io("rewrite", &path))?;
    }
    Ok(touched)
}

/// The stable pseudonym of `slug` in this workspace: keyed with a secret kept in the
/// workspace, so the same person always gets the same one and nobody can tell whose it
/// is by hashing candidate names.
pub fn pseudonym(workspace: &Path, slug: &str) -> Result<String, ErasureError> {
    let key_path = workspace.join(PSEUDONYM_KEY);
    let key = match std::fs::read(&key_path) {
        Ok(key) if key.len() >= 16 => key,
        _ => {
            let mut key = vec![0u8; 32];
            std::fs::File::open("/dev/urandom")
                .and_then(|mut random| random.read_exact(&mut key))
                .map_err(io("read randomness for", &key_path))?;
            std::fs::create_dir_all(key_path.parent().expect("has a parent"))
                .map_err(io("create", &key_path))?;
            std::fs::write(&key_path, &key).map_err(io("write", &key_path))?;
            key
        }
    };
    let mut hasher = Sha256::new();
    hasher.update(&key);
    hasher.update(slug.as_bytes());
    Ok(format!("erased-{}", &hex::encode(hasher.finalize())[..16]))
}

fn person_identities_json(person: &Person) -> String {
    serde_json::to_string(&person.identities).expect("strings serialise")
}

/// Opens a store's database (no schema is created).
fn open(path: &Path) -> Result<Connection, ErasureError> {
    let connection = Connection::open(path).map_err(sql("open", path))?;
    connection
        .busy_timeout(std::time::Duration::from_secs(10))
        .map_err(sql("open", path))?;
    Ok(connection)
}

fn has_table(connection: &Connection, name: &str) -> bool {
    connection
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [name],
            |_| Ok(()),
        )
        .is_ok()
}

/// Runs `body` in one transaction on the database at `path` (nothing when it does not
/// exist) with freed content zeroed, then rewrites the file and empties its
/// write-ahead log, so what was deleted is gone from the bytes on disk.
fn scrub(
    path: &Path,
    body: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<()>,
) -> Result<(), ErasureError> {
    if !path.exists() {
        return Ok(());
    }
    let mut connection = open(path)?;
    connection
        .execute_batch("PRAGMA secure_delete = ON;")
        .map_err(sql("configure", path))?;
    let transaction = connection.transaction().map_err(sql("begin on", path))?;
    body(&transaction).map_err(sql("delete from", path))?;
    transaction.commit().map_err(sql("commit to", path))?;
    connection
        .execute_batch("VACUUM;")
        .map_err(sql("vacuum", path))?;
    connection
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .map_err(sql("checkpoint", path))?;
    Ok(())
}

/// Regular files under `directory` (none when it does not exist), sorted.
fn list_files(directory: &Path) -> Result<Vec<PathBuf>, ErasureError> {
    let mut files = Vec::new();
    let mut pending = vec![directory.to_path_buf()];
    while let Some(current) = pending.pop() {
        let entries = match std::fs::read_dir(&current) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(io("list", &current)(error)),
        };
        for entry in entries {
            let entry = entry.map_err(io("list", &current))?;
            let kind = entry.file_type().map_err(io("list", &current))?;
            if kind.is_dir() {
                pending.push(entry.path());
            } else {
                files.push(entry.path());
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Removes `path` and everything under it; returns how many files went.
fn remove_tree(path: &Path) -> Result<usize, ErasureError> {
    let files = list_files(path)?.len();
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(files),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(error) => Err(io("remove", path)(error)),
    }
}

#[cfg(test)]
mod tests;

/// The lock a running agent holds on its workspace (`sessions/agent.lock`), which
/// `saint-agent erase` and `export` take too: they refuse while an agent runs there
/// (its turns would write back what is being erased; in a pod, mark the Contact
/// `erase: true` instead and the running agent erases on reload).
pub fn lock_workspace(
    workspace: &Path,
) -> Result<saint_sandbox::state_lock::StateLock, WorkspaceBusy> {
    let directory = workspace.join("sessions");
    saint_sandbox::state_lock::lock_state_directory(&directory).map_err(|error| match error {
        saint_sandbox::state_lock::StateLockError::InUse { holder, .. } => WorkspaceBusy {
            workspace: workspace.to_path_buf(),
            reason: format!("another saint-agent ({holder}) runs on it"),
        },
        other @ saint_sandbox::state_lock::StateLockError::Io { .. } => WorkspaceBusy {
            workspace: workspace.to_path_buf(),
            reason: saint_config::ErrorChain(&other).to_string(),
        },
    })
}

/// The workspace is in use by a running agent (or cannot be locked).
#[derive(Debug, thiserror::Error)]
#[error("the workspace {} is busy: {reason} (stop it first; in a cluster, set `erase: true` on the Contact instead)", workspace.display())]
pub struct WorkspaceBusy {
    workspace: PathBuf,
    reason: String,
}

/// How often the running agent looks for Contacts marked `erase: true`.
const KEEPER_POLL: std::time::Duration = std::time::Duration::from_secs(5);

/// How often, by the scheduler's clock, retention is swept.
const SWEEP_EVERY: jiff::SignedDuration = jiff::SignedDuration::from_hours(1);

/// The running agent's side: erases each Contact the config marks `erase: true` (once:
/// the erasure log remembers it) and sweeps retention at start and every hour by
/// `clock`, until `stop`.
pub async fn keep(
    config: std::sync::Arc<crate::config_watch::ConfigStore>,
    workspace: PathBuf,
    clock: std::sync::Arc<crate::clock::Clock>,
    stop: tokio_util::sync::CancellationToken,
) {
    let wake = tokio::sync::Notify::new();
    let mut next_sweep = clock.now();
    loop {
        let current = config.last_good();
        let marked: Vec<String> = current
            .contacts
            .iter()
            .filter(|contact| contact.erase)
            .map(|contact| contact.slug.to_string())
            .collect();
        for slug in marked {
            let (workspace, current) = (workspace.clone(), current.clone());
            let done = tokio::task::spawn_blocking(
                move || -> Result<Option<ErasureReport>, ErasureError> {
                    if already_erased(&workspace, &slug)? {
                        return Ok(None);
                    }
                    let person = Person::find(&workspace, Some(&current), &slug)?;
                    erase(&workspace, &person).map(Some)
                },
            )
            .await;
            match done {
                Ok(Ok(Some(report))) => tracing::info!(
                    pseudonym = %report.pseudonym,
                    removed = report.total(),
                    "erased a contact marked erase: true"
                ),
                Ok(Ok(None)) => {}
                Ok(Err(error)) => {
                    tracing::error!(error = %saint_config::ErrorChain(&error), "failed to erase a contact marked erase: true")
                }
                Err(_) => tracing::error!("an erasure panicked"),
            }
        }
        let now = clock.now();
        if now >= next_sweep && retention::any_retention(&current) {
            let (workspace, current) = (workspace.clone(), current.clone());
            match tokio::task::spawn_blocking(move || retention::sweep(&workspace, &current, now))
                .await
            {
                Ok(Ok(report)) if report.total() > 0 => {
                    tracing::info!(deleted = ?report.counts, "retention swept")
                }
                Ok(Ok(_)) => {}
                Ok(Err(error)) => {
                    tracing::error!(error = %saint_config::ErrorChain(&error), "failed to sweep retention")
                }
                Err(_) => tracing::error!("the retention sweep panicked"),
            }
        }
        if now >= next_sweep {
            next_sweep = now + SWEEP_EVERY;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = clock.wait_until(Some(next_sweep), &wake) => {}
            _ = tokio::time::sleep(KEEPER_POLL) => {}
        }
    }
}
