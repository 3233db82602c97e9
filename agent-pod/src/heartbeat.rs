//! The heartbeat: every `heartbeat.everySeconds`, within the bot's active hours, a turn
//! that reads `HEARTBEAT.md` and does what it asks.
//!
//! The rules:
//! - A `HEARTBEAT.md` with nothing to do (missing, empty, or only headings, comments
//!   and empty list items) costs no model call: the beat is recorded and skipped.
//! - The turn runs as the bot itself with the configured heartbeat role, metered to the
//!   bot ([`identity::BOT_SLUG`]), and its `message` tool reaches only the contacts in
//!   `heartbeat.notify`. Its answer goes to those contacts, unless it is exactly
//!   [`NOTHING_TO_REPORT`].
//! - Outside the active hours no beat runs; the next one is the first due time inside
//!   them. Beats missed while the bot was down are made up by one beat, never a burst.
//! - With `heartbeat.watch`, a beat whose instructions (`HEARTBEAT.md` and the
//!   heartbeat settings) and watched inputs (workspace files, URLs' `ETag`) are what
//!   they were at the last beat that ran makes no model call: an idle bot costs
//!   nothing.
//! - The time of the last beat, and the fingerprint of the last one that ran, survive
//!   restarts (`sessions/heartbeat.json`).

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use jiff::{Timestamp, ToSpan, Zoned, civil, tz::TimeZone};
use saint_config::{
    ActiveHours, BotConfig, ErrorChain, HeartbeatConfig, HeartbeatWatch, clock_minutes,
};
use saint_tools::guard::paths::{Workspace, WorkspacePath};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::{
    clock::Clock,
    identity, persona,
    prompt::MAX_PROMPT_FILE_BYTES,
    runtime::{Assignment, AssignmentEnd, Runtime},
};

/// The heartbeat file.
pub const HEARTBEAT_FILE: &str = "HEARTBEAT.md";

/// The answer that means "nothing needs anyone's attention": it is not sent.
pub const NOTHING_TO_REPORT: &str = "HEARTBEAT_OK";

/// Where the last beat's time is kept, relative to the workspace.
const STATE_FILE: &str = "sessions/heartbeat.json";

/// Whether `text` (a `HEARTBEAT.md`) asks for anything: some line that is not blank,
/// a Markdown heading, an HTML comment or an empty list item.
pub fn has_tasks(text: &str) -> bool {
    let mut rest = text;
    let mut uncommented = String::with_capacity(text.len());
    while let Some(start) = rest.find("<!--") {
        uncommented.push_str(&rest[..start]);
        match rest[start..].find("-->") {
            Some(end) => rest = &rest[start + end + 3..],
            // An unclosed comment runs to the end of the file.
            None => rest = "",
        }
    }
    uncommented.push_str(rest);
    uncommented.lines().any(|line| {
        let line = line.trim();
        let item = line
            .trim_start_matches(['-', '*', '+'])
            .trim_start()
            .trim_start_matches("[ ]")
            .trim_start_matches("[x]")
            .trim();
        !(line.is_empty() || line.starts_with('#') || item.is_empty())
    })
}

/// A daily window in a time zone, as minutes after midnight.
#[derive(Clone, Debug)]
pub struct ActiveWindow {
    start: u32,
    end: u32,
    zone: TimeZone,
}

impl ActiveWindow {
    /// The window `hours` names (`fallback_zone` when it names none); `None` when the
    /// config is malformed, which validation refuses before it gets here.
    pub fn new(hours: &ActiveHours, fallback_zone: &str) -> Option<Self> {
        let zone_name = hours.timezone.as_deref().unwrap_or(fallback_zone);
        Some(Self {
            start: clock_minutes(&hours.start)?,
            end: clock_minutes(&hours.end)?,
            zone: TimeZone::get(zone_name).ok()?,
        })
    }

    /// Whether `at` falls inside the window (start inclusive, end exclusive; a window
    /// whose end is before its start runs over midnight).
    pub fn contains(&self, at: Timestamp) -> bool {
        let local = at.to_zoned(self.zone.clone());
        let minute = u32::from(local.hour() as u8) * 60 + u32::from(local.minute() as u8);
        if self.start < self.end {
            (self.start..self.end).contains(&minute)
        } else {
            minute >= self.start || minute < self.end
        }
    }

