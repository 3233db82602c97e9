//! Scheduled jobs: the `cron` tool and the loop that runs due jobs as their creators.
//!
//! A job is a schedule ([`spec`]), the text to run, the contact who created it (and
//! their role then), where its result goes, and whether it is enabled; jobs live in
//! `sessions/jobs.sqlite3` ([`jobs`]) and survive restarts. The tool ([`tool`]) adds,
//! lists, removes and runs them now; the loop ([`run`]) runs each due job as an isolated
//! turn in its own session with its creator's *current* role.
//!
//! Rules (each stated where it is enforced):
//! - Missed runs: a run missed while the bot was down (due before this process
//!   started) runs once on start if it was due at most `schedule.missedRunGraceSeconds`
//!   ago, else it is skipped (logged) and the job goes on at its next future time; a run
//!   that came due while the bot was running always runs, however late the loop gets to
//!   it. Never a burst: one run per due time, the next computed from now
//!   ([`spec::decide`]).
//! - Limits: each run checks the creator's role *now* (`cron.minIntervalSeconds`,
//!   `cron.maxJobs`); a job beyond them is stopped with the reason, not run.
//! - Finished one-time jobs are purged 30 days after their time ([`PURGE_AFTER`]);
//!   stopped jobs stay (listed with the reason) until someone removes them.
//! - Crashes: a run is marked started (and the next due time stored) before it runs. A
//!   run the process died in is not repeated — repeating could send the same reminder
//!   twice — but it is not lost silently either: on start it is logged, recorded as the
//!   job's last outcome (shown by `list`) and its creator is told.
//! - A job cannot schedule jobs: its turn runs with `cron` denied.

pub mod jobs;
mod run;
pub mod spec;
pub mod tool;

use std::{path::Path, sync::Arc};

use saint_config::BotConfig;
use saint_tools::{Caller, Tool};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use self::jobs::JobStore;
pub use self::run::MAX_CONCURRENT_RUNS;
use crate::{
    channel::hub::ChannelHub,
    clock::Clock,
    runtime::{Recipient, Runtime, reachable_recipient},
};

/// How long a finished one-time job is kept after its time (listed as done), before
/// the scheduler deletes it.
pub const PURGE_AFTER: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

/// The job store, the `cron` tool over it, and the scheduler loop.
pub struct Schedule {
    store: Arc<JobStore>,
    hub: Arc<ChannelHub>,
    /// Notified by the tool after a change, so the loop looks again at once.
    wake: Arc<Notify>,
    /// The clock the loop runs by; the tool reads "now" from it too.
    clock: Arc<Clock>,
}

impl Schedule {
    /// Opens the job store of the bot whose workspace is `workspace`
    /// (`sessions/jobs.sqlite3`, next to the transcripts).
    pub fn open(
        workspace: &Path,
        hub: Arc<ChannelHub>,
        clock: Arc<Clock>,
    ) -> anyhow::Result<Arc<Self>> {
        let store = JobStore::open(workspace.join("sessions").join("jobs.sqlite3"))?;
        Ok(Arc::new(Self {
            store: Arc::new(store),
            hub,
            wake: Arc::new(Notify::new()),
            clock,
        }))
    }

    /// The `cron` tool.
    pub fn tool(self: &Arc<Self>) -> Option<Arc<dyn Tool>> {
        Some(Arc::new(tool::CronTool::new(self.clone())))
    }

    /// Runs due jobs until `stop` (the bot is draining), then waits for the runs in
    /// progress; `abort` cancels those (the drain deadline passed).
    pub async fn run(
        self: Arc<Self>,
        runtime: Arc<Runtime>,
        stop: CancellationToken,
        abort: CancellationToken,
    ) {
        let clock = self.clock.clone();
        run::run(self, runtime, clock, stop, abort).await;
    }

    /// The scheduling clock.
    fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Whether the channel named `channel` can send a message nobody asked for (it has a
    /// transport in the hub; the HTTP API only answers requests).
    fn can_send(&self, channel: &str) -> bool {
        self.hub.channel(channel).is_some()
    }

    /// Where a job's result for contact `slug` goes (see [`reachable_recipient`]).
    fn recipient(
        &self,
        config: &BotConfig,
        slug: &str,
        preferred: Option<&str>,
    ) -> Option<Recipient> {
        reachable_recipient(config, slug, preferred, |channel| self.can_send(channel))
    }

    /// The sentence telling the creator where a new job's results go.
    fn describe_delivery(
        &self,
        config: &BotConfig,
        caller: &Caller,
        deliver_to: Option<&str>,
        deliver_identity: Option<&str>,
        id: i64,
    ) -> String {
        let (slug, preferred) = match deliver_to {
            Some(slug) => (slug, deliver_identity),
            None => (caller.slug.as_str(), Some(caller.identity.as_str())),
        };
        let name = contact_name(config, slug);
        match self.recipient(config, slug, preferred) {
            Some(recipient) => format!(
                "Each result is sent to {name} on {} ({}).",
                recipient.channel, recipient.identity
            ),
            None if deliver_to.is_none() => format!(
                "None of your channels can receive messages the bot starts (this one only \
                 answers requests), so each result is kept in the job's own session only \
                 ({}), not sent to you.",
                saint_config::SessionKey::for_job(&jobs::label(id))
            ),
            None => format!(
                "No channel of the bot can reach {name} now; each result is kept in the job's \
                 own session until one can."
            ),
        }
    }
}

/// The display name of contact `slug` (the slug itself if they are gone).
fn contact_name(config: &BotConfig, slug: &str) -> String {
    config
        .contacts
        .iter()
        .find(|contact| contact.slug == slug)
        .map_or_else(|| slug.to_string(), |contact| contact.name.clone())
}
