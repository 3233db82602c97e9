//! What bots' agents report about their model chains. When a call fails on every model
//! of its failover chain, a bot's agent publishes a Warning Event `ModelChainFailing` on
//! its SaintBot (again every ten minutes while no model answers), and a Normal
//! `ModelChainRecovered` once one answers again and stays so for a minute
//! (`agent-pod/src/runtime/chain_health.rs`). Only the agent knows, and Events are what
//! its account may already write: no new right for it, no admission rule.
//!
//! One watch of the Events the agents report (field-selected by their reporting
//! controller, so no other Event reaches the operator) keeps the latest report of each
//! bot, a few hundred bytes, and wakes the bot when it changes. The first list wakes
//! nobody: every bot is reconciled once at start. An Event that expires takes its
//! report with it. What a report means for the SaintBot's `ModelAvailable` condition
//! (is it current, is its agent still the one running) is
//! [`crate::saintbot_controller::model_chain`]'s.

use std::{collections::HashMap, sync::Arc};

use futures::{StreamExt, channel::mpsc};
use k8s_openapi::api::core::v1::Event;
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, reflector::ObjectRef, watcher},
};
use saint_config::ErrorChain;
use tokio::sync::watch;

use super::children::{Driver, Wakes, WatchStopped};
use crate::crd::SaintBot;
use parking_lot::RwLock;

// The three names the agent publishes under. They belong in `saint-config` with the
// other contracts between the processes; until they move there,
// `agent-pod/tests/failover.rs` (`the_operator_reads_the_reasons_the_agent_publishes`)
// holds both sides equal.

/// The reporting controller of the agent's Events.
pub const AGENT_REPORTER: &str = "saint-agent";
/// Reason of the agent's Warning: every model of the chain failed a call.
pub const MODEL_CHAIN_FAILING: &str = "ModelChainFailing";
/// Reason of the agent's Normal Event: a model answers again.
pub const MODEL_CHAIN_RECOVERED: &str = "ModelChainRecovered";

/// One bot's latest model-chain report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainReport {
    /// `ModelChainFailing` (else `ModelChainRecovered`).
    pub failing: bool,
    /// When it was last said (a repeat moves it on).
    pub at: jiff::Timestamp,
    /// The agent's note: entries, models and outcome labels.
    pub note: Box<str>,
    /// The pod whose agent reported (its hostname); empty when not given.
    pub instance: Box<str>,
    /// The uid of the SaintBot it is about.
    pub bot_uid: Box<str>,
    /// The Event it came from.
    event: Box<str>,
}

/// `namespace/name`.
fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// The bot (`namespace/name`) and report of an agent's Event, when it is a model-chain
/// report about a SaintBot. Pure.
pub fn report_of(event: &Event) -> Option<(String, ChainReport)> {
    let failing = match event.reason.as_deref()? {
        MODEL_CHAIN_FAILING => true,
        MODEL_CHAIN_RECOVERED => false,
        _ => return None,
    };
    if event.reporting_component.as_deref() != Some(AGENT_REPORTER) {
        return None;
    }
    let regarding = &event.involved_object;
    let about_a_bot = regarding.kind.as_deref() == Some("SaintBot")
        && regarding
            .api_version
            .as_deref()
            .is_some_and(|version| version.starts_with("saint.work/"));
    if !about_a_bot {
        return None;
    }
    let namespace = event.metadata.namespace.as_deref()?;
    // An Event lives in the namespace of what it is about.
    if regarding
        .namespace
        .as_deref()
        .is_some_and(|other| other != namespace)
    {
        return None;
    }
    let at = event
        .series
        .as_ref()
        .and_then(|series| series.last_observed_time.as_ref())
        .map(|time| time.0)
        .or_else(|| event.event_time.as_ref().map(|time| time.0))
        .or_else(|| event.last_timestamp.as_ref().map(|time| time.0))
        .or_else(|| {
            event
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|time| time.0)
        })?;
    Some((
        key(namespace, regarding.name.as_deref()?),
        ChainReport {
            failing,
            at,
            note: event.message.as_deref().unwrap_or_default().into(),
            instance: event
                .reporting_instance
                .as_deref()
                .unwrap_or_default()
                .into(),
            bot_uid: regarding.uid.as_deref().unwrap_or_default().into(),
            event: key(
                namespace,
                event.metadata.name.as_deref().unwrap_or_default(),
            )
            .into(),
        },
    ))
}

