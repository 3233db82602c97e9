//! The scheduler loop: find the due jobs through the store's index, claim each due time
//! once, run each job as an isolated turn of its creator, wait for the next due time.
//!
//! Runs go concurrently (at most [`MAX_CONCURRENT_RUNS`], one per job at a time: a
//! job being run is not due until its run ends). A run uses the creator's role as the
//! config says *now*, with `cron` taken away; a creator removed from the contacts, or
//! whose role may no longer schedule jobs, stops their jobs (logged, shown by `list`),
//! and so do that role's current limits (`cron.minIntervalSeconds`, `cron.maxJobs`).

use std::{sync::Arc, time::Duration};

use jiff::Timestamp;
use saint_config::{BotConfig, SessionKey};
use saint_llm::CancellationToken;
use saint_tools::{Caller, Trigger, policy};
use tokio::task::JoinSet;

use super::{
    PURGE_AFTER, Schedule, contact_name,
    jobs::{Job, JobStore, JobStoreError},
    spec::{self, CatchUp},
};
use crate::{
    identity::{IdentityError, caller_for_contact},
    metering,
    runtime::{Assignment, AssignmentEnd, Recipient, Runtime, narrowed_role},
};

/// Jobs running at once, at most; more due jobs wait for a free slot.
pub const MAX_CONCURRENT_RUNS: usize = 8;

/// What a run leaves in the store.
enum Ended {
    /// The run (or its skip) ended; the job goes on.
    Finished(String),
    /// The job is stopped for this reason.
    Stopped(String),
}

async fn blocking<T: Send + 'static>(
    store: &Arc<JobStore>,
    body: impl FnOnce(&JobStore) -> Result<T, JobStoreError> + Send + 'static,
) -> anyhow::Result<T> {
    let store = store.clone();
    Ok(tokio::task::spawn_blocking(move || body(&store)).await??)
}

pub(super) async fn run(
    schedule: Arc<Schedule>,
    runtime: Arc<Runtime>,
    clock: Arc<crate::clock::Clock>,
    stop: CancellationToken,
    abort: CancellationToken,
) {
    recover_interrupted(&schedule, &runtime).await;
    let mut runs: JoinSet<()> = JoinSet::new();
    let mut purged: Option<Timestamp> = None;
    loop {
        while runs.try_join_next().is_some() {}
        if stop.is_cancelled() {
            break;
        }
        if purged.is_none_or(|last| clock.now().duration_since(last) >= PURGE_EVERY) {
            let now = clock.now();
            purged = Some(now);
            purge(&schedule, now).await;
        }
        let free = MAX_CONCURRENT_RUNS.saturating_sub(runs.len());
        let mut more_due = false;
        let mut healthy = true;
        if free > 0 {
            let now = clock.now();
            match blocking(&schedule.store, move |store| store.due(now, free)).await {
                Ok(due) => {
                    let (found, full) = (due.len(), due.len() == free);
                    let mut progressed = false;
                    for job in due {
                        progressed |= start(&schedule, &runtime, job, now, &abort, &mut runs).await;
                    }
                    // More may be due: look again at once, unless nothing could be done
                    // with these (the store failing): then wait as after an error.
                    more_due = full && progressed;
                    healthy = progressed || found == 0;
                }
                Err(error) => {
                    healthy = false;
                    tracing::error!(error = format!("{error:#}"), "failed to find due jobs");
                }
            }
        }
        if more_due && runs.len() < MAX_CONCURRENT_RUNS {
            continue;
        }
        let next = if runs.len() >= MAX_CONCURRENT_RUNS || !healthy {
            // Full (a run ending wakes the loop) or the store failing (look again later).
            None
        } else {
            match blocking(&schedule.store, |store| store.next_due()).await {
                Ok(next) => next,
                Err(error) => {
                    tracing::error!(
                        error = format!("{error:#}"),
                        "failed to find the next due job"
                    );
                    None
                }
            }
        };
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = clock.wait_until(next, &schedule.wake) => {}
            Some(_) = runs.join_next(), if !runs.is_empty() => {}
        }
    }
    // Draining: no new run starts; the ones running finish, or are cancelled by `abort`.
    while runs.join_next().await.is_some() {}
}

