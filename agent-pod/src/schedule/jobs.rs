//! The job store: `sessions/jobs.sqlite3` on the workspace volume.
//!
//! Durability: WAL journal with `synchronous=FULL`, like the transcript store, so a job
//! acknowledged to its creator survives a killed process and a lost node. The scheduler
//! finds due jobs through an index on `next_run` (only enabled, idle jobs are in it), so
//! a tick costs a range scan of the due rows, never a read of every job.
//!
//! A run is claimed before it starts: one update records the due time being run
//! (`running_due`) and moves `next_run` on, so a due time is never run twice, even after
//! a crash. A claim still present at start is a run the process died in: it is not
//! repeated, but reported ([`JobStore::recover_interrupted`]).
//!
//! Single writer: one connection behind a mutex; async callers use `spawn_blocking`.

use std::path::{Path, PathBuf};

use jiff::Timestamp;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::spec::Spec;
use parking_lot::Mutex;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum JobStoreError {
    #[error("failed to open the job database {path}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("failed to create the job database's directory {path}")]
    Directory {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to {action}")]
    Sql {
        action: &'static str,
        source: rusqlite::Error,
    },
    #[error("job {id} has an unreadable schedule")]
    Decode { id: i64, source: serde_json::Error },
}

fn sql(action: &'static str) -> impl FnOnce(rusqlite::Error) -> JobStoreError {
    move |source| JobStoreError::Sql { action, source }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    owner TEXT NOT NULL,
    owner_role TEXT NOT NULL,
    owner_identity TEXT NOT NULL,
    schedule TEXT NOT NULL,
    text TEXT NOT NULL,
    deliver_to TEXT,
    deliver_identity TEXT,
    enabled INTEGER NOT NULL DEFAULT 1,
    disabled_reason TEXT,
    next_run INTEGER,
    running_due INTEGER,
    last_run INTEGER,
    last_outcome TEXT,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_due ON jobs(next_run)
    WHERE enabled = 1 AND running_due IS NULL AND next_run IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_by_owner ON jobs(owner);
CREATE INDEX IF NOT EXISTS jobs_running ON jobs(running_due) WHERE running_due IS NOT NULL;
CREATE TABLE IF NOT EXISTS budget_notices (
    owner TEXT PRIMARY KEY,
    period TEXT NOT NULL
);
";

/// The columns [`job_from_row`] reads, in order.
const COLUMNS: &str = "id, owner, owner_role, owner_identity, schedule, text, deliver_to, \
     deliver_identity, enabled, disabled_reason, next_run, running_due, last_run, last_outcome, created_at";

/// The order of [`JobStore::list`]: jobs that may still run (what the per-person limit
/// counts) first, oldest first; then the stopped and done ones, newest first (so a long
/// tail of old ones never hides a live job).
const LIST_ORDER: &str = "ORDER BY (enabled = 1 AND (next_run IS NOT NULL OR running_due IS NOT NULL)) DESC, \
     CASE WHEN (enabled = 1 AND (next_run IS NOT NULL OR running_due IS NOT NULL)) THEN id ELSE -id END";

/// A job as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// Row id; shown as `job-<id>`.
    pub id: i64,
    /// Slug of the contact who created it (whom it runs as).
    pub owner: String,
    /// Their role when they created it (the run uses their current one).
    pub owner_role: String,
    /// The channel identity they created it from (where their results go by default).
    pub owner_identity: String,
    /// When it runs.
    pub spec: Spec,
    /// What the model is asked to do each time.
    pub text: String,
    /// Another contact receiving the result (`None`: the creator).
    pub deliver_to: Option<String>,
    /// The identity of `deliver_to` chosen when the job was added.
    pub deliver_identity: Option<String>,
    /// Whether it runs.
    pub enabled: bool,
    /// Why it was stopped (its creator left, their role may no longer schedule jobs).
    pub disabled_reason: Option<String>,
    /// The next due time (`None`: nothing more to run).
    pub next_run: Option<Timestamp>,
    /// The due time being run right now, if a run is in progress.
    pub running_due: Option<Timestamp>,
    /// The due time of the last run started.
    pub last_run: Option<Timestamp>,
    /// How the last run (or skip) ended, in words.
    pub last_outcome: Option<String>,
    /// RFC 3339 system time it was added.
    pub created_at: String,
}

impl Job {
    /// The id people and the model use (`job-7`).
    pub fn label(&self) -> String {
        label(self.id)
    }

    /// Whether it may still run: enabled, with a run ahead or in progress (what the
    /// per-person limit counts).
    pub fn is_active(&self) -> bool {
        self.enabled && (self.next_run.is_some() || self.running_due.is_some())
    }
}

/// The id people and the model use for row `id`.
pub fn label(id: i64) -> String {
    format!("job-{id}")
}

/// Reads `job-7` (or `7`) back.
pub fn parse_label(text: &str) -> Option<i64> {
    let text = text.trim();
    text.strip_prefix("job-")
        .unwrap_or(text)
        .parse()
        .ok()
        .filter(|id| *id > 0)
}

/// A job to add.
#[derive(Clone, Debug)]
pub struct NewJob {
    /// Creator's slug.
    pub owner: String,
    /// Creator's role now.
    pub owner_role: String,
    /// The identity they asked from.
    pub owner_identity: String,
    /// When it runs.
    pub spec: Spec,
    /// What to do.
    pub text: String,
    /// Another contact to deliver to.
    pub deliver_to: Option<String>,
    /// That contact's identity.
    pub deliver_identity: Option<String>,
    /// The first due time.
    pub next_run: Timestamp,
}

/// How an add ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    /// Stored as this id.
    Stored(i64),
    /// The owner already has this many jobs, the most allowed.
    AtLimit(u64),
}

