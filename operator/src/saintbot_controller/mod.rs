//! The SaintBot controller: `reconcile` is a short driver of named steps —
//! `dereference` (reads) → `validate` (pure) → `build` (pure) → `apply` (writes children)
//! → `update_status` (writes status, Events). `run` wires the watches.

pub mod apply;
pub mod build;
pub mod dereference;
pub mod model_chain;
pub mod secrets;
pub mod update_status;
pub mod validate;

use parking_lot::Mutex;
use std::{
    collections::{BTreeMap, HashSet},
    sync::Arc,
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    Client, ResourceExt,
    runtime::{
        Controller,
        controller::{Action, Config},
        reflector::{ObjectRef, Store},
    },
};
use saint_config::ErrorChain;

use self::update_status::Outcome;
use crate::{
    cache::{self, BotFeeds, Sources, child_state::rollout},
    crd::{Contact, Role, SaintBot},
    events::Publisher,
    labels::FIELD_MANAGER,
    metrics::Metrics,
    selection::{bot_uses_contact, bot_uses_role},
    settings::OperatorSettings,
    status,
};

/// How long a healthy bot waits before a periodic re-check.
pub const RESYNC_INTERVAL: Duration = Duration::from_secs(600);

/// Why a reconcile failed. The variant name becomes the metric label and Event reason.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("failed to reconcile SaintBot without a namespace")]
    MissingNamespace,
    #[error(transparent)]
    Dereference(#[from] dereference::DereferenceError),
    #[error("spec cannot be rendered")]
    InvalidSpec(#[source] validate::ValidateError),
    #[error(transparent)]
    Apply(#[from] apply::ApplyError),
    #[error(transparent)]
    UpdateStatus(#[from] crate::status::StatusError),
}

impl ReconcileError {
    /// The variant name, for metrics and Event reasons.
    pub fn reason(&self) -> &'static str {
        match self {
            ReconcileError::MissingNamespace => "MissingNamespace",
            ReconcileError::Dereference(_) => "Dereference",
            ReconcileError::InvalidSpec(_) => "InvalidSpec",
            ReconcileError::Apply(_) => "Apply",
            ReconcileError::UpdateStatus(_) => "UpdateStatus",
        }
    }
}

/// Shared by the controller and the web server.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Event recorder (reporter `saint-operator`).
    pub recorder: Publisher,
    /// Operator-wide defaults.
    pub settings: OperatorSettings,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Saint's own resources as last seen.
    pub sources: Sources,
    /// The children as last seen.
    pub children: cache::Children,
    /// Consecutive transient failures per bot, for backoff.
    failures: Mutex<BTreeMap<String, u32>>,
    /// A clock that tests can pin.
    now: Box<dyn Fn() -> Time + Send + Sync>,
}

impl Context {
    /// A context with the real clock.
    pub fn new(
        client: Client,
        settings: OperatorSettings,
        metrics: Arc<Metrics>,
        sources: Sources,
        children: cache::Children,
    ) -> Self {
        let recorder = Publisher::new(client.clone(), FIELD_MANAGER);
        Self::with_clock(
            client,
            recorder,
            settings,
            metrics,
            sources,
            children,
            Box::new(|| Time(jiff::Timestamp::now())),
        )
    }

    /// A context with an explicit recorder and clock (tests).
    #[allow(clippy::too_many_arguments)]
    pub fn with_clock(
        client: Client,
        recorder: Publisher,
        settings: OperatorSettings,
        metrics: Arc<Metrics>,
        sources: Sources,
        children: cache::Children,
        now: Box<dyn Fn() -> Time + Send + Sync>,
    ) -> Self {
        Self {
            client,
            recorder,
            settings,
            metrics,
            sources,
            children,
            failures: Mutex::new(BTreeMap::new()),
            now,
        }
    }

    fn failure_count(&self, key: &str, failed: bool) -> u32 {
        let mut failures = self.failures.lock();
        if failed {
            let count = failures.entry(key.to_string()).or_insert(0);
            *count += 1;
            *count
        } else {
            failures.remove(key);
            0
        }
    }
}

/// How often the readiness gauge is checked against the bots that still exist.
const METRICS_PRUNE_INTERVAL: Duration = Duration::from_secs(15);

/// Keeps the readiness gauge to bots in the controller's cache: a deletion starts no
/// reconcile, so without this a deleted bot would be counted until the operator
/// restarts. Waits for the first full list, so a still-empty cache drops nothing.
async fn forget_deleted_bots(store: Store<SaintBot>, metrics: Arc<Metrics>) {
    if store.wait_until_ready().await.is_err() {
        return;
    }
    let mut interval = tokio::time::interval(METRICS_PRUNE_INTERVAL);
    loop {
        interval.tick().await;
        metrics.retain_bots(|key| {
            key.split_once('/').is_some_and(|(namespace, name)| {
                store.get(&ObjectRef::new(name).within(namespace)).is_some()
            })
        });
    }
}

pub(crate) fn bot_key(bot: &SaintBot) -> String {
    key_of(bot)
}

/// `namespace/name` of any object, the key of metrics and mapping memories.
pub(crate) fn key_of<K: kube::Resource>(object: &K) -> String {
    format!(
        "{}/{}",
        object.meta().namespace.clone().unwrap_or_default(),
        object.meta().name.clone().unwrap_or_default()
    )
}

/// Reconciles one SaintBot: renders and applies its children, then reports status.
pub async fn reconcile(
    bot: Arc<SaintBot>,
    context: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let started = Instant::now();
    context.metrics.reconciles.inc();
    let result = reconcile_steps(&bot, &context).await;
    context
        .metrics
        .duration
        .observe(started.elapsed().as_secs_f64());
    if let Err(error) = &result {
        context.metrics.record_error(error.reason());
        publish_first_failure(&bot, error, &context).await;
    }
    result
}

/// dereference → validate → build → apply → (what keeps the pod from running, the
/// model chain) → update_status → when to look again. Each step's failure that the
/// status shows is reported there before the error returns.
async fn reconcile_steps(bot: &SaintBot, context: &Context) -> Result<Action, ReconcileError> {
    let namespace = bot.namespace().ok_or(ReconcileError::MissingNamespace)?;
    let now = (context.now)();
    let dereferenced =
        dereference::dereference(&context.client, &context.sources, bot, &namespace).await?;
    let validated = validate_or_report(bot, &dereferenced, context, &now).await?;
    let children = build::build_children(&validated);
    let config_hash = build::config_map::config_hash(&validated);
    let applied = apply_or_report(bot, &validated, &children, context, &namespace, &now).await?;
    // A running (or suspended) bot had its Secrets when its pod started and has no pod
    // problem to look for.
    let running = validated.suspend || applied.pod_ready;
    let missing_secrets = if running {
        None
    } else {
        missing_secrets(bot, &children, context, &namespace).await
    };
    let waiting_for_secrets = missing_secrets.is_some();
    let (pod_problem, pods_reported) = if running || waiting_for_secrets {
        (None, false)
    } else {
        pod_problem(bot, &validated, &applied, context, &namespace).await
    };
    let model_available = model_available(bot, &validated, context, &namespace, now.0).await;
    let chain_failing = model_available.0 == status::Reason::ChainFailing;
    let outcome = Outcome::Applied {
        bot: &validated,
        config_hash,
        pod_ready: applied.pod_ready,
        missing_secrets,
        // A withheld webhook Ingress (`HostClaimed`) first: it is the spec's, not the pod's.
        pod_problem: validated.webhook_problem.clone().or(pod_problem),
        model_available,
    };
    update_status::report(context, bot, &outcome, &now).await?;
    // Secrets and pods are not watched: a bot waiting for a Secret, or whose pod a
    // kubelet runs but is not ready (starting, or crashing), looks again, backing off.
    let looking_again = waiting_for_secrets || pods_reported;
    let failures = context.failure_count(&bot_key(bot), looking_again);
    if looking_again {
        return Ok(Action::requeue(backoff(failures)));
    }
    // A failing chain's report stops counting when its agent is replaced, which nothing
    // watched says: look again soon.
    if chain_failing {
        return Ok(Action::requeue(model_chain::RECHECK));
    }
    Ok(Action::requeue(RESYNC_INTERVAL))
}

/// The validate step; an invalid spec is reported in status (`Ready=False`) first.
async fn validate_or_report(
    bot: &SaintBot,
    dereferenced: &dereference::Dereferenced,
    context: &Context,
    now: &Time,
) -> Result<validate::ValidatedSaintBot, ReconcileError> {
    match validate::validate(bot, dereferenced, &context.settings) {
        Ok(validated) => Ok(validated),
        Err(error) => {
            let outcome = Outcome::Invalid {
                reason: error.reason(),
                message: ErrorChain(&error).to_string(),
            };
            update_status::report(context, bot, &outcome, now).await?;
            Err(ReconcileError::InvalidSpec(error))
        }
    }
}

/// The apply step; a child the API server refuses is reported in status first.
async fn apply_or_report(
    bot: &SaintBot,
    validated: &validate::ValidatedSaintBot,
    children: &build::Children,
    context: &Context,
    namespace: &str,
    now: &Time,
) -> Result<apply::Applied, ReconcileError> {
    match apply::apply(
        &context.client,
        &context.metrics,
        &context.children,
        namespace,
        children,
        &validated.owner_reference,
    )
    .await
    {
        Ok(applied) => Ok(applied),
        // A write that lost a race (the cache was a step behind) is no failure to
        // report: the retry starts from the newer state.
        Err(error) if error.is_conflict() => Err(ReconcileError::Apply(error)),
        Err(error) => {
            let outcome = Outcome::ApplyFailed {
                message: format!(
                    "the API server refused {} {:?}: {}",
                    error.kind,
                    error.name,
                    error.refusal()
                ),
            };
            update_status::report(context, bot, &outcome, now).await?;
            Err(ReconcileError::Apply(error))
        }
    }
}

/// The Secrets a bot whose pod does not run is missing: the pod's, then the webhook
/// Ingress's certificate (which the pod never mounts). A failed look is logged, not
/// reported.
async fn missing_secrets(
    bot: &SaintBot,
    children: &build::Children,
    context: &Context,
    namespace: &str,
) -> Option<String> {
    let pod = match secrets::missing(
        &context.client,
        namespace,
        secrets::secret_uses(&children.deployment),
    )
    .await
    {
        Ok(missing) if missing.is_empty() => None,
        Ok(missing) => Some(secrets::describe(&missing, namespace)),
        Err(error) => {
            tracing::warn!(bot = %bot_key(bot), error = %ErrorChain(&error), "failed to check the bot's Secrets; not reported");
            None
        }
    };
    let tls = match secrets::missing_tls_secret(
        &context.client,
        namespace,
        children.webhook_ingress.as_ref(),
    )
    .await
    {
        Ok(tls) => tls,
        Err(error) => {
            tracing::warn!(bot = %bot_key(bot), error = %ErrorChain(&error), "failed to check the webhook Ingress's TLS Secret; not reported");
            None
        }
    };
    match (pod, tls) {
        (Some(pod), Some(tls)) => Some(format!("{pod}; {tls}")),
        (pod, tls) => pod.or(tls),
    }
}

/// What keeps the pod from running, when its Secrets do not explain it: the
/// Deployment's own conditions (it is watched), else the pod's waiting containers
/// (pods are not watched: read at each reconcile of a bot whose pod is not ready).
/// Also whether a kubelet reports on the pods, so the bot looks again.
async fn pod_problem(
    bot: &SaintBot,
    validated: &validate::ValidatedSaintBot,
    applied: &apply::Applied,
    context: &Context,
    namespace: &str,
) -> (Option<rollout::Problem>, bool) {
    if let Some(problem) = applied.rollout_problem.clone() {
        return (Some(problem), false);
    }
    match rollout::agent_pods(&context.client, namespace, &validated.name).await {
        Ok(pods) => (
            rollout::pod_problem(&pods),
            rollout::reported_by_a_kubelet(&pods),
        ),
        Err(error) => {
            tracing::debug!(bot = %bot_key(bot), error = %ErrorChain(&error), "failed to list the bot's pods; not reported");
            (None, false)
        }
    }
}

/// `ModelAvailable` from the agent's report of its model chain (its Events, watched);
/// the pods are read only to tell whether a failing report comes from the agent
/// running now.
async fn model_available(
    bot: &SaintBot,
    validated: &validate::ValidatedSaintBot,
    context: &Context,
    namespace: &str,
    now: jiff::Timestamp,
) -> (status::Reason, String) {
    let chain_report = context
        .children
        .chain_reports
        .get(namespace, &validated.name);
    let bot_uid = bot.metadata.uid.as_deref().unwrap_or_default();
    let chain_pods = if model_chain::needs_pods(chain_report.as_ref(), bot_uid, now) {
        match rollout::agent_pods(&context.client, namespace, &validated.name).await {
            Ok(pods) => Some(pods),
            Err(error) => {
                tracing::debug!(bot = %bot_key(bot), error = %ErrorChain(&error), "failed to list the bot's pods; its model-chain report is taken as current");
                None
            }
        }
    } else {
        None
    };
    model_chain::model_available(chain_report.as_ref(), bot_uid, chain_pods.as_deref(), now)
}

/// A Warning Event named after the error variant, on the first of a run of transient
/// failures only (retries of the same failure stay quiet; the invalid-spec path has its
/// own status-driven Events).
async fn publish_first_failure(bot: &SaintBot, error: &ReconcileError, context: &Context) {
    // An invalid spec and a refused child are reported through status, whose
    // transitions have their own Events.
    if matches!(
        error,
        ReconcileError::InvalidSpec(_) | ReconcileError::Apply(_)
    ) {
        return;
    }
    let already_failing = context.failures.lock().contains_key(&bot_key(bot));
    if already_failing {
        return;
    }
    let event = kube::runtime::events::Event {
        type_: kube::runtime::events::EventType::Warning,
        reason: error.reason().to_string(),
        note: Some(ErrorChain(error).to_string().chars().take(900).collect()),
        action: "Reconcile".to_string(),
        secondary: None,
    };
    status::publish(&context.recorder, bot, &[event]).await;
}

/// What to do after a failed reconcile: retry with exponential backoff from 5 s up to 5
/// minutes. That includes an invalid spec: what it misses (a Role, a skill ConfigMap)
/// may exist already in a watch that runs a step behind the bot's — a Role created just
/// before its bot can reach the cache after the bot was judged, and its own event before
/// the bot was in the cache to be woken. A retry of an unchanged invalid bot writes
/// nothing. Only a bot without a namespace (impossible for this kind) waits for a change.
pub fn error_policy(bot: Arc<SaintBot>, error: &ReconcileError, context: Arc<Context>) -> Action {
    tracing::warn!(bot = %bot_key(&bot), error = %ErrorChain(error), "reconcile failed");
    match error {
        ReconcileError::MissingNamespace => Action::await_change(),
        _ => Action::requeue(backoff(context.failure_count(&bot_key(&bot), true))),
    }
}

/// Delay after `failures` consecutive transient failures.
pub fn backoff(failures: u32) -> Duration {
    let seconds = 5u64.saturating_mul(1u64 << failures.saturating_sub(1).min(10));
    Duration::from_secs(seconds.min(300))
}

/// Remembers what each object last mapped to (the bots a Contact or Role affected, the
/// Contacts a bot used), so a change that moves it away still wakes what it left (a bot
/// must drop a Contact from its config; a Contact must stop counting as used).
pub struct MappingMemory<T: kube::Resource<DynamicType = ()> = SaintBot> {
    previous: Mutex<BTreeMap<String, HashSet<ObjectRef<T>>>>,
}

impl<T: kube::Resource<DynamicType = ()>> Default for MappingMemory<T> {
    fn default() -> Self {
        Self {
            previous: Mutex::new(BTreeMap::new()),
        }
    }
}

impl<T: kube::Resource<DynamicType = ()>> MappingMemory<T> {
    /// Returns the union of `current` and what `key` mapped to last time, and stores `current`.
    pub fn remember(&self, key: String, current: HashSet<ObjectRef<T>>) -> Vec<ObjectRef<T>> {
        let mut previous = self.previous.lock();
        let mut all = previous.insert(key, current.clone()).unwrap_or_default();
        all.extend(current);
        all.into_iter().collect()
    }
}

/// The bots in `store` that use `contact`.
pub fn bots_for_contact(
    store: &Store<SaintBot>,
    contact: &Contact,
) -> HashSet<ObjectRef<SaintBot>> {
    store
        .state()
        .iter()
        .filter(|bot| bot_uses_contact(bot, contact))
        .map(|bot| ObjectRef::from(bot.as_ref()))
        .collect()
}

/// The bots in `store` that use `role`.
pub fn bots_for_role(store: &Store<SaintBot>, role: &Role) -> HashSet<ObjectRef<SaintBot>> {
    store
        .state()
        .iter()
        .filter(|bot| bot_uses_role(bot, role))
        .map(|bot| ObjectRef::from(bot.as_ref()))
        .collect()
}

/// The other bots in `store` claiming the webhook host `bot` claims: woken when `bot`
/// changes or goes, so the next in line takes a host it gave up
/// (`validate::webhook_ingress`).
pub fn bots_sharing_host(store: &Store<SaintBot>, bot: &SaintBot) -> HashSet<ObjectRef<SaintBot>> {
    let others = store.state();
    validate::webhook_ingress::claims_sharing_host(bot, others.iter().map(|other| other.as_ref()))
        .into_iter()
        .map(|claim| ObjectRef::new(&claim.name).within(&claim.namespace))
        .collect()
}

/// Runs the SaintBot controller until `shutdown` resolves: its own kind, Contacts and
/// Roles (mapped to the bots that use them, and to those that used them before), and
/// every child kind (mapped through owner references) come from the operator's caches.
/// At most `concurrency` bots are reconciled at once.
pub async fn run(
    context: Arc<Context>,
    feeds: BotFeeds,
    concurrency: u16,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let store = context.sources.bots.clone();
    let pruner = tokio::spawn(forget_deleted_bots(store.clone(), context.metrics.clone()));
    let contact_store = store.clone();
    let role_store = store.clone();
    // The feeds carry changes after the first list; what each Contact and Role maps to
    // now is learnt from the full stores, so the first change of one still wakes the
    // bots it leaves.
    let contact_memory = Arc::new(MappingMemory::default());
    for contact in context.sources.contacts.state() {
        contact_memory.remember(key_of(contact.as_ref()), bots_for_contact(&store, &contact));
    }
    let role_memory = Arc::new(MappingMemory::default());
    for role in context.sources.roles.state() {
        role_memory.remember(key_of(role.as_ref()), bots_for_role(&store, &role));
    }
    // A bot remembers who shared its host, so moving to another host (or being deleted:
    // the feed passes deletions on) still wakes those it left.
    let host_store = store.clone();
    let host_memory = Arc::new(MappingMemory::default());
    for bot in store.state() {
        host_memory.remember(key_of(bot.as_ref()), bots_sharing_host(&store, &bot));
    }
    // Our own writes come back as child events; a short debounce folds a burst of them
    // into one reconcile.
    let config = Config::default()
        .concurrency(concurrency)
        .debounce(Duration::from_millis(500));
    Controller::for_stream(feeds.bots, store)
        .with_config(config)
        // Every bot once at start: the feeds do not carry the first list.
        .reconcile_all_on(futures::stream::once(async {}))
        .reconcile_on(feeds.service_accounts)
        .reconcile_on(feeds.role_bindings)
        .reconcile_on(feeds.config_maps)
        .reconcile_on(feeds.claims)
        .reconcile_on(feeds.services)
        .reconcile_on(feeds.network_policies)
        .reconcile_on(feeds.ingresses)
        .reconcile_on(feeds.deployments)
        .reconcile_on(feeds.chain_reports)
        .watches_stream(feeds.contacts, move |contact: Contact| {
            contact_memory.remember(key_of(&contact), bots_for_contact(&contact_store, &contact))
        })
        .watches_stream(feeds.roles, move |role: Role| {
            role_memory.remember(key_of(&role), bots_for_role(&role_store, &role))
        })
        .watches_stream(feeds.bots_sharing_host, move |bot: SaintBot| {
            host_memory.remember(key_of(&bot), bots_sharing_host(&host_store, &bot))
        })
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(bot = %object, "reconciled"),
                Err(error) => tracing::debug!(error = %ErrorChain(&error), "reconcile error"),
            }
        })
        .await;
    pruner.abort();
}

