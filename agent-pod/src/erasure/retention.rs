//! Retention: each role's `retention` says how many days each kind of a person's data
//! is kept; [`sweep`] deletes, for every Contact holding such a role, exactly what is
//! older than that at `now` (the time of the scheduler's clock, so tests move it).
//! Ages: a transcript message by when it was stored, an inbox row by when it arrived,
//! an outbox row by when it was queued, an attachment by its message's arrival, a
//! memory note by its last change, a usage line by its `ts`.

use std::{
    collections::BTreeMap,
    path::Path,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use jiff::{SignedDuration, Timestamp};
use rusqlite::params;
use saint_channels::attachments::safe_name;
use saint_config::{BotConfig, Retention};

use super::{
    ErasureError, Person, TRANSCRIPTS, USAGE_LOG, filter_log, io, job_session_keys, list_files,
    open, person_identities_json, remove_tree, scrub, session_keys, sql,
};

/// What a sweep deleted, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Counts by kind (`transcript messages`, `memory files`, …).
    pub counts: BTreeMap<&'static str, usize>,
}

impl SweepReport {
    fn add(&mut self, kind: &'static str, count: usize) {
        if count > 0 {
            *self.counts.entry(kind).or_default() += count;
        }
    }

    /// Everything deleted.
    pub fn total(&self) -> usize {
        self.counts.values().sum()
    }
}

/// Deletes what each Contact's role keeps no longer, as of `now`.
pub fn sweep(
    workspace: &Path,
    config: &BotConfig,
    now: Timestamp,
) -> Result<SweepReport, ErasureError> {
    let mut report = SweepReport::default();
    for contact in &config.contacts {
        let Some(retention) = config
            .roles
            .get(&contact.role)
            .and_then(|role| role.retention.as_ref())
        else {
            continue;
        };
        let person = Person {
            slug: contact.slug.to_string(),
            identities: contact
                .identities
                .iter()
                .map(|identity| identity.to_string())
                .collect(),
        };
        sweep_person(workspace, &person, retention, now, &mut report)?;
    }
    Ok(report)
}

fn cutoff(now: Timestamp, days: Option<u32>) -> Option<Timestamp> {
    days.map(|days| now - SignedDuration::from_hours(i64::from(days) * 24))
}

fn sweep_person(
    workspace: &Path,
    person: &Person,
    retention: &Retention,
    now: Timestamp,
    report: &mut SweepReport,
) -> Result<(), ErasureError> {
    // Attachments before transcripts: an expired inbox row takes its files with it.
    let transcripts = cutoff(now, retention.transcripts_days);
    let attachments = match (cutoff(now, retention.attachments_days), transcripts) {
        (Some(a), Some(t)) => Some(a.max(t)),
        (one, other) => one.or(other),
    };
    if let Some(before) = attachments {
        sweep_attachments(workspace, person, before, report)?;
    }
    if let Some(before) = transcripts {
        sweep_transcripts(workspace, person, before, report)?;
    }
    if let Some(before) = cutoff(now, retention.memory_days) {
        sweep_memory(workspace, person, before, report)?;
    }
    if let Some(before) = cutoff(now, retention.usage_days) {
        let dropped = filter_log(workspace, USAGE_LOG, |line| {
            let theirs = line["user"].as_str() == Some(person.slug.as_str());
            let old = line["ts"]
                .as_str()
                .and_then(|ts| ts.parse::<Timestamp>().ok())
                .is_some_and(|ts| ts < before);
            if theirs && old { None } else { Some(false) }
        })?;
        report.add("usage lines", dropped);
    }
    Ok(())
}

