//! When a job runs: a five-field cron expression in a time zone, one time ("at"), or a
//! fixed interval ("every"). Parsing names the part that is wrong; the next due time is
//! computed from the schedule alone, so a job never runs more than once per due time.
//!
//! Pure: no I/O, no clock of its own (callers pass "now").

use std::time::Duration;

use croner::{
    Cron,
    parser::{CronParser, Seconds, Year},
};
use jiff::{Timestamp, tz::TimeZone};
use serde::{Deserialize, Serialize};

/// A job's schedule, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Spec {
    /// A five-field cron expression (`minute hour day-of-month month day-of-week`, or an
    /// alias such as `@daily`) read in `timezone`.
    Cron {
        /// The expression as given (aliases kept).
        expression: String,
        /// IANA time zone the fields are read in.
        timezone: String,
    },
    /// Once, at this instant.
    At {
        /// When.
        at: Timestamp,
    },
    /// Every `seconds`, counted from `anchor` (when the job was added), so the runs do not
    /// drift however late each one starts.
    Every {
        /// The interval.
        seconds: u64,
        /// The instant the intervals are counted from.
        anchor: Timestamp,
    },
}

/// Why a schedule is refused; the message names the part that is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

/// The cron fields, in order, as people call them.
const FIELDS: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];

/// The aliases accepted instead of five fields (what each means is croner's, the usual one).
const ALIASES: [&str; 6] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@hourly",
];

/// How far ahead occurrences are examined for the shortest gap between two runs: every
/// pattern repeats within a year, except leap-day ones, whose gaps are years long anyway.
const GAP_HORIZON: Duration = Duration::from_secs(400 * 24 * 3600);

/// At most this many occurrences are examined for the shortest gap.
const GAP_SAMPLES: usize = 2_000;

impl Spec {
    /// Reads `text`: `at <RFC 3339 time>` (a local time without offset is read in
    /// `timezone`), `every <N> minutes|hours|days`, or a five-field cron expression or
    /// alias read in `timezone`. `now` anchors intervals.
    pub fn parse(text: &str, timezone: &str, now: Timestamp) -> Result<Spec, SpecError> {
        let text = text.trim();
        let zone = TimeZone::get(timezone)
            .map_err(|_| SpecError(format!("timezone: {timezone:?} is not an IANA time zone")))?;
        let lower = text.to_ascii_lowercase();
        if let Some(rest) = lower.strip_prefix("at ") {
            return parse_at(rest.trim(), &zone).map(|at| Spec::At { at });
        }
        if let Ok(at) = parse_at(text, &zone) {
            return Ok(Spec::At { at });
        }
        if let Some(rest) = lower.strip_prefix("every ") {
            let seconds = parse_every(rest.trim())?;
            return Ok(Spec::Every {
                seconds,
                anchor: now,
            });
        }
        parse_cron(text)?;
        Ok(Spec::Cron {
            expression: text.to_string(),
            timezone: timezone.to_string(),
        })
    }

    /// The first due time strictly after `after`; `None` when there is none (a one-time
    /// job whose time has passed).
    pub fn next_after(&self, after: Timestamp) -> Result<Option<Timestamp>, SpecError> {
        match self {
            Spec::Cron {
                expression,
                timezone,
            } => {
                let cron = parse_cron(expression)?;
                let zone = TimeZone::get(timezone)
                    .map_err(|_| SpecError(format!("timezone {timezone:?} is unknown")))?;
                next_cron(&cron, &after.to_zoned(zone))
            }
            Spec::At { at } => Ok((*at > after).then_some(*at)),
            Spec::Every { seconds, anchor } => {
                let step = i64::try_from(*seconds).unwrap_or(i64::MAX).max(1);
                let elapsed = after.as_second() - anchor.as_second();
                let periods = if elapsed < 0 { 1 } else { elapsed / step + 1 };
                let next = anchor
                    .as_second()
                    .saturating_add(periods.saturating_mul(step));
                Timestamp::from_second(next)
                    .map(Some)
                    .map_err(|_| SpecError("the next run is out of range".to_string()))
            }
        }
    }