/// How often finished one-time jobs are looked for (a scan of the jobs without a next
/// run, so not on every tick).
const PURGE_EVERY: jiff::SignedDuration = jiff::SignedDuration::from_hours(1);

/// Deletes the one-time jobs finished more than [`PURGE_AFTER`] before `now`.
async fn purge(schedule: &Arc<Schedule>, now: Timestamp) {
    let Ok(before) = now.checked_sub(PURGE_AFTER) else {
        return;
    };
    match blocking(&schedule.store, move |store| store.purge_finished(before)).await {
        Ok(0) => {}
        Ok(count) => tracing::info!(count, "purged finished one-time jobs older than 30 days"),
        Err(error) => {
            tracing::error!(
                error = format!("{error:#}"),
                "failed to purge finished jobs"
            )
        }
    }
}

/// Decides what to do with a due job (the missed-run policy) and starts its run.
/// Whether the job's due time was dealt with (run, skipped or the job stopped).
async fn start(
    schedule: &Arc<Schedule>,
    runtime: &Arc<Runtime>,
    job: Job,
    now: Timestamp,
    abort: &CancellationToken,
    runs: &mut JoinSet<()>,
) -> bool {
    let Some(stored) = job.next_run else {
        return false;
    };
    let grace = Duration::from_secs(runtime.config().current().schedule.missed_run_grace_seconds);
    let started = schedule.clock().started();
    let decision = match spec::decide(&job.spec, stored, now, started, grace) {
        Ok(decision) => decision,
        Err(error) => {
            let reason = format!("its schedule cannot be computed: {error}");
            tracing::warn!(job = %job.label(), owner = %job.owner, %reason, "job stopped");
            let id = job.id;
            return match blocking(&schedule.store, move |store| store.disable(id, &reason)).await {
                Ok(()) => true,
                Err(error) => {
                    tracing::error!(error = format!("{error:#}"), "failed to stop a job");
                    false
                }
            };
        }
    };
    let id = job.id;
    match decision.catch_up {
        CatchUp::Skip => {
            let outcome = format!(
                "skipped the run due {}: the bot was down then, and it is longer ago than the \
                 missed-run grace of {} s (schedule.missedRunGraceSeconds)",
                decision.due,
                grace.as_secs()
            );
            tracing::warn!(job = %job.label(), owner = %job.owner, due = %decision.due,
                next = ?decision.next.map(|next| next.to_string()), "missed run skipped (older than the grace)");
            let next = decision.next;
            match blocking(&schedule.store, move |store| {
                store.skip(id, stored, next, &outcome)
            })
            .await
            {
                Ok(_) => true,
                Err(error) => {
                    tracing::error!(error = format!("{error:#}"), "failed to skip a missed run");
                    false
                }
            }
        }
        CatchUp::Run => {
            let (due, next) = (decision.due, decision.next);
            match blocking(&schedule.store, move |store| {
                store.claim(id, stored, due, next)
            })
            .await
            {
                Ok(claimed) => {
                    // Not claimed: the job changed since it was found (removed, made due
                    // now); the next look sees it as it is.
                    if claimed {
                        let (schedule, runtime, cancel) =
                            (schedule.clone(), runtime.clone(), abort.clone());
                        runs.spawn(
                            async move { run_job(schedule, runtime, job, due, cancel).await },
                        );
                    }
                    true
                }
                Err(error) => {
                    tracing::error!(error = format!("{error:#}"), "failed to claim a job's run");
                    false
                }
            }
        }
    }
}

/// Runs one claimed due time of `job` and records how it ended.
async fn run_job(
    schedule: Arc<Schedule>,
    runtime: Arc<Runtime>,
    job: Job,
    due: Timestamp,
    cancel: CancellationToken,
) {
    let ended = execute(&schedule, &runtime, &job, due, &cancel).await;
    let id = job.id;
    let recorded = match ended {
        Ended::Finished(outcome) => {
            blocking(&schedule.store, move |store| store.finish(id, &outcome)).await
        }
        Ended::Stopped(reason) => {
            blocking(&schedule.store, move |store| store.disable(id, &reason)).await
        }
    };
    if let Err(error) = recorded {
        tracing::error!(job = %job.label(), error = format!("{error:#}"), "failed to record a job's run");
    }
}