    /// The first moment at or after `at` inside the window.
    pub fn next_open(&self, at: Timestamp) -> Timestamp {
        if self.contains(at) {
            return at;
        }
        let local = at.to_zoned(self.zone.clone());
        let (hour, minute) = ((self.start / 60) as i8, (self.start % 60) as i8);
        let today = local.date().at(hour, minute, 0, 0);
        [today, today.saturating_add(1.day())]
            .into_iter()
            .filter_map(|start| self.opening(start))
            .find(|opening| *opening > at)
            .unwrap_or(at)
    }

    fn opening(&self, start: civil::DateTime) -> Option<Timestamp> {
        // In a DST gap the window opens at the first valid instant after it.
        Some(start.to_zoned(self.zone.clone()).ok()?.timestamp())
    }
}

/// When the beat after one at `last` is due: `every` later, moved to the start of the
/// next active window when that falls outside it.
pub fn next_beat(last: Timestamp, every: Duration, window: Option<&ActiveWindow>) -> Timestamp {
    let due = last
        .checked_add(jiff::SignedDuration::try_from(every).unwrap_or(jiff::SignedDuration::MAX))
        .unwrap_or(Timestamp::MAX);
    match window {
        Some(window) => window.next_open(due),
        None => due,
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BeatState {
    last: Option<Timestamp>,
    /// What the last beat that ran saw (with `heartbeat.watch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fingerprint: Option<String>,
}

fn read_state(path: &Path) -> Option<BeatState> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str::<BeatState>(&text).ok()
}

// Written to a temporary file and renamed over the old one, so a crash leaves the old
// time or the new one, never half a file.
fn write_state(path: &Path, last: Timestamp, fingerprint: Option<&str>) -> std::io::Result<()> {
    let text = serde_json::to_string(&BeatState {
        last: Some(last),
        fingerprint: fingerprint.map(str::to_owned),
    })?;
    let temporary = path.with_extension("json.tmp");
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, path)
}

/// `HEARTBEAT.md` as the persona rule finds it (the persona directory, else the
/// workspace); `None` when neither holds it.
fn read_heartbeat_file(config: &BotConfig, workspace_root: &Path) -> Option<String> {
    let workspace = Workspace::open(workspace_root).ok();
    let read = |name: &str| -> Option<String> {
        let workspace = workspace.as_ref()?;
        let path = WorkspacePath::parse(name, workspace_root).ok()?;
        match workspace.read_text(&path, MAX_PROMPT_FILE_BYTES) {
            Ok(text) => Some(text),
            Err(error) => {
                if error.is_refusal() {
                    tracing::warn!(file = name, %error, "heartbeat file refused");
                }
                None
            }
        }
    };
    persona::read_persona_files(
        config.persona.as_ref(),
        &[HEARTBEAT_FILE],
        MAX_PROMPT_FILE_BYTES,
        read,
    )
    .into_iter()
    .next()
    .map(|(_, text)| text)
}

/// Largest watched URL body hashed when it sends neither `ETag` nor `Last-Modified`.
const MAX_WATCHED_BODY: usize = 1 << 20;

/// What the beat sees now: a digest of the instructions (`HEARTBEAT.md`, the heartbeat
/// settings) and of each watched input — a file's contents (or its absence), a URL's
/// `ETag`/`Last-Modified` (or its body, or the kind of error that kept it unread, so an
/// unreachable URL is no change while it stays unreachable).
async fn fingerprint(
    workspace_root: &Path,
    heartbeat: &HeartbeatConfig,
    file: &str,
    watch: &HeartbeatWatch,
) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    let mut part = |bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_be_bytes());
        hasher.update(bytes);
    };
    part(file.as_bytes());
    part(&serde_json::to_vec(heartbeat).unwrap_or_default());
    for name in &watch.files {
        let workspace_root = workspace_root.to_owned();
        let name = name.clone();
        let contents = tokio::task::spawn_blocking(move || {
            let workspace = Workspace::open(&workspace_root).ok()?;
            let path = WorkspacePath::parse(&name, &workspace_root).ok()?;
            workspace.read(&path, MAX_WATCHED_BODY as u64).ok()
        })
        .await
        .ok()
        .flatten();
        part(name_digest(contents.as_deref()).as_bytes());
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .ok();
    for url in &watch.urls {
        let seen = match &client {
            Some(client) => url_state(client, url).await,
            None => "client".to_owned(),
        };
        part(seen.as_bytes());
    }
    hex::encode(hasher.finalize())
}

