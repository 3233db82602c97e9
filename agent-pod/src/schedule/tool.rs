//! The `cron` tool: add, list, remove and run-now scheduled jobs.
//!
//! Who may do what, decided here in code:
//! - The policy offers the tool only to roles that allow `cron`; external roles and
//!   strangers are refused even if a role allows it by mistake, a job's own run
//!   (trigger cron) cannot add jobs, and only a contact can (the heartbeat, whose
//!   caller is the bot, cannot: a job runs as the contact who created it).
//! - Per-role limits (`role.cron`): at most `maxJobs` jobs per person, and no schedule
//!   running more often than `minIntervalSeconds` (an interval shorter than that, or a
//!   cron expression with two consecutive runs closer than that, is refused).
//! - A job delivers to its creator by default; to another contact only if the creator's
//!   role may use `message` (and this turn may reach that contact).
//! - Managing others' jobs: a person whose role's `sessionsVisibility` is `all` (the
//!   role that may read every conversation) may list and remove anyone's jobs; everyone
//!   else sees and removes only their own. `run-now` runs only one's own jobs, since a
//!   run is metered to its creator.

use std::{sync::Arc, time::Duration};

use futures::future::BoxFuture;
use jiff::Timestamp;
use saint_config::{BotConfig, SessionsVisibility};
use saint_tools::{Caller, Permit, ToolContext, ToolError, ToolOutput, Trigger, TypedTool, policy};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{
    Schedule,
    jobs::{Added, Job, NewJob, parse_label},
    spec::Spec,
};

/// Longest job text, in characters.
const MAX_TEXT_CHARS: usize = 4_000;

/// The `cron` tool over a [`Schedule`].
pub struct CronTool {
    schedule: Arc<Schedule>,
}

impl CronTool {
    /// The tool over `schedule`.
    pub fn new(schedule: Arc<Schedule>) -> Self {
        Self { schedule }
    }
}

/// What to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CronAction {
    /// Schedule a new job.
    Add,
    /// Show jobs.
    List,
    /// Delete a job.
    Remove,
    /// Run one of your jobs now, once (its schedule is unchanged).
    #[serde(alias = "run_now", alias = "runNow")]
    RunNow,
}

/// What `cron` takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CronInput {
    /// add, list, remove or run-now
    pub action: CronAction,
    /// add: when it runs — a five-field cron expression (`minute hour day-of-month month
    /// day-of-week`, e.g. `0 9 * * *` for daily at 9:00, `0 9 * * MON`, or
    /// `@daily`/`@hourly`/`@weekly`/`@monthly`), `at <RFC 3339 time>` for once, or
    /// `every <N> minutes|hours|days` — a fixed interval counted from now, not clock time
    /// (`every 1 day` added at 14:20 runs at 14:20 and drifts by an hour across a DST
    /// change; for a time of day use a cron expression)
    pub schedule: Option<String>,
    /// add: IANA time zone of the cron expression or of an `at` time without an offset
    /// (default: the bot's); refused with `every` and with an `at` time that carries its
    /// own offset
    pub timezone: Option<String>,
    /// add: what to do each time, written as the instruction you will receive then
    #[serde(alias = "task", alias = "prompt")]
    pub text: Option<String>,
    /// add: the contact (slug or name) who receives the result; default: the person
    /// asking, on their channel
    #[serde(alias = "deliverTo", alias = "to")]
    pub deliver_to: Option<String>,
    /// remove, run-now: the job's id (`job-3`)
    #[serde(alias = "job", alias = "jobId")]
    pub id: Option<String>,
}

impl TypedTool for CronTool {
    type Input = CronInput;
    const NAME: &'static str = "cron";
    const DESCRIPTION: &'static str = "Schedule work to run later as the person asking: `add` a job (schedule + text; \
         the result is sent to them, or to `deliver_to`), `list` jobs, `remove` a job, or \
         `run-now` a job once. Each run is a separate turn with that person's role; nobody \
         reads it live. For a time of day use a cron expression (daily at 9: `0 9 * * *`); \
         `every N days` is a fixed interval from now, not a time of day.";

    fn run<'a>(
        &'a self,
        _permit: &'a Permit,
        context: &'a ToolContext,
        input: CronInput,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let caller = &context.caller;
            if caller.role.external || !caller.known {
                return Err(ToolError::Denied(
                    "scheduled jobs are only for internal contacts".to_string(),
                ));
            }
            check_fields(&input)?;
            match input.action {
                CronAction::Add => self.add(context, input).await,
                CronAction::List => self.list(caller, &context.config).await,
                CronAction::Remove => self.remove(caller, input.id.as_deref()).await,
                CronAction::RunNow => self.run_now(caller, input.id.as_deref()).await,
            }
        })
    }
}

