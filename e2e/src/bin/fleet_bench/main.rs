//! Fleet benchmark: on the control plane `e2e/run.sh` starts,
//! installs the chart, runs the operator as the chart's ServiceAccount and, for each
//! fleet size (default 100 as the baseline, then 1,000), creates that many SaintBots —
//! each with its Secret, Role and Contact — and measures the operator's RSS, the time
//! until every bot's status describes its generation, cold-restart resync times and API
//! requests per reconcile. Prints a table of medians with ratios against the first size
//! and writes it as JSON into the run directory.
//!
//! Run it with `SAINT_E2E_BENCH=fleet e2e/run.sh` (see e2e/README.md, "Benchmarks").

mod fleet;
mod operator;
mod progress_watch;
mod report;
mod rss;

use std::{
    collections::BTreeMap,
    fmt::Display,
    process::ExitCode,
    str::FromStr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client,
    api::{DynamicObject, PostParams},
};
use saint_e2e::{
    Environment, Failure, api_message,
    chart::{self, ChartInstall},
    namespace, service_account,
};
use serde_json::json;

use crate::{
    fleet::Kind,
    operator::{BenchOperator, Counters},
    progress_watch::ProgressWatch,
    report::{Resync, SizeResult},
    rss::RssSampler,
};

/// Lease identity of every operator start: a restarted container keeps its pod name,
/// so a restart renews its own Lease instead of waiting for it to expire.
const IDENTITY: &str = "fleet-bench-0";

/// How often the bench looks at the fleet's progress (as its watch saw it) while waiting
/// for convergence.
const CHECK_INTERVAL: Duration = Duration::from_millis(100);
/// How often it reads the operator's counters during a resync.
const METRICS_INTERVAL: Duration = Duration::from_millis(100);
/// How often a progress line is printed while waiting.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(5);

/// Knobs, from the environment (all optional).
#[derive(Debug)]
struct Settings {
    /// `SAINT_FLEET_SIZES`: comma-separated bot counts; the first is the baseline.
    sizes: Vec<usize>,
    /// `SAINT_FLEET_RESTARTS`: cold restarts per size (the resync figures are medians).
    restarts: usize,
    /// `SAINT_FLEET_CONCURRENCY`: bots created at once.
    concurrency: usize,
    /// `SAINT_FLEET_CONVERGE_TIMEOUT_SECONDS`: give up waiting for convergence.
    converge_timeout: Duration,
    /// `SAINT_FLEET_RESYNC_TIMEOUT_SECONDS`: give up waiting for one resync.
    resync_timeout: Duration,
    /// `SAINT_FLEET_STEADY_SECONDS`: RSS window after convergence.
    steady: Duration,
    /// `SAINT_FLEET_RSS_LIMIT_MB`: stop a size when the operator grows past this.
    rss_limit_megabytes: f64,
}

fn setting<T: FromStr>(name: &str, default: T) -> Result<T, Failure>
where
    T::Err: Display,
{
    match std::env::var(name) {
        Ok(text) if !text.is_empty() => text
            .parse()
            .map_err(|error| Failure::message(format!("failed to read {name}={text:?}: {error}"))),
        _ => Ok(default),
    }
}

impl Settings {
    fn from_env() -> Result<Self, Failure> {
        let sizes_text = setting("SAINT_FLEET_SIZES", "100,1000".to_owned())?;
        let sizes = sizes_text
            .split(',')
            .map(|size| size.trim().parse::<usize>().ok().filter(|size| *size > 0))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                Failure::message(format!(
                    "failed to read SAINT_FLEET_SIZES={sizes_text:?}: expected positive bot counts separated by commas, e.g. 100,1000"
                ))
            })?;
        if sizes.iter().any(|size| *size > 9_999) {
            return Err(Failure::message(format!(
                "SAINT_FLEET_SIZES={sizes_text:?}: at most 9999 bots per size (names are fleet-0001…fleet-9999)"
            )));
        }
        Ok(Self {
            sizes,
            restarts: setting("SAINT_FLEET_RESTARTS", 3)?,
            concurrency: setting("SAINT_FLEET_CONCURRENCY", 32usize)?.max(1),
            converge_timeout: Duration::from_secs(setting(
                "SAINT_FLEET_CONVERGE_TIMEOUT_SECONDS",
                900,
            )?),
            resync_timeout: Duration::from_secs(setting(
                "SAINT_FLEET_RESYNC_TIMEOUT_SECONDS",
                300,
            )?),
            steady: Duration::from_secs(setting("SAINT_FLEET_STEADY_SECONDS", 15)?),
            rss_limit_megabytes: setting("SAINT_FLEET_RSS_LIMIT_MB", 6_000.0)?,
        })
    }
}

