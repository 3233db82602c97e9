//! Whether the failover chain as a whole fails, told outside the pod: when a model call
//! failed on every entry (the person was told the assistant is unavailable), the agent
//! publishes a Warning Event `ModelChainFailing` on its SaintBot naming each entry, its
//! model and how its last attempt ended (outcome labels only: never an error body, a
//! URL or a key); again every [`ChainHealthTiming::repeat`] while no entry has answered,
//! so the report stays current; and a Normal `ModelChainRecovered` once an entry has
//! answered and no call has failed on the whole chain for [`ChainHealthTiming::settle`].
//! The operator turns the latest report into the SaintBot's `ModelAvailable` condition
//! (`operator/src/cache/chain_reports.rs`).
//!
//! The state is the chain's own: latched by a whole-chain failure, cleared by an answer.
//! Publishing happens in one background task, never in a turn, and a healthy chain pays
//! one atomic load per answer. A chain failing and answering by turns changes what is
//! published at most once per `settle` in each direction, never per request.
//! [`ChainReportPublisher`] is the seam: Kubernetes Events in a cluster
//! ([`KubernetesChainReports`]), a [`RecordingPublisher`] in tests, nothing on one
//! machine.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use futures::future::BoxFuture;
use tokio::sync::{Notify, OnceCell};

use super::EnvLookup;
use parking_lot::Mutex;

/// Reason of the Warning Event published when every entry of the chain failed a call.
pub const MODEL_CHAIN_FAILING: &str = "ModelChainFailing";
/// Reason of the Normal Event published when an entry answers again after that.
pub const MODEL_CHAIN_RECOVERED: &str = "ModelChainRecovered";

/// What the agent says about its chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChainReport {
    /// Every entry failed a call: the note names each entry, its model and its outcome.
    Failing(String),
    /// An entry answers again after a reported failure: the note names it.
    Recovered(String),
}

impl ChainReport {
    /// Publishes the report through `events`: a Warning `ModelChainFailing` or a Normal
    /// `ModelChainRecovered`, its note as given.
    pub async fn publish(
        &self,
        events: &crate::channel::events::ChannelEvents,
    ) -> Result<(), kube::Error> {
        let warning = matches!(self, ChainReport::Failing(_));
        events
            .note(warning, self.reason(), self.note(), "CallModel")
            .await
    }

    /// The Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            ChainReport::Failing(_) => MODEL_CHAIN_FAILING,
            ChainReport::Recovered(_) => MODEL_CHAIN_RECOVERED,
        }
    }

    /// The Event note.
    pub fn note(&self) -> &str {
        match self {
            ChainReport::Failing(note) | ChainReport::Recovered(note) => note,
        }
    }
}

/// Why a report could not be published (it is tried again).
pub type PublishError = Box<dyn std::error::Error + Send + Sync>;

/// Where chain reports go.
pub trait ChainReportPublisher: Send + Sync + 'static {
    /// Publishes one report.
    fn publish<'a>(&'a self, report: &'a ChainReport) -> BoxFuture<'a, Result<(), PublishError>>;
}

/// How often reports may change and repeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainHealthTiming {
    /// After an entry answers, how long no call may fail on the whole chain before the
    /// recovery is published (and so the shortest time between a failing report and the
    /// recovery that follows it).
    pub settle: Duration,
    /// While no entry answers, how often the failing report is published again.
    pub repeat: Duration,
    /// How long to wait before trying a report the publisher refused again.
    pub retry: Duration,
}

impl Default for ChainHealthTiming {
    fn default() -> Self {
        Self {
            settle: Duration::from_secs(60),
            repeat: Duration::from_secs(600),
            retry: Duration::from_secs(30),
        }
    }
}

/// The chain's health as reported outside the pod. Cheap to call from every model call;
/// a disabled one (no publisher) does nothing.
#[derive(Clone, Default)]
pub struct ChainHealth {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    publisher: Arc<dyn ChainReportPublisher>,
    timing: ChainHealthTiming,
    /// Set by a whole-chain failure, cleared by the first answer after it: the one load
    /// a healthy chain's answer pays.
    failing: AtomicBool,
    state: Mutex<State>,
    changed: Notify,
    task_started: AtomicBool,
}