/// The store.
pub struct JobStore {
    path: PathBuf,
    connection: Mutex<Connection>,
}

fn millis(at: Timestamp) -> i64 {
    at.as_millisecond()
}

fn timestamp(millis: Option<i64>) -> Option<Timestamp> {
    millis.and_then(|millis| Timestamp::from_millisecond(millis).ok())
}

fn job_from_row(row: &Row<'_>) -> rusqlite::Result<(Job, String)> {
    let schedule: String = row.get(4)?;
    Ok((
        Job {
            id: row.get(0)?,
            owner: row.get(1)?,
            owner_role: row.get(2)?,
            owner_identity: row.get(3)?,
            // Decoded by the caller, so a bad row is reported with its id.
            spec: Spec::At {
                at: Timestamp::UNIX_EPOCH,
            },
            text: row.get(5)?,
            deliver_to: row.get(6)?,
            deliver_identity: row.get(7)?,
            enabled: row.get::<_, i64>(8)? != 0,
            disabled_reason: row.get(9)?,
            next_run: timestamp(row.get(10)?),
            running_due: timestamp(row.get(11)?),
            last_run: timestamp(row.get(12)?),
            last_outcome: row.get(13)?,
            created_at: row.get(14)?,
        },
        schedule,
    ))
}

fn decode((mut job, schedule): (Job, String)) -> Result<Job, JobStoreError> {
    job.spec = serde_json::from_str(&schedule)
        .map_err(|source| JobStoreError::Decode { id: job.id, source })?;
    Ok(job)
}