/// Progress lines stamped with the time since the bench started.
struct Progress {
    started: Instant,
}

impl Progress {
    fn say(&self, text: impl Display) {
        println!("[{:>7.1} s] {text}", self.started.elapsed().as_secs_f64());
    }
}

/// What the bench shares across sizes.
struct Bench {
    settings: Settings,
    environment: Environment,
    admin: Client,
    install: ChartInstall,
    progress: Progress,
}

fn megabytes(kilobytes: u64) -> f64 {
    kilobytes as f64 / 1024.0
}

fn seconds_between(from: Instant, to: Instant) -> f64 {
    to.duration_since(from).as_secs_f64()
}

/// How far the fleet is: bots listed, bots whose status describes their generation,
/// and their `Ready` reasons (`none` without one).
pub(crate) struct FleetState {
    pub(crate) listed: usize,
    pub(crate) converged: usize,
    pub(crate) ready_reasons: BTreeMap<String, usize>,
}

impl Display for FleetState {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reasons: Vec<String> = self
            .ready_reasons
            .iter()
            .map(|(reason, count)| format!("{reason} {count}"))
            .collect();
        write!(
            formatter,
            "{} listed, {} at observedGeneration (Ready: {})",
            self.listed,
            self.converged,
            reasons.join(", ")
        )
    }
}

async fn create_object(
    client: &Client,
    namespace: &str,
    kind: Kind,
    object: &DynamicObject,
) -> Result<(), Failure> {
    Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &kind.resource())
        .create(&PostParams::default(), object)
        .await
        .map(|_| ())
        .map_err(|error| {
            Failure::message(format!(
                "the API server refused {kind:?} {}: {}",
                object.metadata.name.as_deref().unwrap_or_default(),
                api_message(&error)
            ))
        })
}

/// Creates the shared Role, then every bot's objects (`concurrency` bots at a time,
/// each bot's objects in order); returns when the last create was answered.
async fn create_fleet(
    client: Client,
    namespace: String,
    bots: usize,
    concurrency: usize,
    created: Arc<AtomicUsize>,
) -> Result<Instant, Failure> {
    create_object(&client, &namespace, Kind::Role, &fleet::shared_role()).await?;
    let mut creates = futures::stream::iter(1..=bots)
        .map(|index| {
            let (client, namespace, created) = (client.clone(), namespace.clone(), created.clone());
            async move {
                for (kind, object) in fleet::bot_objects(index) {
                    create_object(&client, &namespace, kind, &object).await?;
                }
                created.fetch_add(1, Ordering::Relaxed);
                Ok::<_, Failure>(())
            }
        })
        .buffer_unordered(concurrency);
    while let Some(result) = creates.next().await {
        result?;
    }
    Ok(Instant::now())
}

/// The fleet being created: its progress watch, the count created so far, when the
/// first create began, and the create task until it finished.
struct Creation {
    progress: ProgressWatch,
    created: Arc<AtomicUsize>,
    first_create: Instant,
    creator: Option<tokio::task::JoinHandle<Result<Instant, Failure>>>,
}

/// How waiting for convergence ended.
struct Converged {
    /// When every bot was converged; `None` when the wait stopped first.
    at: Option<Instant>,
    /// Why the wait stopped, if it did.
    outcome: Option<String>,
    ready_reasons: BTreeMap<String, usize>,
    /// When the last object was created.
    last_create: Option<Instant>,
}

/// What the steady window is measured from.
struct SteadyWindow {
    converged_at: Instant,
    operator_started: Instant,
    /// The operator's counters at convergence.
    after: Counters,
}

impl Bench {
    fn start_operator(
        &self,
        kubeconfig: &std::path::Path,
        bots: usize,
    ) -> Result<BenchOperator, Failure> {
        BenchOperator::start(
            &self.environment.operator_bin,
            &self.install,
            kubeconfig,
            IDENTITY,
            self.environment
                .run_dir
                .join(format!("operator-fleet-{bots}.log")),
        )
    }