fn name_digest(contents: Option<&[u8]>) -> String {
    use sha2::{Digest, Sha256};
    match contents {
        Some(bytes) => hex::encode(Sha256::digest(bytes)),
        None => "missing".to_owned(),
    }
}

/// A URL's version as its server states it.
async fn url_state(client: &reqwest::Client, url: &str) -> String {
    let response = match client.get(url).send().await {
        Ok(response) => response,
        Err(error) => {
            let kind = if error.is_timeout() {
                "timeout"
            } else {
                "unreachable"
            };
            return format!("error:{kind}");
        }
    };
    let header = |name: reqwest::header::HeaderName| {
        response
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let status = response.status().as_u16();
    if let Some(tag) = header(reqwest::header::ETAG) {
        return format!("{status} etag:{tag}");
    }
    if let Some(modified) = header(reqwest::header::LAST_MODIFIED) {
        return format!("{status} modified:{modified}");
    }
    let mut body = Vec::new();
    let mut response = response;
    while let Ok(Some(chunk)) = response.chunk().await {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_WATCHED_BODY {
            break;
        }
    }
    format!("{status} body:{}", name_digest(Some(&body)))
}

/// What one beat did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Beat {
    /// `HEARTBEAT.md` had nothing to do: no model call.
    NothingToDo,
    /// Nothing watched changed since the last beat that ran: no model call.
    Unchanged,
    /// The turn ran.
    Ran,
    /// The bot's heartbeat budget is spent: nothing ran.
    OverBudget,
    /// The turn failed (logged).
    Failed,
}

/// Runs one beat now; `previous` is the fingerprint of the last beat that ran. Returns
/// what the beat did and, with `heartbeat.watch`, the fingerprint to keep.
pub async fn beat(
    runtime: &Runtime,
    heartbeat: &HeartbeatConfig,
    now: Timestamp,
    cancel: &CancellationToken,
    previous: Option<&str>,
) -> (Beat, Option<String>) {
    let config = runtime.config().current();
    let workspace = runtime.workspace.clone();
    let read_config = config.clone();
    let file = tokio::task::spawn_blocking(move || read_heartbeat_file(&read_config, &workspace))
        .await
        .ok()
        .flatten();
    let Some(file) = file else {
        // A refused file (too large, a link) was logged where it was read.
        tracing::info!("heartbeat: no readable {HEARTBEAT_FILE}; no model call");
        return (Beat::NothingToDo, previous.map(str::to_owned));
    };
    if !has_tasks(&file) {
        tracing::info!("heartbeat: {HEARTBEAT_FILE} has nothing to do; no model call");
        return (Beat::NothingToDo, previous.map(str::to_owned));
    }
    let seen = match &heartbeat.watch {
        Some(watch) => Some(fingerprint(&runtime.workspace, heartbeat, &file, watch).await),
        None => None,
    };
    if seen.is_some() && seen.as_deref() == previous {
        tracing::info!("heartbeat: nothing it watches changed since its last run; no model call");
        return (Beat::Unchanged, seen);
    }
    let (outcome, keep) = (
        run_beat(runtime, heartbeat, now, cancel, &config, file).await,
        seen,
    );
    // Only a beat that ran records what it saw: a failed one is tried again.
    let keep = if outcome == Beat::Ran {
        keep
    } else {
        previous.map(str::to_owned)
    };
    (outcome, keep)
}

