//! One person's data as one zip archive (`saint-agent export`): their transcripts and
//! group messages, scheduled jobs, channel inbox and outbox rows, the approvals they
//! asked for or decided and their audit lines, as JSON lines; their memory notes and
//! the files that came with their messages as they are, and their usage lines. Reads only; the archive is written stored (uncompressed).

use std::{
    io::Write,
    path::{Path, PathBuf},
};

use rusqlite::Connection;
use serde_json::{Value, json};
use zip::{CompressionMethod, ZipWriter, write::SimpleFileOptions};

use super::{
    APPROVALS, APPROVALS_LOG, ErasureError, JOBS, Person, TRANSCRIPTS, USAGE_LOG, has_table, io,
    job_session_keys, list_files, open, person_identities_json, session_keys, sql,
};

/// What went into an archive.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportReport {
    /// Entries written, by archive path.
    pub entries: Vec<String>,
    /// Transcript messages (their sessions and their group messages).
    pub messages: usize,
}

/// Writes `person`'s data under `workspace` to the zip archive `output`.
pub fn export(
    workspace: &Path,
    person: &Person,
    output: &Path,
) -> Result<ExportReport, ErasureError> {
    let file = std::fs::File::create(output).map_err(io("create", output))?;
    let mut archive = Archive {
        writer: ZipWriter::new(file),
        options: SimpleFileOptions::default().compression_method(CompressionMethod::Stored),
        output,
        entries: Vec::new(),
    };
    archive.add(
        "person.json".into(),
        json!({"slug": person.slug, "identities": person.identities})
            .to_string()
            .as_bytes(),
    )?;
    let job_sessions = add_jobs(&mut archive, workspace, person)?;
    let transcripts = add_transcripts(&mut archive, workspace, person, &job_sessions)?;
    for (name, path) in person_files(workspace, person, transcripts.attachment_folders)? {
        let bytes = std::fs::read(&path).map_err(io("read", &path))?;
        archive.add(name, &bytes)?;
    }
    add_approvals(&mut archive, workspace, person)?;
    let usage_path = workspace.join(USAGE_LOG);
    if let Ok(text) = std::fs::read_to_string(&usage_path) {
        let mine = matching_lines(&text, |value| {
            value["user"].as_str() == Some(person.slug.as_str())
        });
        archive.add("usage.jsonl".into(), mine.as_bytes())?;
    }
    let entries = archive.finish()?;
    Ok(ExportReport {
        entries,
        messages: transcripts.messages,
    })
}

/// The archive being written, with the names of its entries so far.
struct Archive<'a> {
    writer: ZipWriter<std::fs::File>,
    options: SimpleFileOptions,
    /// Where the archive is written, for errors.
    output: &'a Path,
    entries: Vec<String>,
}

impl Archive<'_> {
    fn add(&mut self, name: String, bytes: &[u8]) -> Result<(), ErasureError> {
        self.writer
            .start_file(name.as_str(), self.options)
            .map_err(|source| ErasureError::Archive {
                path: self.output.to_path_buf(),
                source,
            })?;
        self.writer
            .write_all(bytes)
            .map_err(io("write", self.output))?;
        self.entries.push(name);
        Ok(())
    }

    /// Writes the archive's directory; returns the entries written.
    fn finish(self) -> Result<Vec<String>, ErasureError> {
        self.writer
            .finish()
            .map_err(|source| ErasureError::Archive {
                path: self.output.to_path_buf(),
                source,
            })?;
        Ok(self.entries)
    }
}

/// Adds the person's scheduled jobs; returns the session keys of their jobs, whose
/// transcripts are theirs too.
fn add_jobs(
    archive: &mut Archive<'_>,
    workspace: &Path,
    person: &Person,
) -> Result<Vec<String>, ErasureError> {
    let jobs_path = workspace.join(JOBS);
    if !jobs_path.exists() {
        return Ok(Vec::new());
    }
    let connection = open(&jobs_path)?;
    let job_sessions = job_session_keys(&connection, person).map_err(sql("read", &jobs_path))?;
    if has_table(&connection, "jobs") {
        let rows = rows_as_json(
            &connection,
            &format!("SELECT * FROM jobs WHERE {}", super::JOB_CONDITION),
            &[&person.slug, &person_identities_json(person)],
        )
        .map_err(sql("read", &jobs_path))?;
        archive.add("jobs.jsonl".into(), lines(&rows).as_bytes())?;
    }
    Ok(job_sessions)
}

/// What the transcripts store gave besides its entries.
#[derive(Default)]
struct Transcripts {
    /// Transcript messages written.
    messages: usize,
    /// `(channel, platform id)` of each inbox row of the person: where the files that
    /// came with their messages are kept.
    attachment_folders: Vec<(String, String)>,
}