/// The latest report of each bot, shared by the watch that fills it and the reconciles
/// that read it.
#[derive(Clone)]
pub struct ChainReports {
    records: Arc<RwLock<HashMap<String, ChainReport>>>,
    listed: watch::Receiver<bool>,
}

/// Fills [`ChainReports`] from watch events and says which bots they concern.
pub struct Recorder {
    records: Arc<RwLock<HashMap<String, ChainReport>>>,
    listed: watch::Sender<bool>,
}

impl ChainReports {
    /// A store and the handle that fills it.
    pub fn new() -> (Self, Recorder) {
        let (sender, listed) = watch::channel(false);
        let records = Arc::new(RwLock::new(HashMap::new()));
        (
            Self {
                records: records.clone(),
                listed,
            },
            Recorder {
                records,
                listed: sender,
            },
        )
    }

    /// A store that has listed `events` (tests and offline rendering).
    pub fn holding(events: &[Event]) -> Self {
        let (store, recorder) = Self::new();
        recorder.relist(events);
        recorder.listed();
        store
    }

    /// The latest report about bot `namespace/name`, if any.
    pub fn get(&self, namespace: &str, name: &str) -> Option<ChainReport> {
        self.records.read().get(&key(namespace, name)).cloned()
    }

    /// How many bots have a report.
    pub fn len(&self) -> usize {
        self.records.read().len()
    }

    /// Whether no bot has a report.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until the watch has listed once.
    pub async fn wait_until_ready(&self) -> Result<(), WatchStopped> {
        let mut listed = self.listed.clone();
        listed
            .wait_for(|listed| *listed)
            .await
            .map(|_| ())
            .map_err(|_| WatchStopped)
    }
}

/// The bot `namespace/name` as the controller names it.
fn bot_ref(bot_key: &str) -> ObjectRef<SaintBot> {
    let (namespace, name) = bot_key.split_once('/').unwrap_or(("", bot_key));
    ObjectRef::new(name).within(namespace)
}

/// The latest report per bot among `events`.
fn latest(events: &[Event]) -> HashMap<String, ChainReport> {
    let mut latest: HashMap<String, ChainReport> = HashMap::new();
    for (bot, report) in events.iter().filter_map(report_of) {
        match latest.get(&bot) {
            Some(kept) if kept.at > report.at => {}
            _ => {
                latest.insert(bot, report);
            }
        }
    }
    latest
}