impl JobStore {
    /// Opens (creating if needed) the database at `path`.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, JobStoreError> {
        let path = path.into();
        let connection =
            crate::session::open_durable(&path, &[SCHEMA]).map_err(|failure| match failure {
                crate::session::OpenFailure::Directory { path, source } => {
                    JobStoreError::Directory { path, source }
                }
                crate::session::OpenFailure::Open(source) => JobStoreError::Open {
                    path: path.clone(),
                    source,
                },
            })?;
        Ok(Self {
            path,
            connection: Mutex::new(connection),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn with<T>(
        &self,
        body: impl FnOnce(&mut Connection) -> Result<T, JobStoreError>,
    ) -> Result<T, JobStoreError> {
        let mut connection = self.connection.lock();
        body(&mut connection)
    }

    /// Adds `job` unless its owner already keeps `max_jobs` jobs that may still run (a
    /// stopped job, or a one-time job that has run, does not count), counted and inserted
    /// in one transaction so two adds at once cannot pass the limit together.
    pub fn add(&self, job: &NewJob, max_jobs: u32) -> Result<Added, JobStoreError> {
        let schedule = serde_json::to_string(&job.spec).expect("a schedule serialises");
        self.with(|connection| {
            let transaction = connection
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(sql("begin adding a job"))?;
            let count: i64 = transaction
                .query_row(
                    "SELECT COUNT(*) FROM jobs WHERE owner = ?1 AND enabled = 1
                       AND (next_run IS NOT NULL OR running_due IS NOT NULL)",
                    [&job.owner],
                    |row| row.get(0),
                )
                .map_err(sql("count a person's jobs"))?;
            if count >= i64::from(max_jobs) {
                return Ok(Added::AtLimit(count.unsigned_abs()));
            }
            transaction
                .execute(
                    "INSERT INTO jobs (owner, owner_role, owner_identity, schedule, text, deliver_to,
                         deliver_identity, next_run, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                    params![
                        job.owner,
                        job.owner_role,
                        job.owner_identity,
                        schedule,
                        job.text,
                        job.deliver_to,
                        job.deliver_identity,
                        millis(job.next_run),
                        Timestamp::now().to_string(),
                    ],
                )
                .map_err(sql("insert a job"))?;
            let id = transaction.last_insert_rowid();
            transaction.commit().map_err(sql("commit a job"))?;
            Ok(Added::Stored(id))
        })
    }

    /// The job `id`.
    pub fn get(&self, id: i64) -> Result<Option<Job>, JobStoreError> {
        self.with(|connection| {
            connection
                .query_row(
                    &format!("SELECT {COLUMNS} FROM jobs WHERE id = ?1"),
                    [id],
                    job_from_row,
                )
                .optional()
                .map_err(sql("read a job"))?
                .map(decode)
                .transpose()
        })
    }

    /// Every job of `owner`, or every job (`None`): the ones that may still run first,
    /// oldest first, then the stopped and done ones, newest first.
    pub fn list(&self, owner: Option<&str>) -> Result<Vec<Job>, JobStoreError> {
        self.with(|connection| {
            let rows = match owner {
                Some(owner) => {
                    let mut statement = connection
                        .prepare_cached(&format!(
                            "SELECT {COLUMNS} FROM jobs WHERE owner = ?1 {LIST_ORDER}"
                        ))
                        .map_err(sql("list jobs"))?;
                    statement
                        .query_map([owner], job_from_row)
                        .map_err(sql("list jobs"))?
                        .collect::<rusqlite::Result<Vec<_>>>()
                }
                None => {
                    let mut statement = connection
                        .prepare_cached(&format!("SELECT {COLUMNS} FROM jobs {LIST_ORDER}"))
                        .map_err(sql("list jobs"))?;
                    statement
                        .query_map([], job_from_row)
                        .map_err(sql("list jobs"))?
                        .collect::<rusqlite::Result<Vec<_>>>()
                }
            }
            .map_err(sql("list jobs"))?;
            rows.into_iter().map(decode).collect()
        })
    }

    /// Removes job `id`; whether it existed. A run in progress finishes; its outcome is
    /// not recorded.
    pub fn remove(&self, id: i64) -> Result<bool, JobStoreError> {
        self.with(|connection| {
            connection
                .execute("DELETE FROM jobs WHERE id = ?1", [id])
                .map(|changed| changed > 0)
                .map_err(sql("remove a job"))
        })
    }

    /// Up to `limit` enabled, idle jobs due at `now`, the most overdue first. Reads the
    /// `jobs_due` index range up to `now` only.
    pub fn due(&self, now: Timestamp, limit: usize) -> Result<Vec<Job>, JobStoreError> {
        self.with(|connection| {
            let mut statement = connection
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM jobs INDEXED BY jobs_due
                     WHERE enabled = 1 AND running_due IS NULL AND next_run IS NOT NULL
                       AND next_run <= ?1
                     ORDER BY next_run LIMIT ?2"
                ))
                .map_err(sql("find due jobs"))?;
            let rows = statement
                .query_map(
                    params![millis(now), i64::try_from(limit).unwrap_or(i64::MAX)],
                    job_from_row,
                )
                .map_err(sql("find due jobs"))?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(sql("find due jobs"))?;
            rows.into_iter().map(decode).collect()
        })
    }