/// The model turn of a beat with tasks.
async fn run_beat(
    runtime: &Runtime,
    heartbeat: &HeartbeatConfig,
    now: Timestamp,
    cancel: &CancellationToken,
    config: &Arc<BotConfig>,
    file: String,
) -> Beat {
    let caller = match identity::caller_for_heartbeat(config, &heartbeat.role, &heartbeat.notify) {
        Ok(caller) => caller,
        Err(error) => {
            tracing::error!(error = %ErrorChain(&error), "heartbeat: cannot run");
            return Beat::Failed;
        }
    };
    let deliver: Vec<_> = heartbeat
        .notify
        .iter()
        .filter_map(|slug| {
            let recipient = runtime.recipient_for(config, slug.as_str(), None);
            if recipient.is_none() {
                tracing::warn!(contact = %slug, "heartbeat: no channel can reach this contact; its notices stay in the heartbeat session");
            }
            recipient
        })
        .collect();
    let names: Vec<&str> = heartbeat
        .notify
        .iter()
        .filter_map(|slug| {
            config
                .contacts
                .iter()
                .find(|contact| contact.slug == *slug)
                .map(|contact| contact.name.as_str())
        })
        .collect();
    let audience = if names.is_empty() {
        "nobody: it is only kept in the log".to_string()
    } else {
        names.join(", ")
    };
    let zone = TimeZone::get(&config.schedule.timezone).unwrap_or(TimeZone::UTC);
    let local: Zoned = now.to_zoned(zone);
    let note = format!(
        "## This turn\n\nThis is your periodic heartbeat; nobody is reading along. Your final answer is sent to {audience}. \
         If nothing needs anyone's attention, answer exactly {NOTHING_TO_REPORT} and nothing else."
    );
    let text = format!(
        "Heartbeat at {}. Do what {HEARTBEAT_FILE} asks now:\n\n{}",
        local.strftime("%Y-%m-%d %H:%M %Z"),
        file.trim()
    );
    let assignment = Assignment {
        caller,
        text,
        note,
        deliver,
        quiet_answer: Some(NOTHING_TO_REPORT),
    };
    match runtime.run_assignment(assignment, cancel).await {
        Ok(AssignmentEnd::Ran(reply)) => {
            tracing::info!(outcome = reply.outcome.label(), "heartbeat ran");
            Beat::Ran
        }
        Ok(AssignmentEnd::OverBudget) => {
            tracing::warn!("heartbeat: the heartbeat role's budget is spent; skipped");
            Beat::OverBudget
        }
        Err(error) => {
            tracing::error!(error = %ErrorChain(&error), "heartbeat failed");
            Beat::Failed
        }
    }
}