fn sweep_attachments(
    workspace: &Path,
    person: &Person,
    before: Timestamp,
    report: &mut SweepReport,
) -> Result<(), ErasureError> {
    let path = workspace.join(TRANSCRIPTS);
    if !path.exists() {
        return Ok(());
    }
    let connection = open(&path)?;
    if !super::has_table(&connection, "inbox") {
        return Ok(());
    }
    let mut statement = connection
        .prepare(
            "SELECT channel, platform_id FROM inbox
             WHERE sender IN (SELECT value FROM json_each(?1)) AND received_at < ?2",
        )
        .map_err(sql("read", &path))?;
    let folders: Vec<(String, String)> = statement
        .query_map(
            params![person_identities_json(person), before.as_millisecond()],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .map_err(sql("read", &path))?
        .collect::<Result<_, _>>()
        .map_err(sql("read", &path))?;
    for (channel, platform_id) in folders {
        let folder = workspace
            .join("inbox")
            .join(safe_name(&channel))
            .join(safe_name(&platform_id));
        report.add("attachment files", remove_tree(&folder)?);
    }
    Ok(())
}

fn sweep_transcripts(
    workspace: &Path,
    person: &Person,
    before: Timestamp,
    report: &mut SweepReport,
) -> Result<(), ErasureError> {
    let jobs_path = workspace.join(super::JOBS);
    let job_sessions = if jobs_path.exists() {
        job_session_keys(&open(&jobs_path)?, person).map_err(sql("read", &jobs_path))?
    } else {
        Vec::new()
    };
    let path = workspace.join(TRANSCRIPTS);
    // Only a database something expired in is rewritten.
    if !path.exists() || !has_expired(&path, person, &job_sessions, before)? {
        return Ok(());
    }
    let ids = person_identities_json(person);
    let before_text = before.to_string();
    let before_ms = before.as_millisecond();
    scrub(&path, |transaction| {
        let keys = serde_json::to_string(&session_keys(transaction, person, &job_sessions)?)
            .expect("strings serialise");
        let messages = transaction.execute(
            "DELETE FROM messages WHERE julianday(created_at) < julianday(?3) AND (
                 session_key IN (SELECT value FROM json_each(?1))
                 OR (session_key LIKE 'group:%' AND identity IN (SELECT value FROM json_each(?2))))",
            params![keys, ids, before_text],
        )?;
        report.add("transcript messages", messages);
        // A session of theirs with nothing left goes too.
        let sessions = transaction.execute(
            "DELETE FROM sessions WHERE key IN (SELECT value FROM json_each(?1))
             AND NOT EXISTS (SELECT 1 FROM messages WHERE session_key = sessions.key)",
            [&keys],
        )?;
        report.add("sessions", sessions);
        // Queue rows that are done with (a waiting one is still to be answered or sent).
        let outbox = transaction.execute(
            "DELETE FROM outbox WHERE recipient IN (SELECT value FROM json_each(?1))
             AND created_at < ?2 AND state IN ('sent', 'failed')",
            params![ids, before_ms],
        )?;
        let inbox = transaction.execute(
            "DELETE FROM inbox WHERE sender IN (SELECT value FROM json_each(?1))
             AND received_at < ?2 AND state IN ('answered', 'failed')",
            params![ids, before_ms],
        )?;
        report.add("outbox rows", outbox);
        report.add("inbox rows", inbox);
        Ok(())
    })
}

fn has_expired(
    path: &Path,
    person: &Person,
    job_sessions: &[String],
    before: Timestamp,
) -> Result<bool, ErasureError> {
    let connection = open(path)?;
    if !super::has_table(&connection, "messages") {
        return Ok(false);
    }
    let keys = session_keys(&connection, person, job_sessions).map_err(sql("read", path))?;
    let keys = serde_json::to_string(&keys).expect("strings serialise");
    connection
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM messages WHERE julianday(created_at) < julianday(?3) AND (
                 session_key IN (SELECT value FROM json_each(?1))
                 OR (session_key LIKE 'group:%' AND identity IN (SELECT value FROM json_each(?2)))))
             OR EXISTS (SELECT 1 FROM inbox WHERE sender IN (SELECT value FROM json_each(?2))
                 AND received_at < ?4 AND state IN ('answered', 'failed'))
             OR EXISTS (SELECT 1 FROM outbox WHERE recipient IN (SELECT value FROM json_each(?2))
                 AND created_at < ?4 AND state IN ('sent', 'failed'))",
            params![
                keys,
                person_identities_json(person),
                before.to_string(),
                before.as_millisecond()
            ],
            |row| row.get(0),
        )
        .map_err(sql("read", path))
}

fn sweep_memory(
    workspace: &Path,
    person: &Person,
    before: Timestamp,
    report: &mut SweepReport,
) -> Result<(), ErasureError> {
    let before = system_time(before);
    let mut expired = Vec::new();
    for file in list_files(&workspace.join(person.memory_directory()))? {
        let modified = std::fs::metadata(&file)
            .and_then(|metadata| metadata.modified())
            .map_err(io("read", &file))?;
        if modified < before
            && let Ok(relative) = file.strip_prefix(workspace)
        {
            expired.push((relative.to_string_lossy().into_owned(), file.clone()));
        }
    }
    if expired.is_empty() {
        return Ok(());
    }
    for (_, file) in &expired {
        std::fs::remove_file(file).map_err(io("remove", file))?;
    }
    let relative: Vec<String> = expired.into_iter().map(|(relative, _)| relative).collect();
    report.add("memory files", relative.len());
    let database = workspace.join(saint_memory::DEFAULT_DATABASE_PATH);
    report.add(
        "memory index chunks",
        saint_memory::erase::forget_files(&database, &relative)?,
    );
    Ok(())
}

/// `at` as the file system's time.
pub fn system_time(at: Timestamp) -> SystemTime {
    let millis = at.as_millisecond();
    if millis >= 0 {
        UNIX_EPOCH + Duration::from_millis(millis as u64)
    } else {
        UNIX_EPOCH - Duration::from_millis(millis.unsigned_abs())
    }
}

/// Whether any role keeps data for a limited time (no sweeper is needed otherwise).
pub fn any_retention(config: &BotConfig) -> bool {
    config.roles.values().any(|role| role.retention.is_some())
}