/// What happened and what was published.
#[derive(Debug, Default)]
struct State {
    /// The latest whole-chain failure not yet followed by a published recovery.
    failure: Option<Failure>,
    /// The entry (and model) that answered first after that failure.
    answered_by: Option<String>,
    /// What was published last, and when.
    published: Option<(Published, Instant)>,
}

#[derive(Debug, Clone)]
struct Failure {
    note: String,
    at: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Published {
    Failing,
    Recovered,
}

/// What the publishing task does next.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Publish(ChainReport),
    WaitUntil(Instant),
    Idle,
}

/// The next step for `state` at `now`. Pure.
fn next_step(state: &State, timing: &ChainHealthTiming, now: Instant) -> Step {
    let Some(failure) = &state.failure else {
        return Step::Idle;
    };
    let failing_published_at = match state.published {
        Some((Published::Failing, at)) => Some(at),
        _ => None,
    };
    let due_or = |due: Instant, report: ChainReport| {
        if now >= due {
            Step::Publish(report)
        } else {
            Step::WaitUntil(due)
        }
    };
    match (&state.answered_by, failing_published_at) {
        // Not reported yet (also when an entry answered before the task got to it: a
        // person was told the assistant is unavailable all the same).
        (_, None) => Step::Publish(ChainReport::Failing(failure.note.clone())),
        (None, Some(at)) => due_or(
            at + timing.repeat,
            ChainReport::Failing(failure.note.clone()),
        ),
        (Some(entry), Some(_)) => due_or(
            failure.at + timing.settle,
            ChainReport::Recovered(format!(
                "{entry} answers again; no call has failed on every model of the chain for {}s",
                timing.settle.as_secs()
            )),
        ),
    }
}

impl ChainHealth {
    /// Reports through `publisher`, paced by `timing`.
    pub fn new(publisher: Arc<dyn ChainReportPublisher>, timing: ChainHealthTiming) -> Self {
        Self {
            inner: Some(Arc::new(Inner {
                publisher,
                timing,
                failing: AtomicBool::new(false),
                state: Mutex::new(State::default()),
                changed: Notify::new(),
                task_started: AtomicBool::new(false),
            })),
        }
    }

    /// Reports nowhere.
    pub fn disabled() -> Self {
        Self::default()
    }

    /// In a cluster (the operator passes the SaintBot's uid, and the API server is
    /// reachable): Events on SaintBot `namespace/name`; elsewhere disabled.
    pub fn from_environment(name: &str, namespace: &str, env: &EnvLookup) -> Self {
        match env(saint_config::BOT_UID_ENV).filter(|uid| !uid.is_empty()) {
            Some(uid) if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => Self::new(
                Arc::new(KubernetesChainReports::new(name, namespace, &uid)),
                ChainHealthTiming::default(),
            ),
            _ => Self::disabled(),
        }
    }

    /// A call failed on every entry: `failed` lists each entry tried, its model and its
    /// last outcome label.
    pub(crate) fn whole_chain_failed(&self, failed: &[(String, String, &'static str)]) {
        let Some(inner) = &self.inner else {
            return;
        };
        let entries: Vec<String> = failed
            .iter()
            .map(|(entry, model, outcome)| format!("{entry} {model} ({outcome})"))
            .collect();
        let note = format!(
            "every model of the failover chain failed a call: {}",
            entries.join(", ")
        );
        {
            let mut state = inner.lock();
            state.failure = Some(Failure {
                note,
                at: Instant::now(),
            });
            state.answered_by = None;
            inner.failing.store(true, Ordering::Release);
        }
        inner.changed.notify_one();
        self.start_task(inner);
    }

    /// Entry `entry` (calling `model`) answered.
    #[inline]
    pub(crate) fn answered(&self, entry: &str, model: &str) {
        let Some(inner) = &self.inner else {
            return;
        };
        if !inner.failing.load(Ordering::Acquire) {
            return;
        }
        {
            let mut state = inner.lock();
            if state.failure.is_some() && state.answered_by.is_none() {
                state.answered_by = Some(format!("{entry} {model}"));
            }
            inner.failing.store(false, Ordering::Release);
        }
        inner.changed.notify_one();
    }

    fn start_task(&self, inner: &Arc<Inner>) {
        if inner.task_started.swap(true, Ordering::AcqRel) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(publish_reports(inner.clone()));
            }
            Err(_) => inner.task_started.store(false, Ordering::Release),
        }
    }
}