/// Runs the bot's heartbeat until `stop` (draining); a beat in progress finishes, or is
/// cancelled by `abort`. The config is re-read before every beat, so a heartbeat added,
/// changed or removed applies without a restart.
pub async fn run(
    runtime: Arc<Runtime>,
    clock: Arc<Clock>,
    stop: CancellationToken,
    abort: CancellationToken,
) {
    let state_path: PathBuf = runtime.workspace.join(STATE_FILE);
    // Without a record, the first beat is one interval after this start.
    let state = read_state(&state_path).unwrap_or_default();
    let mut last = state.last.unwrap_or_else(|| clock.started());
    let mut seen = state.fingerprint;
    // Nothing wakes the heartbeat early; the clock's own waits bound each sleep.
    let never = Notify::new();
    while !stop.is_cancelled() {
        let config = runtime.config().current();
        let Some(heartbeat) = config.heartbeat.clone() else {
            tokio::select! {
                _ = clock.wait_until(None, &never) => {}
                _ = stop.cancelled() => {}
            }
            continue;
        };
        let window = heartbeat
            .active_hours
            .as_ref()
            .and_then(|hours| ActiveWindow::new(hours, &config.schedule.timezone));
        let due = next_beat(
            last,
            Duration::from_secs(heartbeat.every_seconds),
            window.as_ref(),
        );
        let now = clock.now();
        if now < due {
            tokio::select! {
                _ = clock.wait_until(Some(due), &never) => {}
                _ = stop.cancelled() => {}
            }
            continue;
        }
        // Due, and (if the window was passed while waiting) still inside the hours.
        if window.as_ref().is_some_and(|window| !window.contains(now)) {
            last = now;
            continue;
        }
        let (_, fingerprint) = beat(&runtime, &heartbeat, now, &abort, seen.as_deref()).await;
        seen = fingerprint;
        last = now;
        let path = state_path.clone();
        let keep = seen.clone();
        match tokio::task::spawn_blocking(move || write_state(&path, now, keep.as_deref())).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::error!(%error, "heartbeat: failed to record the beat"),
            Err(_) => tracing::error!("heartbeat: recording the beat panicked"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn a_file_of_headings_comments_and_empty_items_has_no_tasks() {
        for empty in [
            "",
            "  \n\n",
            "# HEARTBEAT.md\n\n<!-- Add tasks below; keep this file empty to skip heartbeats. -->\n",
            "## Checks\n- \n* [ ]\n+\n<!-- unclosed comment\n- check mail",
            "<!-- a\nmulti-line\ncomment -->\n#\n",
        ] {
            assert!(!has_tasks(empty), "{empty:?}");
        }
        for tasks in [
            "Check the shared inbox and tell Ana what needs her.",
            "# Checks\n- [ ] look at open invoices",
            "<!-- note --> remind Marko about the report",
            "- [x] done but still a line",
        ] {
            assert!(has_tasks(tasks), "{tasks:?}");
        }
    }

    #[test]
    fn the_next_beat_waits_for_the_active_hours() {
        let window = ActiveWindow::new(
            &ActiveHours {
                start: "08:00".into(),
                end: "20:00".into(),
                timezone: Some("Europe/Zagreb".into()),
            },
            "UTC",
        )
        .unwrap();
        let hour = Duration::from_secs(3600);
        // 10:00 Zagreb (CET, UTC+1) → 11:00, inside.
        assert_eq!(
            next_beat(at("2026-01-15T09:00:00Z"), hour, Some(&window)),
            at("2026-01-15T10:00:00Z")
        );
        // 19:30 Zagreb → 20:30 is outside → 08:00 the next morning (07:00 UTC).
        assert_eq!(
            next_beat(at("2026-01-15T18:30:00Z"), hour, Some(&window)),
            at("2026-01-16T07:00:00Z")
        );
        // 03:00 Zagreb → 04:00 is before the window → 08:00 the same day.
        assert_eq!(
            next_beat(at("2026-01-15T02:00:00Z"), hour, Some(&window)),
            at("2026-01-15T07:00:00Z")
        );
        // Summer time: 08:00 CEST is 06:00 UTC.
        assert_eq!(
            next_beat(at("2026-07-15T03:00:00Z"), hour, Some(&window)),
            at("2026-07-15T06:00:00Z")
        );
        assert_eq!(
            next_beat(at("2026-01-15T18:30:00Z"), hour, None),
            at("2026-01-15T19:30:00Z")
        );
    }

    #[test]
    fn a_window_over_midnight_wraps() {
        let window = ActiveWindow::new(
            &ActiveHours {
                start: "22:00".into(),
                end: "06:00".into(),
                timezone: None,
            },
            "UTC",
        )
        .unwrap();
        assert!(window.contains(at("2026-01-15T23:30:00Z")));
        assert!(window.contains(at("2026-01-16T05:59:00Z")));
        assert!(!window.contains(at("2026-01-16T06:00:00Z")));
        assert_eq!(
            window.next_open(at("2026-01-16T12:00:00Z")),
            at("2026-01-16T22:00:00Z")
        );
    }

    #[test]
    fn the_last_beat_survives_a_restart_and_a_torn_file_is_ignored() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("sessions/heartbeat.json");
        assert!(read_state(&path).is_none());
        write_state(&path, at("2026-01-15T09:00:00Z"), Some("abc")).unwrap();
        let state = read_state(&path).unwrap();
        assert_eq!(state.last, Some(at("2026-01-15T09:00:00Z")));
        assert_eq!(state.fingerprint.as_deref(), Some("abc"));
        std::fs::write(&path, "{\"last\": \"2026-01").unwrap();
        assert!(read_state(&path).is_none());
        // A state written before fingerprints existed still reads.
        std::fs::write(&path, "{\"last\":\"2026-01-15T09:00:00Z\"}").unwrap();
        assert_eq!(read_state(&path).unwrap().fingerprint, None);
    }
}