/// Adds the person's transcript messages (their sessions, their jobs' sessions and
/// what they wrote in groups) and their inbox and outbox rows.
fn add_transcripts(
    archive: &mut Archive<'_>,
    workspace: &Path,
    person: &Person,
    job_sessions: &[String],
) -> Result<Transcripts, ErasureError> {
    let transcripts_path = workspace.join(TRANSCRIPTS);
    let mut transcripts = Transcripts::default();
    if !transcripts_path.exists() {
        return Ok(transcripts);
    }
    let connection = open(&transcripts_path)?;
    let ids = person_identities_json(person);
    if has_table(&connection, "messages") {
        let keys = session_keys(&connection, person, job_sessions)
            .map_err(sql("read", &transcripts_path))?;
        let keys = serde_json::to_string(&keys).expect("strings serialise");
        let rows = rows_as_json(
            &connection,
            "SELECT session_key, role, identity, created_at, content FROM messages
             WHERE session_key IN (SELECT value FROM json_each(?1))
                OR (session_key LIKE 'group:%'
                    AND identity IN (SELECT value FROM json_each(?2)))
             ORDER BY id",
            &[&keys, &ids],
        )
        .map_err(sql("read", &transcripts_path))?;
        transcripts.messages = rows.len();
        archive.add("transcripts.jsonl".into(), lines(&rows).as_bytes())?;
    }
    if has_table(&connection, "inbox") {
        let inbox = rows_as_json(
            &connection,
            "SELECT id, channel, platform_id, sender, body, state, received_at FROM inbox
             WHERE sender IN (SELECT value FROM json_each(?1)) ORDER BY id",
            &[&ids],
        )
        .map_err(sql("read", &transcripts_path))?;
        for row in &inbox {
            if let (Some(channel), Some(platform_id)) =
                (row["channel"].as_str(), row["platform_id"].as_str())
            {
                transcripts
                    .attachment_folders
                    .push((channel.to_string(), platform_id.to_string()));
            }
        }
        let outbox = rows_as_json(
            &connection,
            "SELECT id, channel, recipient, body, origin, state, created_at FROM outbox
             WHERE recipient IN (SELECT value FROM json_each(?1)) ORDER BY id",
            &[&ids],
        )
        .map_err(sql("read", &transcripts_path))?;
        archive.add("inbox.jsonl".into(), lines(&inbox).as_bytes())?;
        archive.add("outbox.jsonl".into(), lines(&outbox).as_bytes())?;
    }
    Ok(transcripts)
}

/// The person's memory notes and the files that came with their messages, each with
/// its name in the archive.
fn person_files(
    workspace: &Path,
    person: &Person,
    attachment_folders: Vec<(String, String)>,
) -> Result<Vec<(String, PathBuf)>, ErasureError> {
    let memory = workspace.join(person.memory_directory());
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for file in list_files(&memory)? {
        if let Ok(relative) = file.strip_prefix(workspace) {
            files.push((relative.to_string_lossy().into_owned(), file.clone()));
        }
    }
    for (channel, platform_id) in attachment_folders {
        let relative = format!(
            "inbox/{}/{}",
            saint_channels::attachments::safe_name(&channel),
            saint_channels::attachments::safe_name(&platform_id)
        );
        for file in list_files(&workspace.join(&relative))? {
            if let Ok(inner) = file.strip_prefix(workspace) {
                files.push((
                    format!("attachments/{}", inner.to_string_lossy()),
                    file.clone(),
                ));
            }
        }
    }
    Ok(files)
}

/// Approvals: the requests they made (with the arguments they asked to run), the
/// ones they decided, and the audit lines of either.
fn add_approvals(
    archive: &mut Archive<'_>,
    workspace: &Path,
    person: &Person,
) -> Result<(), ErasureError> {
    let approvals_path = workspace.join(APPROVALS);
    if approvals_path.exists() {
        let connection = open(&approvals_path)?;
        if has_table(&connection, "approvals") {
            let rows = rows_as_json(
                &connection,
                "SELECT code, requester, requester_role, tool, input, state, decided_by,
                        created_ms, decided_ms FROM approvals
                 WHERE requester = ?1 OR decided_by = ?1 ORDER BY created_ms",
                &[&person.slug],
            )
            .map_err(sql("read", &approvals_path))?;
            archive.add("approvals.jsonl".into(), lines(&rows).as_bytes())?;
        }
    }
    let approvals_log = workspace.join(APPROVALS_LOG);
    if let Ok(text) = std::fs::read_to_string(&approvals_log) {
        let slug = Some(person.slug.as_str());
        let mine = matching_lines(&text, |value| {
            value["requester"].as_str() == slug || value["by"].as_str() == slug
        });
        archive.add("approvals-log.jsonl".into(), mine.as_bytes())?;
    }
    Ok(())
}

/// The JSON lines of `text` that `keep` accepts, each ending in a newline.
fn matching_lines(text: &str, keep: impl Fn(&Value) -> bool) -> String {
    text.lines()
        .filter(|line| serde_json::from_str::<Value>(line).is_ok_and(|value| keep(&value)))
        .flat_map(|line| [line, "\n"])
        .collect()
}

fn lines(rows: &[Value]) -> String {
    rows.iter()
        .flat_map(|row| [row.to_string(), "\n".to_string()])
        .collect()
}

/// Each row of `query` as a JSON object keyed by column name.
fn rows_as_json(
    connection: &Connection,
    query: &str,
    parameters: &[&dyn rusqlite::ToSql],
) -> rusqlite::Result<Vec<Value>> {
    let mut statement = connection.prepare(query)?;
    let names: Vec<String> = statement.column_names().map(str::to_string).collect();
    let rows = statement.query_map(parameters, |row| {
        let mut object = serde_json::Map::new();
        for (index, name) in names.iter().enumerate() {
            let value = match row.get_ref(index)? {
                rusqlite::types::ValueRef::Null => Value::Null,
                rusqlite::types::ValueRef::Integer(number) => json!(number),
                rusqlite::types::ValueRef::Real(number) => json!(number),
                rusqlite::types::ValueRef::Text(text) => {
                    let text = String::from_utf8_lossy(text).into_owned();
                    // Stored JSON (message content, inbox bodies) is exported as JSON.
                    match serde_json::from_str::<Value>(&text) {
                        Ok(parsed @ (Value::Object(_) | Value::Array(_))) => parsed,
                        _ => Value::String(text),
                    }
                }
                rusqlite::types::ValueRef::Blob(bytes) => json!(hex::encode(bytes)),
            };
            object.insert(name.clone(), value);
        }
        Ok(Value::Object(object))
    })?;
    rows.collect()
}