impl Inner {
    fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }
}

/// The publishing task: runs for the life of the runtime.
async fn publish_reports(inner: Arc<Inner>) {
    loop {
        let step = next_step(&inner.lock(), &inner.timing, Instant::now());
        match step {
            Step::Idle => inner.changed.notified().await,
            Step::WaitUntil(due) => {
                tokio::select! {
                    _ = inner.changed.notified() => {}
                    _ = tokio::time::sleep_until(due.into()) => {}
                }
            }
            Step::Publish(report) => match inner.publisher.publish(&report).await {
                Ok(()) => {
                    tracing::info!(
                        reason = report.reason(),
                        note = report.note(),
                        "model chain report published"
                    );
                    let mut state = inner.lock();
                    let now = Instant::now();
                    match report {
                        ChainReport::Failing(_) => {
                            state.published = Some((Published::Failing, now));
                        }
                        ChainReport::Recovered(_) => {
                            state.published = Some((Published::Recovered, now));
                            // Unless a call failed on the whole chain meanwhile.
                            if state.answered_by.is_some() {
                                state.failure = None;
                                state.answered_by = None;
                            }
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(reason = report.reason(), error = %saint_config::ErrorChain(error.as_ref()), "failed to publish a model chain report; trying again");
                    tokio::time::sleep(inner.timing.retry).await;
                }
            },
        }
    }
}

/// Keeps every report (tests).
#[derive(Default)]
pub struct RecordingPublisher {
    reports: Mutex<Vec<ChainReport>>,
    published: Notify,
}

impl RecordingPublisher {
    /// Every report so far.
    pub fn reports(&self) -> Vec<ChainReport> {
        self.reports.lock().clone()
    }

    /// Waits until `count` reports were published (or `timeout` passed); returns them.
    pub async fn wait_for(&self, count: usize, timeout: Duration) -> Vec<ChainReport> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let published = self.published.notified();
            let reports = self.reports();
            if reports.len() >= count {
                return reports;
            }
            if tokio::time::timeout_at(deadline, published).await.is_err() {
                return self.reports();
            }
        }
    }
}

impl ChainReportPublisher for RecordingPublisher {
    fn publish<'a>(&'a self, report: &'a ChainReport) -> BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(async move {
            self.reports.lock().push(report.clone());
            self.published.notify_waiters();
            Ok(())
        })
    }
}

/// Events on the bot's SaintBot, with the in-cluster client made at the first report.
pub struct KubernetesChainReports {
    name: String,
    namespace: String,
    uid: String,
    events: OnceCell<crate::channel::events::ChannelEvents>,
}

impl KubernetesChainReports {
    /// Events on SaintBot `namespace/name` with uid `uid`.
    pub fn new(name: &str, namespace: &str, uid: &str) -> Self {
        Self {
            name: name.to_string(),
            namespace: namespace.to_string(),
            uid: uid.to_string(),
            events: OnceCell::new(),
        }
    }
}

impl ChainReportPublisher for KubernetesChainReports {
    fn publish<'a>(&'a self, report: &'a ChainReport) -> BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(async move {
            let events = self
                .events
                .get_or_try_init(|| async {
                    let client = kube::Client::try_default().await?;
                    Ok::<_, kube::Error>(crate::channel::events::ChannelEvents::new(
                        client,
                        &self.name,
                        &self.namespace,
                        &self.uid,
                    ))
                })
                .await?;
            report.publish(events).await?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMING: ChainHealthTiming = ChainHealthTiming {
        settle: Duration::from_secs(60),
        repeat: Duration::from_secs(600),
        retry: Duration::from_secs(30),
    };