    /// The earliest due time of an enabled, idle job (the first entry of the index).
    pub fn next_due(&self) -> Result<Option<Timestamp>, JobStoreError> {
        self.with(|connection| {
            let mut statement = connection
                .prepare_cached(
                    "SELECT MIN(next_run) FROM jobs INDEXED BY jobs_due
                     WHERE enabled = 1 AND running_due IS NULL AND next_run IS NOT NULL",
                )
                .map_err(sql("find the next due job"))?;
            let next: Option<i64> = statement
                .query_row([], |row| row.get(0))
                .map_err(sql("find the next due job"))?;
            Ok(timestamp(next))
        })
    }

    /// Claims the run of job `id` for the due time `due` it was found with (`stored`):
    /// records the run as started and moves `next_run` to `next`, in one update that
    /// succeeds only if nobody claimed or changed the job since. Whether it was claimed.
    pub fn claim(
        &self,
        id: i64,
        stored: Timestamp,
        due: Timestamp,
        next: Option<Timestamp>,
    ) -> Result<bool, JobStoreError> {
        self.with(|connection| {
            connection
                .execute(
                    "UPDATE jobs SET running_due = ?3, last_run = ?3, next_run = ?4
                     WHERE id = ?1 AND next_run = ?2 AND enabled = 1 AND running_due IS NULL",
                    params![id, millis(stored), millis(due), next.map(millis)],
                )
                .map(|changed| changed == 1)
                .map_err(sql("claim a job's run"))
        })
    }

    /// Skips the due time the job was found with (`stored`): `next_run` moves to `next`
    /// and `outcome` says why. Whether the job was still as found.
    pub fn skip(
        &self,
        id: i64,
        stored: Timestamp,
        next: Option<Timestamp>,
        outcome: &str,
    ) -> Result<bool, JobStoreError> {
        self.with(|connection| {
            connection
                .execute(
                    "UPDATE jobs SET next_run = ?3, last_outcome = ?4
                     WHERE id = ?1 AND next_run = ?2 AND running_due IS NULL",
                    params![id, millis(stored), next.map(millis), outcome],
                )
                .map(|changed| changed == 1)
                .map_err(sql("skip a job's run"))
        })
    }

    /// Records the end of job `id`'s run.
    pub fn finish(&self, id: i64, outcome: &str) -> Result<(), JobStoreError> {
        self.with(|connection| {
            connection
                .execute(
                    "UPDATE jobs SET running_due = NULL, last_outcome = ?2 WHERE id = ?1",
                    params![id, outcome],
                )
                .map(drop)
                .map_err(sql("record a job's run"))
        })
    }

    /// Stops job `id` for `reason` (also ending a run it was claimed for).
    pub fn disable(&self, id: i64, reason: &str) -> Result<(), JobStoreError> {
        self.with(|connection| {
            connection
                .execute(
                    "UPDATE jobs SET enabled = 0, disabled_reason = ?2, running_due = NULL,
                         last_outcome = ?2
                     WHERE id = ?1",
                    params![id, reason],
                )
                .map(drop)
                .map_err(sql("disable a job"))
        })
    }