/// Whether `caller` may list and remove other people's jobs: their role may see every
/// session (`sessionsVisibility: all`).
pub fn manages_all_jobs(caller: &Caller) -> bool {
    caller.role.sessions_visibility == SessionsVisibility::All
}

fn store_error(error: impl std::fmt::Display) -> ToolError {
    tracing::error!(%error, "job store failed");
    ToolError::Failed("the job store is unavailable".to_string())
}

fn required<'a>(value: &'a Option<String>, field: &str) -> Result<&'a str, ToolError> {
    value
        .as_deref()
        .map(str::trim)
        .filter(|value| !value.is_empty())
        .ok_or_else(|| ToolError::InvalidInput(format!("{field}: required for add")))
}

impl CronTool {
    async fn add(&self, context: &ToolContext, input: CronInput) -> Result<ToolOutput, ToolError> {
        let caller = &context.caller;
        let config = &context.config;
        if caller.trigger == Trigger::Cron {
            return Err(ToolError::Denied(
                "a scheduled job cannot schedule jobs".to_string(),
            ));
        }
        // A job runs as its creator, found among the contacts at each run: the bot's own
        // work (the heartbeat) has no contact to run as.
        if !config
            .contacts
            .iter()
            .any(|contact| contact.slug == caller.slug)
        {
            return Err(ToolError::Denied(
                "only a contact of the bot can schedule jobs (a job runs as the person who created it)"
                    .to_string(),
            ));
        }
        let schedule_text = required(&input.schedule, "schedule")?;
        let text = required(&input.text, "text")?;
        if text.chars().count() > MAX_TEXT_CHARS {
            return Err(ToolError::InvalidInput(format!(
                "text: longer than {MAX_TEXT_CHARS} characters"
            )));
        }
        check_timezone(schedule_text, input.timezone.as_deref())?;
        let timezone = input
            .timezone
            .as_deref()
            .map(str::trim)
            .filter(|zone| !zone.is_empty())
            .unwrap_or(&config.schedule.timezone);
        let now = self.schedule.clock().now();
        let spec = Spec::parse(schedule_text, timezone, now)
            .map_err(|error| ToolError::InvalidInput(error.0))?;
        check_interval(&spec, now, caller.role.cron.min_interval_seconds)?;
        let next_run = spec
            .next_after(now)
            .map_err(|error| ToolError::InvalidInput(error.0))?
            .ok_or_else(|| {
                ToolError::InvalidInput(format!(
                    "schedule: {} is not in the future (it is {now} now)",
                    spec.describe()
                ))
            })?;
        let (deliver_to, deliver_identity) = match input.deliver_to.as_deref().map(str::trim) {
            None | Some("") => (None, None),
            Some(to) => match other_recipient(config, caller, to)? {
                Some((slug, identity)) => (Some(slug), Some(identity)),
                None => (None, None),
            },
        };
        let job = NewJob {
            owner: caller.slug.clone(),
            owner_role: caller.role_name.clone(),
            owner_identity: caller.identity.clone(),
            spec: spec.clone(),
            text: text.to_string(),
            deliver_to: deliver_to.clone(),
            deliver_identity: deliver_identity.clone(),
            next_run,
        };
        let max_jobs = caller.role.cron.max_jobs;
        let store = self.schedule.store.clone();
        let added = tokio::task::spawn_blocking(move || store.add(&job, max_jobs))
            .await
            .map_err(store_error)?
            .map_err(store_error)?;
        let id = match added {
            Added::Stored(id) => id,
            Added::AtLimit(count) => {
                return Err(ToolError::Denied(format!(
                    "you already have {count} scheduled {}, the most your role ({}) allows; remove one first",
                    if count == 1 { "job" } else { "jobs" },
                    caller.role_name
                )));
            }
        };
        self.schedule.wake.notify_one();
        let delivery = self.schedule.describe_delivery(
            config,
            caller,
            deliver_to.as_deref(),
            deliver_identity.as_deref(),
            id,
        );
        tracing::info!(job = id, owner = %caller.slug, schedule = %spec.describe(), "job added");
        Ok(ToolOutput::text(format!(
            "Scheduled {}: {}; next run {}. {delivery}",
            super::jobs::label(id),
            spec.describe(),
            local_time(next_run, &spec, config),
        )))
    }