impl Recorder {
    fn write(&self) -> parking_lot::RwLockWriteGuard<'_, HashMap<String, ChainReport>> {
        self.records.write()
    }

    /// Records one created or changed Event; returns the bot to wake when its latest
    /// report changed.
    pub fn apply(&self, event: &Event) -> Option<ObjectRef<SaintBot>> {
        let (bot, report) = report_of(event)?;
        let mut records = self.write();
        match records.get(&bot) {
            // An older report (an earlier Event changed, or delivered late) changes nothing.
            Some(kept) if kept.event != report.event && kept.at > report.at => None,
            Some(kept) if *kept == report => None,
            _ => {
                records.insert(bot.clone(), report);
                Some(bot_ref(&bot))
            }
        }
    }

    /// Forgets an expired or deleted Event's report if it is a bot's latest; returns
    /// that bot, to be woken.
    pub fn delete(&self, event: &Event) -> Option<ObjectRef<SaintBot>> {
        let (bot, report) = report_of(event)?;
        let mut records = self.write();
        if records.get(&bot)?.event != report.event {
            return None;
        }
        records.remove(&bot);
        Some(bot_ref(&bot))
    }

    /// Replaces every report with those of a complete list; returns the bots whose
    /// latest report changed or went.
    pub fn relist(&self, events: &[Event]) -> Vec<ObjectRef<SaintBot>> {
        let listed = latest(events);
        let mut records = self.write();
        let mut wake: Vec<ObjectRef<SaintBot>> = listed
            .iter()
            .filter(|(bot, report)| records.get(*bot) != Some(*report))
            .map(|(bot, _)| bot_ref(bot))
            .collect();
        wake.extend(
            records
                .keys()
                .filter(|bot| !listed.contains_key(*bot))
                .map(|bot| bot_ref(bot)),
        );
        *records = listed;
        wake
    }

    /// Marks the store listed.
    pub fn listed(&self) {
        self.listed.send_replace(true);
    }
}

/// The watch of the agents' reports: its store, the bots it wakes and the driver.
pub struct ChainReportWatch {
    pub store: ChainReports,
    pub wakes: Wakes,
    pub driver: Driver,
}

/// Builds the watch of the agents' model-chain Events (in `namespace`, or all).
/// Nothing runs until the driver does.
pub fn watch_chain_reports(client: &Client, namespace: Option<&str>) -> ChainReportWatch {
    let api: Api<Event> = match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    let events = watcher(
        api,
        watcher::Config::default()
            .fields(&format!("reportingComponent={AGENT_REPORTER}"))
            .any_semantic(),
    )
    .default_backoff();
    let (store, recorder) = ChainReports::new();
    let (sender, wakes) = mpsc::unbounded();
    ChainReportWatch {
        store,
        wakes,
        driver: Box::pin(drive(events, recorder, sender)),
    }
}