    /// Stops, for `reason`, every job of `owner` that may still run beyond their first
    /// `max_jobs` such jobs (the oldest are kept, the newest stopped), in one
    /// transaction; the jobs it stopped (as they were). Jobs counted as in
    /// [`JobStore::add`].
    pub fn stop_beyond_limit(
        &self,
        owner: &str,
        max_jobs: u32,
        reason: &str,
    ) -> Result<Vec<Job>, JobStoreError> {
        self.with(|connection| {
            let transaction = connection
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(sql("begin enforcing the job limit"))?;
            let rows = {
                let mut statement = transaction
                    .prepare_cached(&format!(
                        "SELECT {COLUMNS} FROM jobs WHERE owner = ?1 AND enabled = 1
                           AND (next_run IS NOT NULL OR running_due IS NOT NULL)
                         ORDER BY id LIMIT -1 OFFSET ?2"
                    ))
                    .map_err(sql("find jobs beyond the limit"))?;
                statement
                    .query_map(params![owner, i64::from(max_jobs)], job_from_row)
                    .map_err(sql("find jobs beyond the limit"))?
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(sql("find jobs beyond the limit"))?
            };
            for (job, _) in &rows {
                transaction
                    .execute(
                        "UPDATE jobs SET enabled = 0, disabled_reason = ?2, running_due = NULL,
                             last_outcome = ?2
                         WHERE id = ?1",
                        params![job.id, reason],
                    )
                    .map_err(sql("stop a job beyond the limit"))?;
            }
            transaction.commit().map_err(sql("commit the job limit"))?;
            rows.into_iter().map(decode).collect()
        })
    }

    /// Deletes the one-time jobs that are done (enabled, nothing more to run, not
    /// running) whose time was before `before`; how many. Stopped jobs are kept: their
    /// reason is for their creator to read.
    pub fn purge_finished(&self, before: Timestamp) -> Result<usize, JobStoreError> {
        self.with(|connection| {
            let transaction = connection
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(sql("begin purging finished jobs"))?;
            let finished = {
                let mut statement = transaction
                    .prepare_cached(&format!(
                        "SELECT {COLUMNS} FROM jobs
                         WHERE enabled = 1 AND next_run IS NULL AND running_due IS NULL"
                    ))
                    .map_err(sql("find finished jobs"))?;
                statement
                    .query_map([], job_from_row)
                    .map_err(sql("find finished jobs"))?
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(sql("find finished jobs"))?
            };
            let mut purged = 0;
            for row in finished {
                // A row whose schedule cannot be read is left for `list` to show.
                let Ok(job) = decode(row) else { continue };
                if matches!(job.spec, Spec::At { at } if at < before) {
                    purged += transaction
                        .execute("DELETE FROM jobs WHERE id = ?1", [job.id])
                        .map_err(sql("purge a finished job"))?;
                }
            }
            transaction.commit().map_err(sql("commit purged jobs"))?;
            Ok(purged)
        })
    }

    /// Makes job `id` due at `now` (run-now). False when it is disabled or running.
    pub fn due_now(&self, id: i64, now: Timestamp) -> Result<bool, JobStoreError> {
        self.with(|connection| {
            connection
                .execute(
                    "UPDATE jobs SET next_run = ?2 WHERE id = ?1 AND enabled = 1 AND running_due IS NULL",
                    params![id, millis(now)],
                )
                .map(|changed| changed == 1)
                .map_err(sql("make a job due now"))
        })
    }