    /// The newest due time at or before `now` (`None`: none yet).
    pub fn latest_at_or_before(&self, now: Timestamp) -> Result<Option<Timestamp>, SpecError> {
        match self {
            Spec::Cron {
                expression,
                timezone,
            } => {
                let cron = parse_cron(expression)?;
                let zone = TimeZone::get(timezone)
                    .map_err(|_| SpecError(format!("timezone {timezone:?} is unknown")))?;
                match cron.find_previous_occurrence(&now.to_zoned(zone), true) {
                    Ok(previous) => Ok(Some(previous.timestamp())),
                    Err(croner::errors::CronError::TimeSearchLimitExceeded) => Ok(None),
                    Err(error) => Err(SpecError(format!("schedule: {error}"))),
                }
            }
            Spec::At { at } => Ok((*at <= now).then_some(*at)),
            Spec::Every { seconds, anchor } => {
                let step = i64::try_from(*seconds).unwrap_or(i64::MAX).max(1);
                let periods = (now.as_second() - anchor.as_second()) / step;
                if periods < 1 {
                    return Ok(None);
                }
                Timestamp::from_second(anchor.as_second().saturating_add(periods * step))
                    .map(Some)
                    .map_err(|_| SpecError("the last run is out of range".to_string()))
            }
        }
    }

    /// The shortest time between two consecutive runs from `from` on (`None`: it runs
    /// at most once).
    pub fn shortest_gap(&self, from: Timestamp) -> Result<Option<Duration>, SpecError> {
        match self {
            Spec::At { .. } => Ok(None),
            Spec::Every { seconds, .. } => Ok(Some(Duration::from_secs(*seconds))),
            Spec::Cron { .. } => {
                let horizon = from
                    .checked_add(GAP_HORIZON)
                    .map_err(|_| SpecError("time out of range".to_string()))?;
                let mut shortest: Option<Duration> = None;
                let Some(mut previous) = self.next_after(from)? else {
                    return Ok(None);
                };
                for _ in 0..GAP_SAMPLES {
                    let Some(next) = self.next_after(previous)? else {
                        break;
                    };
                    let gap = Duration::from_secs((next.as_second() - previous.as_second()) as u64);
                    shortest = Some(shortest.map_or(gap, |shortest| shortest.min(gap)));
                    if next > horizon || gap.as_secs() <= 60 {
                        // A minute is as short as five fields go.
                        break;
                    }
                    previous = next;
                }
                Ok(shortest)
            }
        }
    }

    /// The schedule in words, for the model and `list`.
    pub fn describe(&self) -> String {
        match self {
            Spec::Cron {
                expression,
                timezone,
            } => format!("cron `{expression}` ({timezone})"),
            Spec::At { at } => format!("once at {at}"),
            Spec::Every { seconds, .. } => format!("every {}", describe_seconds(*seconds)),
        }
    }

    /// Whether the job runs once only.
    pub fn is_one_time(&self) -> bool {
        matches!(self, Spec::At { .. })
    }
}

/// Why the schedule `text` does not read a time zone, if it does not: an interval
/// counts fixed time, and an `at` time with an offset (or `Z`) names its instant.
pub fn ignores_timezone(text: &str) -> Option<&'static str> {
    let text = text.trim();
    let lower = text.to_ascii_lowercase();
    if lower.starts_with("every ") {
        return Some("an `every` interval counts fixed time from now, not clock time");
    }
    let at = lower.strip_prefix("at ").map_or(text, |_| text[3..].trim());
    at.parse::<Timestamp>()
        .is_ok()
        .then_some("the `at` time carries its own UTC offset")
}

/// What to do with a run whose due time has passed by the time it is looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CatchUp {
    /// Run it now (once, however many due times were missed).
    Run,
    /// Skip it: it came due while the bot was down, more than the grace period ago; the
    /// job goes on at its next future time.
    Skip,
}

/// The missed-run policy for a run due at `due`, looked at `now`, by a process that
/// started at `started`:
/// - due while the bot was running (`due >= started`): it runs, however late the loop
///   gets to it (a busy run slot, a late wake-up) — the grace is not about those;
/// - due before the start (missed while the bot was down): it runs if it is at most
///   `grace` late, else it is skipped; a grace of zero makes none of those up.
///
/// The caller then computes the next due time from `now`, never from `due`, so missed
/// runs never come as a burst.
pub fn catch_up(due: Timestamp, now: Timestamp, started: Timestamp, grace: Duration) -> CatchUp {
    if due >= started {
        return CatchUp::Run;
    }
    let late = now.as_millisecond().saturating_sub(due.as_millisecond());
    if late <= i64::try_from(grace.as_millis()).unwrap_or(i64::MAX) {
        CatchUp::Run
    } else {
        CatchUp::Skip
    }
}