    async fn list(&self, caller: &Caller, config: &BotConfig) -> Result<ToolOutput, ToolError> {
        let all = manages_all_jobs(caller);
        let owner = (!all).then(|| caller.slug.clone());
        let store = self.schedule.store.clone();
        let jobs = tokio::task::spawn_blocking(move || store.list(owner.as_deref()))
            .await
            .map_err(store_error)?
            .map_err(store_error)?;
        if jobs.is_empty() {
            return Ok(ToolOutput::text(if all {
                "No scheduled jobs."
            } else {
                "You have no scheduled jobs."
            }));
        }
        Ok(ToolOutput::text(listing(&jobs, all, config)))
    }

    /// The job `id` if `caller` may manage it (their own, or anyone's for a role that
    /// manages all jobs); others' jobs are "not found", so their existence is not told.
    async fn job_for(
        &self,
        caller: &Caller,
        id: Option<&str>,
        others_too: bool,
    ) -> Result<Job, ToolError> {
        let text = id
            .map(str::trim)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| ToolError::InvalidInput("id: required (e.g. job-3)".to_string()))?;
        let id = parse_label(text)
            .ok_or_else(|| ToolError::InvalidInput(format!("id: {text:?} is not a job id")))?;
        let store = self.schedule.store.clone();
        let job = tokio::task::spawn_blocking(move || store.get(id))
            .await
            .map_err(store_error)?
            .map_err(store_error)?;
        job.filter(|job| job.owner == caller.slug || others_too)
            .ok_or_else(|| ToolError::NotFound(format!("no job {text} of yours")))
    }

    async fn remove(&self, caller: &Caller, id: Option<&str>) -> Result<ToolOutput, ToolError> {
        let job = self.job_for(caller, id, manages_all_jobs(caller)).await?;
        let store = self.schedule.store.clone();
        let id = job.id;
        tokio::task::spawn_blocking(move || store.remove(id))
            .await
            .map_err(store_error)?
            .map_err(store_error)?;
        self.schedule.wake.notify_one();
        tracing::info!(job = id, owner = %job.owner, by = %caller.slug, "job removed");
        Ok(ToolOutput::text(format!(
            "Removed {} ({}, {}).",
            job.label(),
            job.spec.describe(),
            if job.owner == caller.slug {
                "yours".to_string()
            } else {
                format!("created by {}", job.owner)
            }
        )))
    }

    async fn run_now(&self, caller: &Caller, id: Option<&str>) -> Result<ToolOutput, ToolError> {
        if caller.trigger == Trigger::Cron {
            return Err(ToolError::Denied(
                "a scheduled job cannot start jobs".to_string(),
            ));
        }
        let job = self.job_for(caller, id, false).await?;
        if !job.enabled {
            return Err(ToolError::Denied(format!(
                "{} is stopped: {}",
                job.label(),
                job.disabled_reason.as_deref().unwrap_or("disabled")
            )));
        }
        let store = self.schedule.store.clone();
        let (id, now) = (job.id, self.schedule.clock().now());
        let queued = tokio::task::spawn_blocking(move || store.due_now(id, now))
            .await
            .map_err(store_error)?
            .map_err(store_error)?;
        if !queued {
            return Err(ToolError::Denied(format!(
                "{} is running right now",
                job.label()
            )));
        }
        self.schedule.wake.notify_one();
        Ok(ToolOutput::text(format!(
            "{} runs now, once; its schedule is unchanged. Its result is delivered as usual.",
            job.label()
        )))
    }
}

/// The most jobs `list` shows; the rest are counted, not shown.
const LIST_LIMIT: usize = 50;

/// The `list` answer for `jobs` (in the store's order: active ones first): at most
/// [`LIST_LIMIT`] lines, then a count of what is left out.
fn listing(jobs: &[Job], show_owner: bool, config: &BotConfig) -> String {
    let mut lines: Vec<String> = jobs
        .iter()
        .take(LIST_LIMIT)
        .map(|job| describe_job(job, show_owner, config))
        .collect();
    let omitted = &jobs[jobs.len().min(LIST_LIMIT)..];
    if !omitted.is_empty() {
        let active = omitted.iter().filter(|job| job.is_active()).count();
        lines.push(format!(
            "... and {} more not shown ({active} active, {} stopped or done); remove the ones \
             no longer needed",
            omitted.len(),
            omitted.len() - active
        ));
    }
    lines.join("\n")
}