    /// The jobs whose run was claimed but never finished (the process died during it),
    /// with the run's due time recorded as their outcome and the claim cleared. They are
    /// not run again for that due time.
    pub fn recover_interrupted(&self, outcome: &str) -> Result<Vec<Job>, JobStoreError> {
        self.with(|connection| {
            let transaction = connection
                .transaction()
                .map_err(sql("begin recovering interrupted runs"))?;
            let rows = {
                let mut statement = transaction
                    .prepare(&format!(
                        "SELECT {COLUMNS} FROM jobs WHERE running_due IS NOT NULL"
                    ))
                    .map_err(sql("find interrupted runs"))?;
                statement
                    .query_map([], job_from_row)
                    .map_err(sql("find interrupted runs"))?
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(sql("find interrupted runs"))?
            };
            transaction
                .execute(
                    "UPDATE jobs SET running_due = NULL, last_outcome = ?1 WHERE running_due IS NOT NULL",
                    [outcome],
                )
                .map_err(sql("clear interrupted runs"))?;
            transaction
                .commit()
                .map_err(sql("commit recovered runs"))?;
            rows.into_iter().map(decode).collect()
        })
    }

    /// Records that `owner` was told their budget for `period` is spent; false when they
    /// were told already for this period (so they are told once, not every run).
    pub fn note_budget_notice(&self, owner: &str, period: &str) -> Result<bool, JobStoreError> {
        self.with(|connection| {
            connection
                .execute(
                    "INSERT INTO budget_notices (owner, period) VALUES (?1, ?2)
                     ON CONFLICT(owner) DO UPDATE SET period = ?2 WHERE period <> ?2",
                    params![owner, period],
                )
                .map(|changed| changed == 1)
                .map_err(sql("record a budget notice"))
        })
    }