/// The creator of `job` as the config knows them now, in the job's session, running
/// because of the schedule.
fn creator(config: &BotConfig, job: &Job) -> Result<Caller, IdentityError> {
    caller_for_contact(
        config,
        &job.owner,
        Some(&job.owner_identity),
        SessionKey::for_job(&job.label()).into(),
        Trigger::Cron,
    )
}

async fn execute(
    schedule: &Arc<Schedule>,
    runtime: &Arc<Runtime>,
    job: &Job,
    due: Timestamp,
    cancel: &CancellationToken,
) -> Ended {
    let config = runtime.config().current();
    let caller = match creator(&config, job) {
        Ok(caller) => caller,
        Err(IdentityError::NoSuchContact(slug)) => {
            let reason = format!("its creator {slug} is no longer a contact of the bot");
            tracing::warn!(job = %job.label(), owner = %job.owner, "job stopped: {reason}");
            return Ended::Stopped(reason);
        }
        Err(error) => {
            tracing::warn!(job = %job.label(), owner = %job.owner, %error, "job not run");
            return Ended::Finished(format!("not run: {error}"));
        }
    };
    let owner_recipient = schedule.recipient(&config, &job.owner, Some(&job.owner_identity));
    // The creator's role now decides: one that may no longer schedule jobs (or is
    // external) stops their jobs rather than running them under a role that could not
    // have created them.
    if caller.role.external || !policy::tool_allowed(&caller.role, "cron") {
        let reason = format!(
            "{}'s role ({}) may no longer schedule jobs",
            caller.display_name, caller.role_name
        );
        tracing::warn!(job = %job.label(), owner = %job.owner, "job stopped: {reason}");
        let text = format!(
            "Your scheduled job {} ({}) is stopped: your role ({}) may no longer schedule jobs.",
            job.label(),
            job.spec.describe(),
            caller.role_name
        );
        tell(runtime, &caller, owner_recipient, &text).await;
        return Ended::Stopped(reason);
    }
    // The role's limits as they are now, not as they were when the job was added.
    if let Some(stopped) = enforce_limits(
        schedule,
        runtime,
        &caller,
        job,
        due,
        owner_recipient.as_ref(),
    )
    .await
    {
        return stopped;
    }
    let mut caller = caller;
    // Jobs do not create jobs.
    caller.role = Arc::new(narrowed_role(&caller.role, None, &["cron"]));

    let mut remark = String::new();
    let (deliver, recipient_name) = match &job.deliver_to {
        Some(other)
            if policy::tool_allowed(&caller.role, "message")
                && config.contacts.iter().any(|contact| contact.slug == *other) =>
        {
            (
                schedule.recipient(&config, other, job.deliver_identity.as_deref()),
                contact_name(&config, other),
            )
        }
        Some(other) => {
            remark =
                format!("; delivered to its creator: {other} may no longer be messaged by them");
            (owner_recipient.clone(), caller.display_name.clone())
        }
        None => (owner_recipient.clone(), caller.display_name.clone()),
    };
    let destination = match &deliver {
        Some(recipient) => format!(
            "Your final answer will be sent to {recipient_name} ({}) on {}.",
            recipient.identity, recipient.channel
        ),
        None => format!(
            "No channel can reach {recipient_name} now: your final answer is kept in this \
             job's session only."
        ),
    };
    let note = format!(
        "This is scheduled job {} ({}), created by {} and due at {due}. Nobody is reading \
         along live and nobody can answer questions: do the task with what you have. \
         {destination}",
        job.label(),
        job.spec.describe(),
        caller.display_name,
    );
    let assignment = Assignment {
        caller: caller.clone(),
        text: job.text.clone(),
        note,
        deliver: deliver.into_iter().collect(),
        quiet_answer: None,
    };
    match runtime.run_assignment(assignment, cancel).await {
        Ok(AssignmentEnd::Ran(reply)) => {
            tracing::info!(job = %job.label(), owner = %job.owner, due = %due, outcome = reply.outcome.label(), "job ran");
            Ended::Finished(format!("{}{remark}", reply.outcome.label()))
        }
        Ok(AssignmentEnd::OverBudget) => {
            tracing::info!(job = %job.label(), owner = %job.owner, "job skipped: its creator is over budget");
            over_budget_notice(schedule, runtime, &caller, job, owner_recipient).await;
            Ended::Finished("skipped: its creator's budget is spent".to_string())
        }
        Err(_) if cancel.is_cancelled() => {
            tracing::warn!(job = %job.label(), "job run cancelled: the bot is stopping");
            Ended::Finished("cancelled: the bot stopped during the run".to_string())
        }
        Err(error) => {
            tracing::warn!(job = %job.label(), owner = %job.owner, error = %saint_config::ErrorChain(&error), "job run failed");
            Ended::Finished(format!("failed: {error}"))
        }
    }
}