/// What the scheduler does with a job found due: its stored due time is `stored`, the
/// time is `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Run or skip.
    pub catch_up: CatchUp,
    /// The due time run or skipped: the newest one that has passed (after an outage
    /// several may have; they are one run at most).
    pub due: Timestamp,
    /// The next due time after `now` (`None`: the job is done).
    pub next: Option<Timestamp>,
}

/// Applies the missed-run policy ([`catch_up`]) to the newest due time that has passed.
pub fn decide(
    spec: &Spec,
    stored: Timestamp,
    now: Timestamp,
    started: Timestamp,
    grace: Duration,
) -> Result<Decision, SpecError> {
    let due = spec
        .latest_at_or_before(now)?
        .filter(|latest| *latest >= stored)
        .unwrap_or(stored);
    Ok(Decision {
        catch_up: catch_up(due, now, started, grace),
        due,
        next: spec.next_after(now)?,
    })
}

fn parse_at(text: &str, zone: &TimeZone) -> Result<Timestamp, SpecError> {
    if let Ok(at) = text.parse::<Timestamp>() {
        return Ok(at);
    }
    let civil: jiff::civil::DateTime = text.parse().map_err(|_| {
        SpecError(format!(
            "schedule: {text:?} is not a time (use RFC 3339, e.g. 2026-03-02T09:00:00+01:00)"
        ))
    })?;
    civil
        .to_zoned(zone.clone())
        .map(|zoned| zoned.timestamp())
        .map_err(|error| SpecError(format!("schedule: {text:?}: {error}")))
}

fn parse_every(text: &str) -> Result<u64, SpecError> {
    let refuse = || {
        SpecError(format!(
            "schedule: \"every {text}\" is not an interval (use e.g. `every 30 minutes`, `every 2 hours`, `every 1 day`)"
        ))
    };
    let mut words = text.split_whitespace();
    let (count, unit) = match (words.next(), words.next(), words.next()) {
        (Some(count), Some(unit), None) => (count.parse::<u64>().map_err(|_| refuse())?, unit),
        // `every hour`
        (Some(unit), None, None) => (1, unit),
        _ => return Err(refuse()),
    };
    let unit_seconds = match unit {
        "minute" | "minutes" | "min" | "mins" => 60,
        "hour" | "hours" | "h" => 3_600,
        "day" | "days" | "d" => 86_400,
        _ => return Err(refuse()),
    };
    if count == 0 {
        return Err(SpecError(
            "schedule: an interval must be longer than zero".to_string(),
        ));
    }
    count.checked_mul(unit_seconds).ok_or_else(refuse)
}

fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
}

/// A five-field expression or an alias. A malformed one is refused naming the field that
/// is wrong (each field is tried alone with the others `*`).
fn parse_cron(expression: &str) -> Result<Cron, SpecError> {
    let trimmed = expression.trim();
    if trimmed.starts_with('@') {
        let alias = trimmed.to_ascii_lowercase();
        if !ALIASES.contains(&alias.as_str()) {
            return Err(SpecError(format!(
                "schedule: {trimmed:?} is not a known alias (use one of {})",
                ALIASES.join(", ")
            )));
        }
        return parser()
            .parse(&alias)
            .map_err(|error| SpecError(format!("schedule: {trimmed:?}: {error}")));
    }
    let fields: Vec<&str> = trimmed.split_whitespace().collect();
    if fields.len() != FIELDS.len() {
        return Err(SpecError(format!(
            "schedule: a cron expression has five fields ({}); {trimmed:?} has {} \
             (seconds and years are not supported)",
            FIELDS.join(" "),
            fields.len()
        )));
    }
    parser().parse(trimmed).map_err(|error| {
        let field = (0..FIELDS.len()).find(|&index| {
            let alone: Vec<&str> = (0..FIELDS.len())
                .map(|other| if other == index { fields[index] } else { "*" })
                .collect();
            parser().parse(&alone.join(" ")).is_err()
        });
        match field {
            Some(index) => SpecError(format!(
                "schedule: the {} field {:?} is invalid ({error})",
                FIELDS[index], fields[index]
            )),
            None => SpecError(format!("schedule: {trimmed:?} is invalid ({error})")),
        }
    })
}