    /// How many jobs are stored.
    pub fn count(&self) -> Result<u64, JobStoreError> {
        self.with(|connection| {
            connection
                .query_row("SELECT COUNT(*) FROM jobs", [], |row| row.get::<_, i64>(0))
                .map(i64::unsigned_abs)
                .map_err(sql("count jobs"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn weekly(owner: &str, next: &str) -> NewJob {
        NewJob {
            owner: owner.to_string(),
            owner_role: "employee".to_string(),
            owner_identity: "telegram:333333333".to_string(),
            spec: Spec::parse("0 9 * * MON", "UTC", at("2026-01-01T00:00:00Z")).unwrap(),
            text: "Remind me to send the report".to_string(),
            deliver_to: None,
            deliver_identity: None,
            next_run: at(next),
        }
    }

    fn store() -> (tempfile::TempDir, JobStore) {
        let directory = tempfile::tempdir().unwrap();
        let store = JobStore::open(directory.path().join("sessions/jobs.sqlite3")).unwrap();
        (directory, store)
    }

    #[test]
    fn the_limit_counts_a_persons_jobs() {
        let (_directory, store) = store();
        let job = weekly("ivan", "2026-05-04T09:00:00Z");
        assert!(matches!(store.add(&job, 2).unwrap(), Added::Stored(_)));
        assert!(matches!(store.add(&job, 2).unwrap(), Added::Stored(_)));
        assert_eq!(store.add(&job, 2).unwrap(), Added::AtLimit(2));
        assert!(matches!(
            store
                .add(&weekly("marko", "2026-05-04T09:00:00Z"), 2)
                .unwrap(),
            Added::Stored(_)
        ));
        assert_eq!(store.list(Some("ivan")).unwrap().len(), 2);
        assert_eq!(store.list(None).unwrap().len(), 3);
    }

    #[test]
    fn a_due_time_is_claimed_once_and_a_claim_left_by_a_crash_is_reported_not_rerun() {
        let (directory, store) = store();
        let Added::Stored(id) = store
            .add(&weekly("ivan", "2026-05-04T09:00:00Z"), 10)
            .unwrap()
        else {
            panic!("not stored");
        };
        let now = at("2026-05-04T09:00:05Z");
        assert_eq!(store.next_due().unwrap(), Some(at("2026-05-04T09:00:00Z")));
        let due = store.due(now, 10).unwrap();
        assert_eq!(due.len(), 1);
        let stored = due[0].next_run.unwrap();
        let next = Some(at("2026-05-11T09:00:00Z"));
        assert!(store.claim(id, stored, stored, next).unwrap());
        assert!(
            !store.claim(id, stored, stored, next).unwrap(),
            "claimed twice"
        );
        // A running job is not due, and not the next due either.
        assert!(
            store
                .due(at("2026-05-20T00:00:00Z"), 10)
                .unwrap()
                .is_empty()
        );
        assert_eq!(store.next_due().unwrap(), None);
        // The process dies here. On the next start the claim is found, reported, cleared.
        drop(store);
        let store = JobStore::open(directory.path().join("sessions/jobs.sqlite3")).unwrap();
        let interrupted = store.recover_interrupted("interrupted").unwrap();
        assert_eq!(interrupted.len(), 1);
        assert_eq!(interrupted[0].running_due, Some(stored));
        let job = store.get(id).unwrap().unwrap();
        assert_eq!(job.running_due, None);
        assert_eq!(job.last_outcome.as_deref(), Some("interrupted"));
        assert_eq!(job.next_run, next, "the next due time stands");
        assert!(store.due(now, 10).unwrap().is_empty(), "not run again");
        assert!(store.recover_interrupted("interrupted").unwrap().is_empty());
    }

    #[test]
    fn due_jobs_come_from_the_index() {
        let (_directory, store) = store();
        let plan: String = store
            .with(|connection| {
                connection
                    .query_row(
                        "EXPLAIN QUERY PLAN SELECT id FROM jobs INDEXED BY jobs_due
                         WHERE enabled = 1 AND running_due IS NULL AND next_run IS NOT NULL
                           AND next_run <= 5 ORDER BY next_run LIMIT 10",
                        [],
                        |row| row.get(3),
                    )
                    .map_err(sql("explain"))
            })
            .unwrap();
        assert!(plan.contains("USING INDEX jobs_due"), "{plan}");
    }

    #[test]
    fn a_budget_notice_is_recorded_once_per_period() {
        let (_directory, store) = store();
        assert!(
            store
                .note_budget_notice("ivan", "month:2026-05-01")
                .unwrap()
        );
        assert!(
            !store
                .note_budget_notice("ivan", "month:2026-05-01")
                .unwrap()
        );
        assert!(
            store
                .note_budget_notice("ivan", "month:2026-06-01")
                .unwrap()
        );
        assert!(
            store
                .note_budget_notice("marko", "month:2026-06-01")
                .unwrap()
        );
    }

    fn stored(store: &JobStore, job: &NewJob) -> i64 {
        match store.add(job, 100).unwrap() {
            Added::Stored(id) => id,
            Added::AtLimit(_) => panic!("not stored"),
        }
    }

    fn once(owner: &str, at_text: &str) -> NewJob {
        NewJob {
            spec: Spec::At { at: at(at_text) },
            ..weekly(owner, at_text)
        }
    }

    #[test]
    fn live_jobs_are_listed_first_and_finished_ones_newest_first() {
        let (_directory, store) = store();
        let stopped_old = stored(&store, &weekly("ivan", "2026-05-04T09:00:00Z"));
        let live_old = stored(&store, &weekly("ivan", "2026-05-04T09:00:00Z"));
        let done = stored(&store, &once("ivan", "2026-05-01T09:00:00Z"));
        let stopped_new = stored(&store, &weekly("ivan", "2026-05-04T09:00:00Z"));
        let live_new = stored(&store, &weekly("ivan", "2026-05-04T09:00:00Z"));
        store.disable(stopped_old, "stopped").unwrap();
        store.disable(stopped_new, "stopped").unwrap();
        let due = at("2026-05-01T09:00:00Z");
        assert!(store.claim(done, due, due, None).unwrap());
        store.finish(done, "answered").unwrap();
        let order: Vec<i64> = store
            .list(Some("ivan"))
            .unwrap()
            .iter()
            .map(|job| job.id)
            .collect();
        assert_eq!(
            order,
            [live_old, live_new, stopped_new, done, stopped_old],
            "active oldest first, then the rest newest first"
        );
        assert_eq!(
            store
                .list(None)
                .unwrap()
                .iter()
                .map(|job| job.is_active())
                .collect::<Vec<_>>(),
            [true, true, false, false, false]
        );
    }

    #[test]
    fn finished_one_time_jobs_are_purged_after_their_time_stopped_and_live_ones_kept() {
        let (_directory, store) = store();
        let old_done = stored(&store, &once("ivan", "2026-03-01T09:00:00Z"));
        let recent_done = stored(&store, &once("ivan", "2026-04-20T09:00:00Z"));
        let old_stopped = stored(&store, &once("ivan", "2026-03-01T09:00:00Z"));
        let live = stored(&store, &weekly("ivan", "2026-05-04T09:00:00Z"));
        for id in [old_done, recent_done] {
            let due = store.get(id).unwrap().unwrap().next_run.unwrap();
            assert!(store.claim(id, due, due, None).unwrap());
            store.finish(id, "answered").unwrap();
        }
        store.disable(old_stopped, "stopped").unwrap();
        assert_eq!(store.purge_finished(at("2026-04-01T00:00:00Z")).unwrap(), 1);
        assert_eq!(store.get(old_done).unwrap(), None);
        for id in [recent_done, old_stopped, live] {
            assert!(store.get(id).unwrap().is_some(), "job {id} was purged");
        }
        assert_eq!(store.purge_finished(at("2026-04-01T00:00:00Z")).unwrap(), 0);
    }

    #[test]
    fn the_newest_jobs_beyond_a_lowered_limit_are_stopped_once() {
        let (_directory, store) = store();
        let first = stored(&store, &weekly("ivan", "2026-05-04T09:00:00Z"));
        let stopped = stored(&store, &weekly("ivan", "2026-05-04T09:00:00Z"));
        let second = stored(&store, &weekly("ivan", "2026-05-04T09:00:00Z"));
        let third = stored(&store, &weekly("ivan", "2026-05-04T09:00:00Z"));
        let fourth = stored(&store, &weekly("ivan", "2026-05-04T09:00:00Z"));
        let marko = stored(&store, &weekly("marko", "2026-05-04T09:00:00Z"));
        store.disable(stopped, "earlier").unwrap();
        // The newest is running; it counts, and is stopped as well.
        let due = at("2026-05-04T09:00:00Z");
        assert!(store.claim(fourth, due, due, None).unwrap());
        let swept = store.stop_beyond_limit("ivan", 2, "over").unwrap();
        assert_eq!(
            swept.iter().map(|job| job.id).collect::<Vec<_>>(),
            [third, fourth]
        );
        for (id, enabled) in [
            (first, true),
            (second, true),
            (third, false),
            (fourth, false),
            (marko, true),
        ] {
            let job = store.get(id).unwrap().unwrap();
            assert_eq!(job.enabled, enabled, "{job:?}");
            if !enabled {
                assert_eq!(job.disabled_reason.as_deref(), Some("over"));
                assert_eq!(job.running_due, None);
            }
        }
        assert_eq!(
            store
                .get(stopped)
                .unwrap()
                .unwrap()
                .disabled_reason
                .as_deref(),
            Some("earlier")
        );
        assert!(
            store
                .stop_beyond_limit("ivan", 2, "over")
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn labels_round_trip() {
        assert_eq!(label(7), "job-7");
        assert_eq!(parse_label("job-7"), Some(7));
        assert_eq!(parse_label(" 7 "), Some(7));
        assert_eq!(parse_label("job-x"), None);
        assert_eq!(parse_label("job-0"), None);
    }
}