/// Feeds `recorder` from the watch's events and sends the bots to wake.
async fn drive<S>(events: S, recorder: Recorder, sender: mpsc::UnboundedSender<ObjectRef<SaintBot>>)
where
    S: futures::Stream<Item = watcher::Result<watcher::Event<Event>>>,
{
    futures::pin_mut!(events);
    let mut listed_once = false;
    let mut listing: Vec<Event> = Vec::new();
    while let Some(event) = events.next().await {
        let woken: Vec<ObjectRef<SaintBot>> = match event {
            Ok(watcher::Event::Apply(event)) => recorder.apply(&event).into_iter().collect(),
            Ok(watcher::Event::Delete(event)) => recorder.delete(&event).into_iter().collect(),
            Ok(watcher::Event::Init) => {
                listing.clear();
                continue;
            }
            Ok(watcher::Event::InitApply(event)) => {
                // Only reports are kept while the list lasts.
                if report_of(&event).is_some() {
                    listing.push(event);
                }
                continue;
            }
            Ok(watcher::Event::InitDone) => {
                let woken = recorder.relist(&std::mem::take(&mut listing));
                recorder.listed();
                // The first list wakes nobody: every bot is reconciled once at start.
                let first = !listed_once;
                listed_once = true;
                if first {
                    continue;
                }
                woken
            }
            Err(error) => {
                tracing::warn!(kind = "Event", error = %ErrorChain(&error), "watch of the agents' model-chain reports failed; retrying with backoff");
                continue;
            }
        };
        for bot in woken {
            tracing::trace!(bot = %bot, "model-chain report changed");
            // A closed feed belongs to a controller that has stopped.
            let _ = sender.unbounded_send(bot);
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::stream;
    use serde_json::json;

    use super::*;

    /// An agent's Event as the core API shows one made through `events.k8s.io`.
    fn agent_event(name: &str, reason: &str, at: &str, note: &str) -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "acme",
                "creationTimestamp": "2026-01-01T00:00:00Z"},
            "involvedObject": {"apiVersion": "saint.work/v1alpha1", "kind": "SaintBot",
                "name": "my-bot", "namespace": "acme", "uid": "u1"},
            "reason": reason, "message": note, "type": "Warning",
            "eventTime": at, "reportingComponent": "saint-agent",
            "reportingInstance": "my-bot-7d9c-abcde",
        }))
        .unwrap()
    }

    #[test]
    fn only_the_agents_chain_reports_about_a_saintbot_count_and_a_series_moves_their_time() {
        let failing = agent_event(
            "e1",
            MODEL_CHAIN_FAILING,
            "2026-01-01T10:00:00.000000Z",
            "every model failed",
        );
        let (bot, report) = report_of(&failing).unwrap();
        assert_eq!(bot, "acme/my-bot");
        assert!(report.failing);
        assert_eq!(&*report.note, "every model failed");
        assert_eq!(&*report.instance, "my-bot-7d9c-abcde");
        assert_eq!(&*report.bot_uid, "u1");
        assert_eq!(report.at, "2026-01-01T10:00:00Z".parse().unwrap());

        let mut repeated = failing.clone();
        repeated.series = Some(
            serde_json::from_value(
                json!({"count": 2, "lastObservedTime": "2026-01-01T10:06:00.000000Z"}),
            )
            .unwrap(),
        );
        assert_eq!(
            report_of(&repeated).unwrap().1.at,
            "2026-01-01T10:06:00Z".parse().unwrap()
        );

        let mut channel = failing.clone();
        channel.reason = Some("ChannelCredentialsRefused".into());
        let mut forged_reporter = failing.clone();
        forged_reporter.reporting_component = Some("saint-operator".into());
        let mut about_a_pod = failing.clone();
        about_a_pod.involved_object.kind = Some("Pod".into());
        about_a_pod.involved_object.api_version = Some("v1".into());
        for other in [channel, forged_reporter, about_a_pod] {
            assert_eq!(report_of(&other), None, "{other:?}");
        }
    }

    #[tokio::test]
    async fn the_latest_report_is_kept_changes_wake_the_bot_and_expiry_forgets_it() {
        let failing = agent_event("e1", MODEL_CHAIN_FAILING, "2026-01-01T10:00:00Z", "x");
        let recovered = agent_event("e2", MODEL_CHAIN_RECOVERED, "2026-01-01T10:05:00Z", "y");
        let (store, recorder) = ChainReports::new();
        let (sender, wakes) = mpsc::unbounded();
        let events = vec![
            watcher::Event::Init,
            watcher::Event::InitApply(failing.clone()),
            watcher::Event::InitDone,
            // The same report again: nothing new.
            watcher::Event::Apply(failing.clone()),
            watcher::Event::Apply(recovered.clone()),
            // The older Event, changed late: the recovery stays the latest.
            watcher::Event::Apply(failing.clone()),
            // The failing Event expires: not the latest, nobody wakes.
            watcher::Event::Delete(failing.clone()),
        ];
        drive(stream::iter(events.into_iter().map(Ok)), recorder, sender).await;
        let woken: Vec<String> = wakes.map(|bot| bot.name).collect().await;
        assert_eq!(woken, ["my-bot"], "the first list wakes nobody");
        let kept = store.get("acme", "my-bot").unwrap();
        assert!(!kept.failing);

        let (store, recorder) = ChainReports::new();
        let (sender, wakes) = mpsc::unbounded();
        let events = vec![
            watcher::Event::Init,
            watcher::Event::InitDone,
            watcher::Event::Apply(failing.clone()),
            watcher::Event::Delete(failing),
        ];
        drive(stream::iter(events.into_iter().map(Ok)), recorder, sender).await;
        let woken: Vec<String> = wakes.map(|bot| bot.name).collect().await;
        assert_eq!(woken, ["my-bot", "my-bot"]);
        assert!(store.is_empty());
    }
}