fn next_cron(cron: &Cron, after: &jiff::Zoned) -> Result<Option<Timestamp>, SpecError> {
    match cron.find_next_occurrence(after, false) {
        Ok(next) => Ok(Some(next.timestamp())),
        Err(croner::errors::CronError::TimeSearchLimitExceeded) => Ok(None),
        Err(error) => Err(SpecError(format!("schedule: {error}"))),
    }
}

fn describe_seconds(seconds: u64) -> String {
    let (count, unit) = if seconds.is_multiple_of(86_400) {
        (seconds / 86_400, "day")
    } else if seconds.is_multiple_of(3_600) {
        (seconds / 3_600, "hour")
    } else if seconds.is_multiple_of(60) {
        (seconds / 60, "minute")
    } else {
        (seconds, "second")
    };
    if count == 1 {
        unit.to_string()
    } else {
        format!("{count} {unit}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn zagreb(expression: &str) -> Spec {
        Spec::parse(expression, "Europe/Zagreb", at("2026-01-01T00:00:00Z")).unwrap()
    }

    #[test]
    fn a_weekly_cron_follows_zagreb_local_time_across_both_dst_changes() {
        let monday_nine = zagreb("0 9 * * MON");
        // Winter: 09:00 CET is 08:00 UTC.
        assert_eq!(
            monday_nine.next_after(at("2026-03-20T00:00:00Z")).unwrap(),
            Some(at("2026-03-23T08:00:00Z"))
        );
        // DST starts on 2026-03-29: 09:00 CEST is 07:00 UTC the next Monday.
        assert_eq!(
            monday_nine.next_after(at("2026-03-23T08:00:00Z")).unwrap(),
            Some(at("2026-03-30T07:00:00Z"))
        );
        // DST ends on 2026-10-25: back to 08:00 UTC.
        assert_eq!(
            monday_nine.next_after(at("2026-10-20T00:00:00Z")).unwrap(),
            Some(at("2026-10-26T08:00:00Z"))
        );
    }

    #[test]
    fn a_time_skipped_by_dst_runs_once_after_the_gap_and_a_repeated_one_once() {
        // 02:30 does not exist in Zagreb on 2026-03-29 (02:00 → 03:00).
        let half_past_two = zagreb("30 2 * * *");
        let spring = half_past_two
            .next_after(at("2026-03-28T12:00:00Z"))
            .unwrap()
            .unwrap();
        assert_eq!(spring, at("2026-03-29T01:00:00Z"), "03:00 CEST");
        assert_eq!(
            half_past_two.next_after(spring).unwrap(),
            Some(at("2026-03-30T00:30:00Z"))
        );
        // 02:30 happens twice on 2026-10-25 (03:00 → 02:00): the job runs once that day.
        let autumn = half_past_two
            .next_after(at("2026-10-24T12:00:00Z"))
            .unwrap()
            .unwrap();
        let after = half_past_two.next_after(autumn).unwrap().unwrap();
        assert!(
            after >= at("2026-10-26T00:00:00Z"),
            "ran twice on the autumn day: {autumn} then {after}"
        );
    }

    #[test]
    fn aliases_are_five_field_shorthands() {
        let hourly = zagreb("@hourly");
        assert_eq!(
            hourly.next_after(at("2026-05-01T10:20:00Z")).unwrap(),
            Some(at("2026-05-01T11:00:00Z"))
        );
        assert_eq!(
            hourly.shortest_gap(at("2026-05-01T00:00:00Z")).unwrap(),
            Some(Duration::from_secs(3_600))
        );
        let daily = zagreb("@DAILY");
        assert_eq!(
            daily.next_after(at("2026-05-01T10:20:00Z")).unwrap(),
            Some(at("2026-05-01T22:00:00Z")),
            "midnight in Zagreb (CEST)"
        );
        let error = Spec::parse("@reboot", "UTC", Timestamp::UNIX_EPOCH).unwrap_err();
        assert!(error.0.contains("not a known alias"), "{error}");
    }

    #[test]
    fn an_invalid_expression_is_refused_naming_the_field() {
        let refuse = |expression: &str| {
            Spec::parse(expression, "UTC", Timestamp::UNIX_EPOCH)
                .unwrap_err()
                .0
        };
        let hour = refuse("0 25 * * *");
        assert!(hour.contains("the hour field \"25\""), "{hour}");
        let weekday = refuse("0 9 * * FUNDAY");
        assert!(
            weekday.contains("the day-of-week field \"FUNDAY\""),
            "{weekday}"
        );
        let minute = refuse("61 9 * * *");
        assert!(minute.contains("the minute field"), "{minute}");
        let month = refuse("0 9 1 13 *");
        assert!(month.contains("the month field"), "{month}");
    }

    #[test]
    fn only_five_fields_are_accepted() {
        for expression in ["0 0 9 * * MON", "0 9 * * MON 2027", "9 * *"] {
            let error = Spec::parse(expression, "UTC", Timestamp::UNIX_EPOCH).unwrap_err();
            assert!(error.0.contains("five fields"), "{expression}: {error}");
        }
    }

    #[test]
    fn an_unknown_time_zone_is_named() {
        let error = Spec::parse("0 9 * * *", "Mars/Olympus", Timestamp::UNIX_EPOCH).unwrap_err();
        assert_eq!(
            error.0,
            "timezone: \"Mars/Olympus\" is not an IANA time zone"
        );
    }

    #[test]
    fn at_times_and_intervals() {
        let now = at("2026-05-01T10:00:00Z");
        let once = Spec::parse("at 2026-05-02T09:00:00+02:00", "UTC", now).unwrap();
        assert_eq!(
            once,
            Spec::At {
                at: at("2026-05-02T07:00:00Z")
            }
        );
        assert_eq!(
            once.next_after(now).unwrap(),
            Some(at("2026-05-02T07:00:00Z"))
        );
        assert_eq!(once.next_after(at("2026-05-02T07:00:00Z")).unwrap(), None);
        assert!(once.is_one_time());
        // A local time is read in the given zone.
        let local = Spec::parse("at 2026-05-02T09:00", "Europe/Zagreb", now).unwrap();
        assert_eq!(local, once);

        let every = Spec::parse("every 2 hours", "UTC", now).unwrap();
        assert_eq!(
            every.next_after(now).unwrap(),
            Some(at("2026-05-01T12:00:00Z"))
        );
        // Late starts do not drift the runs.
        assert_eq!(
            every.next_after(at("2026-05-01T12:07:00Z")).unwrap(),
            Some(at("2026-05-01T14:00:00Z"))
        );
        assert_eq!(
            every.shortest_gap(now).unwrap(),
            Some(Duration::from_secs(7_200))
        );
        assert_eq!(every.describe(), "every 2 hours");
        assert_eq!(
            Spec::parse("every 30 minutes", "UTC", now)
                .unwrap()
                .describe(),
            "every 30 minutes"
        );
        for wrong in ["every fortnight", "every 0 hours", "every -1 hours"] {
            let error = Spec::parse(wrong, "UTC", now).unwrap_err();
            assert!(error.0.starts_with("schedule:"), "{wrong}: {error}");
        }
    }

    #[test]
    fn the_shortest_gap_looks_at_consecutive_runs() {
        let now = at("2026-05-01T00:00:00Z");
        let gap = |expression: &str| {
            Spec::parse(expression, "Europe/Zagreb", now)
                .unwrap()
                .shortest_gap(now)
                .unwrap()
        };
        // Weekdays at nine: a day apart at the shortest.
        assert_eq!(gap("0 9 * * 1-5"), Some(Duration::from_secs(86_400)));
        // Twice within an hour once a day: the 10 minutes count, not the day.
        assert_eq!(gap("0,10 9 * * *"), Some(Duration::from_secs(600)));
        assert_eq!(gap("*/5 * * * *"), Some(Duration::from_secs(300)));
        assert_eq!(gap("* * * * *"), Some(Duration::from_secs(60)));
    }

    #[test]
    fn missed_runs_within_the_grace_run_once_older_ones_are_skipped() {
        let grace = Duration::from_secs(3_600);
        let due = at("2026-05-04T07:00:00Z");
        // Back after an outage (started after the due time).
        let started = at("2026-05-04T07:30:00Z");
        assert_eq!(catch_up(due, started, started, grace), CatchUp::Run);
        assert_eq!(
            catch_up(due, at("2026-05-04T08:00:00Z"), started, grace),
            CatchUp::Run,
            "exactly the grace late"
        );
        assert_eq!(
            catch_up(due, at("2026-05-04T08:00:01Z"), started, grace),
            CatchUp::Skip
        );
        // A grace of zero makes up no run missed while down, not even one just missed.
        let just_after = at("2026-05-04T07:00:01Z");
        assert_eq!(
            catch_up(due, just_after, just_after, Duration::ZERO),
            CatchUp::Skip
        );
        // Started exactly at the due time: the bot was up for it.
        assert_eq!(
            catch_up(due, at("2026-05-04T07:00:01Z"), due, Duration::ZERO),
            CatchUp::Run
        );
    }

    #[test]
    fn a_run_due_while_the_bot_was_running_runs_however_late_whatever_the_grace() {
        let started = at("2026-05-04T06:00:00Z");
        let due = at("2026-05-04T07:00:00Z");
        for (now, grace) in [
            // The loop wakes a few milliseconds late with a grace of zero.
            ("2026-05-04T07:00:00.004Z", Duration::ZERO),
            // Every run slot was busy for ten minutes with a one-minute grace.
            ("2026-05-04T07:10:00Z", Duration::from_secs(60)),
            // Hours late (the store failing), default grace.
            ("2026-05-04T12:00:00Z", Duration::from_secs(3_600)),
        ] {
            assert_eq!(
                catch_up(due, at(now), started, grace),
                CatchUp::Run,
                "{now}, grace {grace:?}"
            );
        }
        // Run-now: due "now", looked at a moment later, grace zero.
        let asked = at("2026-05-04T09:30:00Z");
        assert_eq!(
            catch_up(
                asked,
                at("2026-05-04T09:30:00.002Z"),
                started,
                Duration::ZERO
            ),
            CatchUp::Run
        );
        // Through `decide` too, with a grace of zero: one run, the next from now.
        let every = Spec::Every {
            seconds: 600,
            anchor: at("2026-05-04T06:00:00Z"),
        };
        let decision = decide(
            &every,
            at("2026-05-04T07:00:00Z"),
            at("2026-05-04T07:00:00.003Z"),
            started,
            Duration::ZERO,
        )
        .unwrap();
        assert_eq!(
            decision,
            Decision {
                catch_up: CatchUp::Run,
                due: at("2026-05-04T07:00:00Z"),
                next: Some(at("2026-05-04T07:10:00Z")),
            }
        );
    }

    #[test]
    fn after_an_outage_only_the_newest_missed_run_counts_and_only_once() {
        let grace = Duration::from_secs(3_600);
        let weekly = Spec::parse("0 9 * * MON", "UTC", at("2026-04-01T00:00:00Z")).unwrap();
        let stored = at("2026-05-04T09:00:00Z");
        // Down for two weeks, back half an hour after the newest Monday 09:00: that one
        // runs, once, and the next is a week on.
        let back_soon = decide(
            &weekly,
            stored,
            at("2026-05-18T09:30:00Z"),
            at("2026-05-18T09:30:00Z"),
            grace,
        )
        .unwrap();
        assert_eq!(
            back_soon,
            Decision {
                catch_up: CatchUp::Run,
                due: at("2026-05-18T09:00:00Z"),
                next: Some(at("2026-05-25T09:00:00Z")),
            }
        );
        // Back two hours after it: skipped, on to next week.
        let back_late = decide(
            &weekly,
            stored,
            at("2026-05-18T11:00:00Z"),
            at("2026-05-18T11:00:00Z"),
            grace,
        )
        .unwrap();
        assert_eq!(back_late.catch_up, CatchUp::Skip);
        assert_eq!(back_late.next, Some(at("2026-05-25T09:00:00Z")));
        // An interval job that missed many runs: one run, the next on its grid.
        let every = Spec::Every {
            seconds: 600,
            anchor: at("2026-05-04T09:00:00Z"),
        };
        let decision = decide(
            &every,
            at("2026-05-04T09:10:00Z"),
            at("2026-05-04T11:05:00Z"),
            at("2026-05-04T11:05:00Z"),
            grace,
        )
        .unwrap();
        assert_eq!(decision.catch_up, CatchUp::Run);
        assert_eq!(decision.due, at("2026-05-04T11:00:00Z"));
        assert_eq!(decision.next, Some(at("2026-05-04T11:10:00Z")));
        // A one-time job missed by more than the grace is skipped and done.
        let once = Spec::At { at: stored };
        let back = at("2026-05-04T12:00:00Z");
        let decision = decide(&once, stored, back, back, grace).unwrap();
        assert_eq!((decision.catch_up, decision.next), (CatchUp::Skip, None));
    }
}