/// Refuses a timezone the schedule does not read (an interval, or an `at` time with its
/// own offset), rather than ignoring it.
fn check_timezone(schedule: &str, timezone: Option<&str>) -> Result<(), ToolError> {
    if timezone.is_some_and(|zone| !zone.trim().is_empty())
        && let Some(why) = super::spec::ignores_timezone(schedule)
    {
        return Err(ToolError::InvalidInput(format!(
            "timezone: not used by this schedule ({why}); leave timezone out"
        )));
    }
    Ok(())
}

/// Refuses a field the action does not use, rather than ignoring what the model meant.
fn check_fields(input: &CronInput) -> Result<(), ToolError> {
    let given = |value: &Option<String>| {
        value
            .as_deref()
            .is_some_and(|value| !value.trim().is_empty())
    };
    let fields = [
        (
            "schedule",
            given(&input.schedule),
            input.action == CronAction::Add,
        ),
        (
            "timezone",
            given(&input.timezone),
            input.action == CronAction::Add,
        ),
        ("text", given(&input.text), input.action == CronAction::Add),
        (
            "deliver_to",
            given(&input.deliver_to),
            input.action == CronAction::Add,
        ),
        (
            "id",
            given(&input.id),
            matches!(input.action, CronAction::Remove | CronAction::RunNow),
        ),
    ];
    match fields.iter().find(|(_, given, used)| *given && !*used) {
        Some((field, _, _)) => Err(ToolError::InvalidInput(format!(
            "{field}: not used by {}",
            match input.action {
                CronAction::Add => "add",
                CronAction::List => "list",
                CronAction::Remove => "remove",
                CronAction::RunNow => "run-now",
            }
        ))),
        None => Ok(()),
    }
}

/// Refuses a schedule that runs more often than `min_seconds` allows.
fn check_interval(spec: &Spec, now: Timestamp, min_seconds: u64) -> Result<(), ToolError> {
    let shortest = spec
        .shortest_gap(now)
        .map_err(|error| ToolError::InvalidInput(error.0))?;
    match shortest {
        Some(gap) if gap < Duration::from_secs(min_seconds) => Err(ToolError::Denied(format!(
            "schedule: {} runs as often as every {} s; your role allows at most one run every {min_seconds} s",
            spec.describe(),
            gap.as_secs()
        ))),
        _ => Ok(()),
    }
}

/// The contact `to` a job of `caller` may deliver to: `None` when it is the caller
/// themself; refused unless their role may `message` (and this turn may reach them).
fn other_recipient(
    config: &BotConfig,
    caller: &Caller,
    to: &str,
) -> Result<Option<(String, String)>, ToolError> {
    let (contact, _channel, identity) =
        saint_tools::message::route(config, to, None).map_err(|error| match error {
            ToolError::Denied(message) | ToolError::InvalidInput(message) => {
                ToolError::InvalidInput(format!("deliver_to: {message}"))
            }
            other => other,
        })?;
    if contact.slug == caller.slug {
        return Ok(None);
    }
    if !policy::tool_allowed(&caller.role, "message") {
        return Err(ToolError::Denied(format!(
            "deliver_to: your role ({}) may not message other people, so a job cannot deliver to {}",
            caller.role_name, contact.name
        )));
    }
    if let Some(allowed) = &caller.may_message
        && !allowed.iter().any(|slug| contact.slug == *slug)
    {
        return Err(ToolError::Denied(format!(
            "deliver_to: this turn may not message {}",
            contact.name
        )));
    }
    Ok(Some((contact.slug.to_string(), identity)))
}

/// `at` in the job's own time zone (cron) or the bot's.
fn local_time(at: Timestamp, spec: &Spec, config: &BotConfig) -> String {
    let zone = match spec {
        Spec::Cron { timezone, .. } => timezone.as_str(),
        _ => config.schedule.timezone.as_str(),
    };
    match jiff::tz::TimeZone::get(zone) {
        Ok(zone) => at.to_zoned(zone).strftime("%Y-%m-%d %H:%M %Z").to_string(),
        Err(_) => at.to_string(),
    }
}