/// The limits of the creator's role now (`role.cron`): a job that runs more often than
/// `minIntervalSeconds` allows is stopped, and when the creator keeps more jobs than
/// `maxJobs` allows, the newest beyond it are stopped (whichever of their jobs runs
/// first stops them). The creator is told once, by the run that stops them. `Some`: this
/// job is stopped and does not run.
async fn enforce_limits(
    schedule: &Arc<Schedule>,
    runtime: &Arc<Runtime>,
    caller: &Caller,
    job: &Job,
    due: Timestamp,
    owner_recipient: Option<&Recipient>,
) -> Option<Ended> {
    let limits = &caller.role.cron;
    if let Some(gap) = runs_too_often(&job.spec, due, limits.min_interval_seconds) {
        let reason = format!(
            "it runs as often as every {gap} s; its creator's role ({}) now allows at most one \
             run every {} s (cron.minIntervalSeconds)",
            caller.role_name, limits.min_interval_seconds
        );
        tracing::warn!(job = %job.label(), owner = %job.owner, "job stopped: {reason}");
        let text = format!(
            "Your scheduled job {} ({}) is stopped: it runs as often as every {gap} s, and your \
             role ({}) now allows at most one run every {} s. Remove it and add a less frequent \
             one if you still need it.",
            job.label(),
            job.spec.describe(),
            caller.role_name,
            limits.min_interval_seconds
        );
        tell(runtime, caller, owner_recipient.cloned(), &text).await;
        return Some(Ended::Stopped(reason));
    }
    let max_jobs = limits.max_jobs;
    let reason = format!(
        "its creator's role ({}) now allows at most {max_jobs} scheduled {} (cron.maxJobs); \
         this is one of the newest beyond that",
        caller.role_name,
        if max_jobs == 1 { "job" } else { "jobs" }
    );
    let (owner, id) = (job.owner.clone(), job.id);
    let swept = blocking(&schedule.store, move |store| {
        let stopped = store.stop_beyond_limit(&owner, max_jobs, &reason)?;
        Ok((stopped, store.get(id)?))
    })
    .await;
    let (stopped, current) = match swept {
        Ok(swept) => swept,
        Err(error) => {
            // The run goes ahead: the limit is checked again at the next run.
            tracing::error!(
                error = format!("{error:#}"),
                "failed to enforce the job limit"
            );
            return None;
        }
    };
    if !stopped.is_empty() {
        let labels: Vec<String> = stopped
            .iter()
            .map(|stopped| format!("{} ({})", stopped.label(), stopped.spec.describe()))
            .collect();
        tracing::warn!(owner = %job.owner, jobs = %labels.join(", "), max_jobs,
            "jobs stopped: more than cron.maxJobs");
        let text = format!(
            "Your role ({}) now allows at most {max_jobs} scheduled {}, so your newest {} \
             stopped: {}. Remove the jobs you no longer need.",
            caller.role_name,
            if max_jobs == 1 { "job" } else { "jobs" },
            if stopped.len() == 1 {
                "job is"
            } else {
                "jobs are"
            },
            labels.join(", ")
        );
        tell(runtime, caller, owner_recipient.cloned(), &text).await;
    }
    match current {
        // Stopped by this sweep or by a run of another of the creator's jobs.
        Some(current) if !current.enabled => Some(Ended::Stopped(
            current
                .disabled_reason
                .unwrap_or_else(|| "stopped".to_string()),
        )),
        // Removed meanwhile: nothing to run.
        None => Some(Ended::Finished("removed".to_string())),
        Some(_) => None,
    }
}