#[cfg(test)]
mod tests {
    use kube::runtime::watcher;

    use super::*;

    #[test]
    fn backoff_doubles_from_five_seconds_to_five_minutes() {
        assert_eq!(backoff(1), Duration::from_secs(5));
        assert_eq!(backoff(2), Duration::from_secs(10));
        assert_eq!(backoff(4), Duration::from_secs(40));
        assert_eq!(backoff(30), Duration::from_secs(300));
    }

    #[test]
    fn a_contact_leaving_a_bot_still_wakes_that_bot_once() {
        let memory = MappingMemory::default();
        let old_bot = ObjectRef::<SaintBot>::new("old-bot").within("acme");
        let new_bot = ObjectRef::<SaintBot>::new("new-bot").within("acme");
        assert_eq!(
            memory.remember("acme/acme-ana".into(), HashSet::from([old_bot.clone()])),
            vec![old_bot.clone()]
        );
        let woken: HashSet<_> = memory
            .remember("acme/acme-ana".into(), HashSet::from([new_bot.clone()]))
            .into_iter()
            .collect();
        assert_eq!(woken, HashSet::from([old_bot, new_bot.clone()]));
        assert_eq!(
            memory.remember("acme/acme-ana".into(), HashSet::from([new_bot.clone()])),
            vec![new_bot]
        );
    }