fn describe_job(job: &Job, show_owner: bool, config: &BotConfig) -> String {
    let mut line = format!("{}: {}", job.label(), job.spec.describe());
    if show_owner {
        line.push_str(&format!("; created by {} ({})", job.owner, job.owner_role));
    }
    if let Some(to) = &job.deliver_to {
        line.push_str(&format!("; delivers to {to}"));
    }
    if !job.enabled {
        line.push_str(&format!(
            "; STOPPED: {}",
            job.disabled_reason.as_deref().unwrap_or("disabled")
        ));
    } else if job.running_due.is_some() {
        line.push_str("; running now");
    } else if let Some(next) = job.next_run {
        line.push_str(&format!(
            "; next run {}",
            local_time(next, &job.spec, config)
        ));
    } else {
        line.push_str("; done (no further runs)");
    }
    if let (Some(last), Some(outcome)) = (job.last_run, &job.last_outcome) {
        line.push_str(&format!("; last run {last}: {outcome}"));
    } else if let Some(outcome) = &job.last_outcome {
        line.push_str(&format!("; {outcome}"));
    }
    let preview: String = job.text.chars().take(80).collect();
    line.push_str(&format!("; text: {preview:?}"));
    line
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(text: &str) -> Spec {
        Spec::parse(text, "Europe/Zagreb", now()).unwrap()
    }

    fn now() -> Timestamp {
        "2026-03-02T07:00:00Z".parse().unwrap()
    }

    #[test]
    fn the_minimum_interval_is_checked_for_intervals_and_consecutive_cron_runs() {
        assert!(check_interval(&spec("every 5 minutes"), now(), 300).is_ok());
        let error = check_interval(&spec("every 4 minutes"), now(), 300).unwrap_err();
        assert_eq!(
            error,
            ToolError::Denied(
                "schedule: every 4 minutes runs as often as every 240 s; your role allows at \
                 most one run every 300 s"
                    .to_string()
            )
        );
        assert!(check_interval(&spec("*/5 * * * *"), now(), 300).is_ok());
        assert!(check_interval(&spec("*/4 * * * *"), now(), 300).is_err());
        // Hourly most of the day, but two runs five minutes apart once a day.
        assert!(check_interval(&spec("0,5 9 * * *"), now(), 600).is_err());
        assert!(check_interval(&spec("@hourly"), now(), 3_600).is_ok());
        assert!(check_interval(&spec("@hourly"), now(), 3_601).is_err());
        // Once is never too often.
        assert!(check_interval(&spec("at 2026-03-03T09:00:00Z"), now(), u64::MAX).is_ok());
    }

    #[test]
    fn a_timezone_the_schedule_does_not_read_is_refused_by_name() {
        for schedule in [
            "every 1 day",
            "EVERY 2 hours",
            "at 2026-03-03T09:00:00+01:00",
            "2026-03-03T08:00:00Z",
        ] {
            let error = check_timezone(schedule, Some("Europe/Zagreb")).unwrap_err();
            assert!(
                matches!(&error, ToolError::InvalidInput(message) if message.starts_with("timezone: not used by this schedule")),
                "{schedule}: {error:?}"
            );
            assert!(check_timezone(schedule, None).is_ok(), "{schedule}");
            assert!(check_timezone(schedule, Some(" ")).is_ok(), "{schedule}");
        }
        for schedule in [
            "0 9 * * *",
            "@daily",
            "at 2026-03-03T09:00",
            "2026-03-03T09:00",
        ] {
            assert!(
                check_timezone(schedule, Some("Europe/Zagreb")).is_ok(),
                "{schedule}"
            );
        }
    }

    #[test]
    fn a_long_listing_is_cut_with_a_count_of_what_is_left_out() {
        let config = saint_config::BotConfig::from_json(include_str!(
            "../../config/tests/fixtures/acme-bot-config.json"
        ))
        .unwrap();
        let job = |id: i64, enabled: bool| Job {
            id,
            owner: "ivan".to_string(),
            owner_role: "employee".to_string(),
            owner_identity: "telegram:333333333".to_string(),
            spec: spec("@daily"),
            text: format!("task {id}"),
            deliver_to: None,
            deliver_identity: None,
            enabled,
            disabled_reason: (!enabled).then(|| "stopped".to_string()),
            next_run: Some(now()),
            running_due: None,
            last_run: None,
            last_outcome: None,
            created_at: String::new(),
        };
        let short: Vec<Job> = (1..=3).map(|id| job(id, true)).collect();
        assert_eq!(listing(&short, false, &config).lines().count(), 3);
        let long: Vec<Job> = (1..=60).map(|id| job(id, id <= 55)).collect();
        let text = listing(&long, false, &config);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), LIST_LIMIT + 1, "{text}");
        assert!(lines[0].starts_with("job-1: "), "{text}");
        assert_eq!(
            lines[LIST_LIMIT],
            "... and 10 more not shown (5 active, 5 stopped or done); remove the ones no \
             longer needed"
        );
    }

    #[test]
    fn a_field_the_action_does_not_use_is_refused_by_name() {
        let input =
            |value: serde_json::Value| -> CronInput { saint_tools::typed::decode(value).unwrap() };
        assert_eq!(
            check_fields(&input(json!({"action": "list", "id": "job-1"}))),
            Err(ToolError::InvalidInput("id: not used by list".to_string()))
        );
        assert_eq!(
            check_fields(&input(
                json!({"action": "remove", "id": "job-1", "text": "x"})
            )),
            Err(ToolError::InvalidInput(
                "text: not used by remove".to_string()
            ))
        );
        assert!(
            check_fields(&input(
                json!({"action": "run_now", "id": "job-1", "text": ""})
            ))
            .is_ok()
        );
        assert!(
            check_fields(&input(
                json!({"action": "add", "schedule": "@daily", "text": "x", "deliver_to": "ana"})
            ))
            .is_ok()
        );
        let unknown = saint_tools::typed::decode::<CronInput>(json!({"action": "pause"}));
        assert!(
            matches!(&unknown, Err(ToolError::InvalidInput(message)) if message.starts_with("action:")),
            "{unknown:?}"
        );
    }

    #[tokio::test]
    async fn the_heartbeat_cannot_add_jobs_and_a_contact_can() {
        let directory = tempfile::tempdir().unwrap();
        let workspace = directory.path();
        let config = Arc::new(
            saint_config::BotConfig::from_json(include_str!(
                "../../config/tests/fixtures/acme-bot-config.json"
            ))
            .unwrap(),
        );
        let store = Arc::new(
            crate::session::SessionStore::open(workspace.join("sessions/t.sqlite3")).unwrap(),
        );
        let metering = Arc::new(crate::metering::Metering::open(workspace).unwrap());
        let hub = Arc::new(crate::channel::hub::ChannelHub::from_config(
            &config,
            None,
            &|_| None,
            store.clone(),
            metering,
            workspace,
        ));
        let clock = Arc::new(crate::clock::Clock::from_env(|_| None).unwrap());
        let schedule = Schedule::open(workspace, hub, clock).unwrap();
        let tool = schedule.tool().unwrap();
        let add = json!({"action": "add", "schedule": "@daily", "text": "Check the inbox."});
        let call = |caller: Caller| {
            let (tool, add, config) = (tool.clone(), add.clone(), config.clone());
            async move {
                let permit = policy::permit(&caller, tool.as_ref(), false).unwrap();
                let context = ToolContext {
                    caller,
                    workspace: workspace.to_path_buf(),
                    config,
                };
                tool.call(&permit, &context, add).await
            }
        };
        // The owner role allows cron (group:automation); as the heartbeat's role it still
        // has no contact to run jobs as.
        let heartbeat = crate::identity::caller_for_heartbeat(&config, "owner", &[]).unwrap();
        let refused = call(heartbeat).await.unwrap_err();
        assert!(
            matches!(&refused, ToolError::Denied(message) if message.starts_with("only a contact")),
            "{refused:?}"
        );
        let ana = crate::identity::caller_for_contact(
            &config,
            "ana",
            None,
            "person:ana".to_string(),
            Trigger::Message,
        )
        .unwrap();
        let added = call(ana).await.unwrap();
        assert!(
            added
                .content
                .starts_with("Scheduled job-1: cron `@daily` (UTC)"),
            "{added:?}"
        );
        // The fixture serves no channel that can start a conversation.
        assert!(
            added.content.contains("kept in the job's own session only"),
            "{added:?}"
        );
    }

    #[test]
    fn only_a_role_that_sees_every_session_manages_everyones_jobs() {
        let config = saint_config::BotConfig::from_json(include_str!(
            "../../config/tests/fixtures/acme-bot-config.json"
        ))
        .unwrap();
        let caller = |slug: &str| {
            crate::identity::caller_for_contact(
                &config,
                slug,
                None,
                String::new(),
                Trigger::Message,
            )
            .unwrap()
        };
        assert!(
            manages_all_jobs(&caller("ana")),
            "owner: sessionsVisibility all"
        );
        assert!(
            !manages_all_jobs(&caller("marko")),
            "manager: own and employees'"
        );
        assert!(!manages_all_jobs(&caller("ivan")));
    }
}