/// The shortest gap in seconds between two runs of `spec` from `from` on, when it is
/// shorter than `min_seconds` allows.
fn runs_too_often(spec: &super::spec::Spec, from: Timestamp, min_seconds: u64) -> Option<u64> {
    match spec.shortest_gap(from) {
        Ok(Some(gap)) if gap < Duration::from_secs(min_seconds) => Some(gap.as_secs()),
        Ok(_) => None,
        Err(error) => {
            tracing::warn!(%error, "the shortest gap of a job's schedule cannot be computed");
            None
        }
    }
}

/// Tells the creator their budget stopped a job, once per budget period (recorded in
/// the store, so not on every run nor again after a restart).
async fn over_budget_notice(
    schedule: &Arc<Schedule>,
    runtime: &Arc<Runtime>,
    caller: &Caller,
    job: &Job,
    owner_recipient: Option<Recipient>,
) {
    let Some(budget) = caller.role.budget.clone() else {
        return;
    };
    // Budgets follow the system calendar, not the scheduling clock.
    let (first, _) = metering::period_days(budget.period, Timestamp::now());
    let period_name = format!("{:?}", budget.period).to_lowercase();
    let period = format!("{period_name}:{first}");
    let owner = caller.slug.clone();
    let first_notice = match blocking(&schedule.store, move |store| {
        store.note_budget_notice(&owner, &period)
    })
    .await
    {
        Ok(first) => first,
        Err(error) => {
            tracing::error!(
                error = format!("{error:#}"),
                "failed to record a budget notice"
            );
            false
        }
    };
    if first_notice {
        let text = format!(
            "Your scheduled job {} ({}) was skipped: your budget for this {period_name} is \
             spent. Your scheduled jobs are skipped until it renews; you will not be told \
             again this {period_name}.",
            job.label(),
            job.spec.describe()
        );
        tell(runtime, caller, owner_recipient, &text).await;
    }
}

/// Queues a notice to `caller` (no model call), logged if it fails.
async fn tell(runtime: &Runtime, caller: &Caller, to: Option<Recipient>, text: &str) {
    let recipients: Vec<Recipient> = to.into_iter().collect();
    if let Err(error) = runtime.notify(caller, &recipients, text).await {
        tracing::warn!(person = %caller.slug, error = %saint_config::ErrorChain(&error), "failed to queue a notice about a job");
    }
}

/// Runs found claimed at start: the process died during them. They are not repeated (a
/// reminder must not come twice); each is logged, recorded as the job's outcome and its
/// creator is told.
async fn recover_interrupted(schedule: &Arc<Schedule>, runtime: &Arc<Runtime>) {
    let outcome = "interrupted: the bot stopped during this run; it is not repeated";
    let interrupted = match blocking(&schedule.store, move |store| {
        store.recover_interrupted(outcome)
    })
    .await
    {
        Ok(jobs) => jobs,
        Err(error) => {
            tracing::error!(
                error = format!("{error:#}"),
                "failed to look for interrupted job runs"
            );
            return;
        }
    };
    let config = runtime.config().current();
    for job in interrupted {
        let due = job
            .running_due
            .map_or_else(|| "?".to_string(), |due| due.to_string());
        tracing::warn!(job = %job.label(), owner = %job.owner, %due, "a job's run was interrupted by a stop; not repeated");
        let Ok(caller) = creator(&config, &job) else {
            continue;
        };
        let next = job
            .next_run
            .map_or_else(|| "none".to_string(), |next| next.to_string());
        let text = format!(
            "Your scheduled job {} ({}) was interrupted by a restart while running (due {due}) \
             and is not repeated. Next run: {next}.",
            job.label(),
            job.spec.describe()
        );
        let recipient = schedule.recipient(&config, &job.owner, Some(&job.owner_identity));
        tell(runtime, &caller, recipient, &text).await;
    }
}