    /// Waits until the operator's `/metrics` answers; returns its counters.
    async fn first_counters(&self, operator: &mut BenchOperator) -> Result<Counters, Failure> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            operator.check_alive()?;
            match operator.counters().await {
                Ok(counters) => return Ok(counters),
                Err(last) if Instant::now() >= deadline => {
                    return Err(Failure::message(format!(
                        "the operator's /metrics did not answer within 60 s: {last}\n{}",
                        operator.log_tail(20)
                    )));
                }
                Err(_) => tokio::time::sleep(METRICS_INTERVAL).await,
            }
        }
    }

    /// One size: create, converge, steady window, restarts; then the namespace is
    /// deleted (with the operator stopped) and awaited, so the next size starts clean.
    async fn measure(&self, bots: usize) -> Result<SizeResult, Failure> {
        let say = |text: String| self.progress.say(format!("N={bots}: {text}"));
        let namespace = namespace::create(&self.admin, &format!("fleet-{bots}"), true).await?;
        // A fresh token per size: a 1-hour token could expire in a long run.
        let kubeconfig = self.kubeconfig().await?;
        let mut operator = self.start_operator(&kubeconfig, bots)?;
        let mut sampler = RssSampler::start(operator.pid());
        let operator_started = Instant::now();
        let before = self.first_counters(&mut operator).await?;
        say(format!(
            "namespace {namespace}; operator pid {} up in {:.1} s; creating {bots} bots ({} at a time)",
            operator.pid(),
            operator_started.elapsed().as_secs_f64(),
            self.settings.concurrency
        ));

        let mut creation = self.start_creating(&namespace, bots);
        let converged = self
            .converge(&mut operator, &sampler, &mut creation, &before, bots)
            .await?;
        let first_create = creation.first_create;
        let after = operator.counters().await.unwrap_or_default();
        let mut result = SizeResult {
            bots,
            objects: 4 * bots + 1,
            create_seconds: converged
                .last_create
                .map_or(f64::NAN, |last| seconds_between(first_create, last)),
            converged_seconds: converged.at.map(|at| seconds_between(first_create, at)),
            outcome: converged
                .outcome
                .clone()
                .unwrap_or_else(|| "converged".to_owned()),
            ready_reasons: converged.ready_reasons,
            convergence_reconciles: after.reconciles - before.reconciles,
            convergence_api_requests: after
                .api_requests
                .zip(before.api_requests)
                .map(|(after, before)| after - before),
            ..SizeResult::default()
        };

        if let Some(converged_at) = converged.at {
            let window = SteadyWindow {
                converged_at,
                operator_started,
                after,
            };
            self.steady_window(&mut operator, &sampler, &mut result, window)
                .await?;
            for restart in 1..=self.settings.restarts {
                operator.kill();
                drop(sampler);
                let kubeconfig = self.kubeconfig().await?;
                operator = self.start_operator(&kubeconfig, bots)?;
                sampler = RssSampler::start(operator.pid());
                let resync = self.resync(&mut operator, &sampler, bots).await?;
                say(format!(
                    "resync {restart}/{}: first reconcile after {:.1} s, {bots} started after {:.1} s and finished after {:.1} s, peak RSS {:.1} MB, {} API requests for {:.0} reconciles",
                    self.settings.restarts,
                    resync.first_reconcile_seconds.unwrap_or(f64::NAN),
                    resync.all_started_seconds.unwrap_or(f64::NAN),
                    resync.all_finished_seconds.unwrap_or(f64::NAN),
                    resync.peak_rss_megabytes,
                    resync
                        .api_requests
                        .map_or("(not exported)".to_owned(), |requests| format!(
                            "{requests:.0}"
                        )),
                    resync.reconciles
                ));
                result.resyncs.push(resync);
            }
        } else {
            result.peak_rss_megabytes = peak(&sampler, operator_started, Instant::now());
            say(format!(
                "{}; skipping the steady window and the restarts",
                result.outcome
            ));
        }

        if let Some(task) = creation.creator.take() {
            task.abort();
        }
        operator.kill();
        drop(sampler);
        self.delete_namespace(&namespace, bots).await?;
        Ok(result)
    }

    /// A kubeconfig with a fresh token of the operator's service account.
    async fn kubeconfig(&self) -> Result<std::path::PathBuf, Failure> {
        Ok(service_account::kubeconfig(
            &self.environment,
            &self.admin,
            &self.install.namespace,
            &self.install.service_account,
        )
        .await?)
    }

    /// Starts watching the fleet's progress, then creating its objects.
    fn start_creating(&self, namespace: &str, bots: usize) -> Creation {
        let progress = ProgressWatch::start(&self.admin, namespace);
        let created = Arc::new(AtomicUsize::new(0));
        let first_create = Instant::now();
        let creator = Some(tokio::spawn(create_fleet(
            self.admin.clone(),
            namespace.to_owned(),
            bots,
            self.settings.concurrency,
            created.clone(),
        )));
        Creation {
            progress,
            created,
            first_create,
            creator,
        }
    }

    /// Waits until every bot is created and converged, the operator's RSS passes its
    /// limit, or the convergence timeout passes; says how it goes meanwhile.
    async fn converge(
        &self,
        operator: &mut BenchOperator,
        sampler: &RssSampler,
        creation: &mut Creation,
        before: &Counters,
        bots: usize,
    ) -> Result<Converged, Failure> {
        let say = |text: String| self.progress.say(format!("N={bots}: {text}"));
        let first_create = creation.first_create;
        let mut last_create = None;
        let mut last_progress = Instant::now();
        let mut outcome = None;
        let mut ready_reasons = BTreeMap::new();
        let converged_at = loop {
            tokio::time::sleep(CHECK_INTERVAL).await;
            operator.check_alive()?;
            if creation
                .creator
                .as_ref()
                .is_some_and(|task| task.is_finished())
                && let Some(task) = creation.creator.take()
            {
                let finished = task.await.map_err(|error| {
                    Failure::message(format!("the create task failed: {error}"))
                })??;
                say(format!(
                    "all {} objects created in {:.1} s",
                    4 * bots + 1,
                    seconds_between(first_create, finished)
                ));
                last_create = Some(finished);
            }
            let state = creation.progress.state();
            let now = Instant::now();
            if let Ok(state) = &state {
                ready_reasons = state.ready_reasons.clone();
            }
            if let Ok(state) = &state
                && last_create.is_some()
                && state.listed == bots
                && state.converged == bots
            {
                say(format!(
                    "converged {:.1} s after the first create: {state}",
                    seconds_between(first_create, now)
                ));
                ready_reasons = state.ready_reasons.clone();
                break Some(now);
            }
            let rss = sampler.latest().map_or(0.0, megabytes);
            if rss > self.settings.rss_limit_megabytes {
                outcome = Some(format!(
                    "stopped: operator RSS {rss:.0} MB above SAINT_FLEET_RSS_LIMIT_MB={}",
                    self.settings.rss_limit_megabytes
                ));
                break None;
            }
            if now.duration_since(first_create) > self.settings.converge_timeout {
                outcome = Some(format!(
                    "not converged within SAINT_FLEET_CONVERGE_TIMEOUT_SECONDS={}",
                    self.settings.converge_timeout.as_secs()
                ));
                break None;
            }
            if now.duration_since(last_progress) >= PROGRESS_INTERVAL {
                last_progress = now;
                let counters = operator.counters().await.unwrap_or_default();
                say(format!(
                    "t+{:.0} s: {} bots created, {}; RSS {rss:.0} MB; {:.0} reconciles",
                    seconds_between(first_create, now),
                    creation.created.load(Ordering::Relaxed),
                    state
                        .as_ref()
                        .map_or_else(String::clone, ToString::to_string),
                    counters.reconciles - before.reconciles
                ));
            }
        };
        Ok(Converged {
            at: converged_at,
            outcome,
            ready_reasons,
            last_create,
        })
    }

    /// The steady window after convergence: reconciles, heap and RSS while nothing
    /// changes.
    async fn steady_window(
        &self,
        operator: &mut BenchOperator,
        sampler: &RssSampler,
        result: &mut SizeResult,
        window: SteadyWindow,
    ) -> Result<(), Failure> {
        let bots = result.bots;
        let say = |text: String| self.progress.say(format!("N={bots}: {text}"));
        let SteadyWindow {
            converged_at,
            operator_started,
            after,
        } = window;
        say(format!(
            "steady window: {} s of RSS samples",
            self.settings.steady.as_secs()
        ));
        tokio::time::sleep(self.settings.steady).await;
        operator.check_alive()?;
        let steady_end = Instant::now();
        let steady = operator.counters().await.unwrap_or(after);
        result.steady_reconciles = steady.reconciles - after.reconciles;
        let bytes_to_megabytes = |bytes: f64| bytes / (1024.0 * 1024.0);
        result.steady_heap_allocated_megabytes = steady.heap_allocated.map(bytes_to_megabytes);
        result.steady_heap_resident_megabytes = steady.heap_resident.map(bytes_to_megabytes);
        result.steady_rss_megabytes = report::median(
            sampler
                .between(converged_at, steady_end)
                .into_iter()
                .map(megabytes),
        );
        result.peak_rss_megabytes = peak(sampler, operator_started, steady_end);
        say(format!(
            "RSS steady median {:.1} MB, peak {:.1} MB; {:.0} reconciles and {} API requests until converged, {:.0} reconciles in the steady window",
            result.steady_rss_megabytes.unwrap_or(f64::NAN),
            result.peak_rss_megabytes,
            result.convergence_reconciles,
            result
                .convergence_api_requests
                .map_or("(not exported)".to_owned(), |requests| format!(
                    "{requests:.0}"
                )),
            result.steady_reconciles
        ));
        Ok(())
    }

    /// From the new process's start: time to the first reconcile, until as many
    /// reconciles started as there are bots, and until as many finished (the operator
    /// queues every bot once at start, so that is every bot reconciled once).
    async fn resync(
        &self,
        operator: &mut BenchOperator,
        sampler: &RssSampler,
        bots: usize,
    ) -> Result<Resync, Failure> {
        let started = Instant::now();
        let target = bots as f64;
        let mut resync = Resync::default();
        let mut last_progress = started;
        loop {
            tokio::time::sleep(METRICS_INTERVAL).await;
            operator.check_alive()?;
            let now = Instant::now();
            // Until the listener is up, /metrics refuses the connection: keep polling.
            if let Ok(counters) = operator.counters().await {
                let elapsed = Some(seconds_between(started, now));
                if counters.reconciles >= 1.0 && resync.first_reconcile_seconds.is_none() {
                    resync.first_reconcile_seconds = elapsed;
                }
                if counters.reconciles >= target && resync.all_started_seconds.is_none() {
                    resync.all_started_seconds = elapsed;
                }
                resync.reconciles = counters.reconciles;
                resync.api_requests = counters.api_requests;
                // Without the duration histogram, "started" is the best there is.
                if counters.finished.unwrap_or(counters.reconciles) >= target {
                    resync.all_finished_seconds = elapsed;
                    break;
                }
            }
            if now.duration_since(started) > self.settings.resync_timeout {
                self.progress.say(format!(
                    "N={bots}: resync did not finish {bots} reconciles within SAINT_FLEET_RESYNC_TIMEOUT_SECONDS={} ({:.0} started)",
                    self.settings.resync_timeout.as_secs(),
                    resync.reconciles
                ));
                break;
            }
            if now.duration_since(last_progress) >= PROGRESS_INTERVAL {
                last_progress = now;
                self.progress.say(format!(
                    "N={bots}: resync t+{:.0} s: {:.0} reconciles started, RSS {:.0} MB",
                    seconds_between(started, now),
                    resync.reconciles,
                    sampler.latest().map_or(0.0, megabytes)
                ));
            }
        }
        resync.peak_rss_megabytes = peak(sampler, started, Instant::now());
        Ok(resync)
    }

    /// Deletes the size's namespace and waits until it is gone.
    async fn delete_namespace(&self, name: &str, bots: usize) -> Result<(), Failure> {
        let started = Instant::now();
        self.progress.say(format!(
            "N={bots}: deleting namespace {name} (operator stopped)"
        ));
        namespace::delete(&self.admin, name).await?;
        let namespaces = Api::<Namespace>::all(self.admin.clone());
        let mut last_progress = started;
        while namespaces
            .get_opt(name)
            .await
            .map_err(|error| {
                Failure::message(format!(
                    "failed to read namespace {name}: {}",
                    api_message(&error)
                ))
            })?
            .is_some()
        {
            if started.elapsed() > Duration::from_secs(900) {
                return Err(Failure::message(format!(
                    "namespace {name} still exists 900 s after its deletion"
                )));
            }
            if last_progress.elapsed() >= PROGRESS_INTERVAL {
                last_progress = Instant::now();
                self.progress.say(format!(
                    "N={bots}: namespace {name} still terminating after {:.0} s",
                    started.elapsed().as_secs_f64()
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        self.progress.say(format!(
            "N={bots}: namespace {name} gone after {:.1} s",
            started.elapsed().as_secs_f64()
        ));
        Ok(())
    }
}

fn peak(sampler: &RssSampler, from: Instant, to: Instant) -> f64 {
    sampler
        .between(from, to)
        .into_iter()
        .max()
        .map_or(f64::NAN, megabytes)
}

async fn run() -> Result<ExitCode, Failure> {
    if let Some(argument) = std::env::args().nth(1) {
        return Err(Failure::message(format!(
            "fleet-bench takes no arguments (got {argument:?}); set SAINT_FLEET_SIZES, SAINT_FLEET_RESTARTS, … instead (see e2e/README.md)"
        )));
    }
    let settings = Settings::from_env()?;
    let progress = Progress {
        started: Instant::now(),
    };
    let environment = Environment::from_env()?;
    let admin = environment.admin_client().await?;
    progress.say(format!(
        "fleet bench: sizes {:?}, {} restarts each, operator {}",
        settings.sizes,
        settings.restarts,
        environment.operator_bin.display()
    ));
    let install = chart::install(&environment, &admin, "fleet", &[]).await?;
    progress.say(format!(
        "chart installed in namespace {} (ServiceAccount {})",
        install.namespace, install.service_account
    ));
    let bench = Bench {
        settings,
        environment,
        admin,
        install,
        progress,
    };

    let mut sizes = Vec::new();
    for &bots in &bench.settings.sizes {
        sizes.push(bench.measure(bots).await?);
    }

    let (table, rows) = report::table(&sizes);
    println!(
        "\nfleet bench (medians; ratios against N={}):\n{table}\n",
        bench.settings.sizes[0]
    );
    let path = bench.environment.run_dir.join("fleet-bench.json");
    let document = json!({
        "operator_binary": bench.environment.operator_bin,
        "restarts": bench.settings.restarts,
        "concurrency": bench.settings.concurrency,
        "steady_seconds": bench.settings.steady.as_secs(),
        "sizes": sizes,
        "table": rows,
    });
    std::fs::write(&path, serde_json::to_string_pretty(&document)?).map_err(|error| {
        Failure::message(format!("failed to write {}: {error}", path.display()))
    })?;
    println!("written: {}", path.display());

    // The figures above are printed either way; these make the run fail.
    let mut failures = Vec::new();
    if sizes
        .iter()
        .any(|size| size.convergence_api_requests.is_none())
    {
        failures.push(format!(
            "the operator does not export {}_total: API requests per reconcile cannot be measured",
            operator::API_REQUESTS
        ));
    }
    for size in &sizes {
        if size.converged_seconds.is_none() {
            failures.push(format!("N={}: {}", size.bots, size.outcome));
        }
        // No kubelet: a healthy bot waits for its pod. Any other reason is a refusal
        // (a full service range, a quota, RBAC) that the figures would silently include.
        let refused: Vec<String> = size
            .ready_reasons
            .iter()
            .filter(|(reason, _)| reason.as_str() != "PodNotReady")
            .map(|(reason, count)| format!("{count} bots Ready={reason}"))
            .collect();
        if !refused.is_empty() {
            failures.push(format!(
                "N={}: {} (expected every bot at PodNotReady; the operator log says why)",
                size.bots,
                refused.join(", ")
            ));
        }
    }
    if failures.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        for failure in &failures {
            eprintln!("fleet-bench: {failure}");
        }
        Ok(ExitCode::FAILURE)
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("fleet-bench: {failure:?}");
            ExitCode::FAILURE
        }
    }
}