    fn bot(name: &str, contact_selector: Option<serde_json::Value>) -> SaintBot {
        let mut spec = serde_json::json!({"model": {"provider": "anthropic", "name": "m"}});
        if let Some(selector) = contact_selector {
            spec["contactSelector"] = selector;
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "saint.work/v1alpha1", "kind": "SaintBot",
            "metadata": {"name": name, "namespace": "acme"}, "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn a_contact_change_maps_to_exactly_the_bots_it_belongs_to() {
        let (store, mut writer) = kube::runtime::reflector::store::<SaintBot>();
        for bot in [
            bot("my-bot", None),
            bot("other-bot", None),
            bot(
                "sales-bot",
                Some(serde_json::json!({"matchLabels": {"team": "sales"}})),
            ),
        ] {
            writer.apply_watcher_event(&watcher::Event::Apply(bot));
        }
        let contact: Contact = serde_json::from_value(serde_json::json!({
            "apiVersion": "saint.work/v1alpha1", "kind": "Contact",
            "metadata": {"name": "acme-ana", "namespace": "acme"},
            "spec": {"displayName": "Ana", "role": "owner", "bots": ["my-bot", "sales-bot"]},
        }))
        .unwrap();
        let names: std::collections::BTreeSet<String> = bots_for_contact(&store, &contact)
            .into_iter()
            .map(|reference| reference.name)
            .collect();
        assert_eq!(
            names,
            std::collections::BTreeSet::from(["my-bot".to_string()])
        );
    }
}