    fn failing(note: &str) -> ChainReport {
        ChainReport::Failing(note.to_string())
    }

    #[test]
    fn a_failure_is_reported_at_once_repeated_while_it_lasts_and_recovers_after_it_settles() {
        let start = Instant::now();
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        let mut state = State::default();
        assert_eq!(next_step(&state, &TIMING, at(0)), Step::Idle);

        state.failure = Some(Failure {
            note: "x".into(),
            at: at(0),
        });
        assert_eq!(
            next_step(&state, &TIMING, at(0)),
            Step::Publish(failing("x"))
        );
        state.published = Some((Published::Failing, at(1)));
        // Failing again and again: nothing until the repeat is due, with the latest note.
        state.failure = Some(Failure {
            note: "y".into(),
            at: at(30),
        });
        assert_eq!(next_step(&state, &TIMING, at(30)), Step::WaitUntil(at(601)));
        assert_eq!(
            next_step(&state, &TIMING, at(601)),
            Step::Publish(failing("y"))
        );

        // An entry answers: recovery once no call failed on the whole chain for a minute.
        state.answered_by = Some("fallback-1 gpt-4.1".into());
        assert_eq!(next_step(&state, &TIMING, at(31)), Step::WaitUntil(at(90)));
        let Step::Publish(ChainReport::Recovered(note)) = next_step(&state, &TIMING, at(90)) else {
            panic!("recovery due");
        };
        assert!(
            note.starts_with("fallback-1 gpt-4.1 answers again"),
            "{note}"
        );

        // A failure before it settles: still failing, no recovery, no new Warning.
        state.failure = Some(Failure {
            note: "z".into(),
            at: at(80),
        });
        state.answered_by = None;
        assert_eq!(next_step(&state, &TIMING, at(90)), Step::WaitUntil(at(601)));
    }

    #[test]
    fn a_failure_answered_before_it_was_published_is_still_reported_then_recovered() {
        let start = Instant::now();
        let mut state = State {
            failure: Some(Failure {
                note: "x".into(),
                at: start,
            }),
            answered_by: Some("primary m".into()),
            published: Some((
                Published::Recovered,
                start.checked_sub(Duration::from_secs(120)).unwrap(),
            )),
        };
        assert_eq!(
            next_step(&state, &TIMING, start),
            Step::Publish(failing("x"))
        );
        state.published = Some((Published::Failing, start));
        assert_eq!(
            next_step(&state, &TIMING, start),
            Step::WaitUntil(start + TIMING.settle)
        );
    }

    #[tokio::test]
    async fn reports_go_out_once_per_change_and_a_disabled_health_costs_nothing() {
        ChainHealth::disabled().whole_chain_failed(&[]);
        ChainHealth::disabled().answered("primary", "m");

        let recorder = Arc::new(RecordingPublisher::default());
        let health = ChainHealth::new(
            recorder.clone(),
            ChainHealthTiming {
                settle: Duration::from_millis(100),
                repeat: Duration::from_secs(3600),
                retry: Duration::from_millis(10),
            },
        );
        let failed = [
            ("primary".to_string(), "m".to_string(), "unauthorized"),
            ("fallback-1".to_string(), "n".to_string(), "overloaded"),
        ];
        health.answered("primary", "m");
        health.whole_chain_failed(&failed);
        let reports = recorder.wait_for(1, Duration::from_secs(5)).await;
        assert_eq!(
            reports,
            vec![failing(
                "every model of the failover chain failed a call: primary m (unauthorized), \
                 fallback-1 n (overloaded)"
            )]
        );
        // More failures and answers in quick turns: no report per request.
        for _ in 0..5 {
            health.whole_chain_failed(&failed);
            health.answered("fallback-1", "n");
        }
        let reports = recorder.wait_for(2, Duration::from_secs(5)).await;
        assert_eq!(reports.len(), 2, "{reports:?}");
        assert_eq!(reports[1].reason(), MODEL_CHAIN_RECOVERED);
        assert!(reports[1].note().starts_with("fallback-1 n answers again"));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(recorder.reports().len(), 2, "nothing more to say");
    }
}
