//! The bench's view of how far the fleet is: one watch on the namespace's SaintBots.
//! Waiting for convergence then costs the API server one watch event per status write,
//! not a list of every bot (megabytes of JSON at 1,000 bots) twice a second, which on a
//! 2-core machine competed with the operator being measured.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use futures::StreamExt;
use kube::{
    Api, Client,
    api::DynamicObject,
    runtime::{WatchStreamExt, watcher},
};
use serde::Deserialize;
use tokio::task::JoinHandle;

use crate::{FleetState, fleet::Kind};
use parking_lot::Mutex;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProgressStatus {
    observed_generation: Option<i64>,
    #[serde(default)]
    conditions: Vec<ProgressCondition>,
}

#[derive(Deserialize)]
struct ProgressCondition {
    #[serde(rename = "type")]
    type_: String,
    #[serde(default)]
    reason: String,
}

/// What the bench reads of one bot.
#[derive(Clone, Debug, Default)]
struct BotProgress {
    generation: Option<i64>,
    observed_generation: Option<i64>,
    /// The `Ready` condition's reason, if there is one.
    ready_reason: Option<String>,
}

impl BotProgress {
    fn of(bot: &DynamicObject) -> Self {
        let status: Option<ProgressStatus> = bot
            .data
            .get("status")
            .and_then(|status| serde_json::from_value(status.clone()).ok());
        Self {
            generation: bot.metadata.generation,
            observed_generation: status
                .as_ref()
                .and_then(|status| status.observed_generation),
            ready_reason: status.and_then(|status| {
                status
                    .conditions
                    .into_iter()
                    .find(|condition| condition.type_ == "Ready")
                    .map(|condition| condition.reason)
            }),
        }
    }
}

#[derive(Default)]
struct Seen {
    bots: HashMap<String, BotProgress>,
    /// What a re-list has delivered so far; replaces `bots` when it is done.
    relisting: HashMap<String, BotProgress>,
    errors: usize,
}

/// A running watch of one namespace's SaintBots; stops when dropped.
pub struct ProgressWatch {
    seen: Arc<Mutex<Seen>>,
    task: JoinHandle<()>,
}

impl ProgressWatch {
    pub fn start(client: &Client, namespace: &str) -> Self {
        let api = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            namespace,
            &Kind::SaintBot.resource(),
        );
        let seen = Arc::new(Mutex::new(Seen::default()));
        let writer = seen.clone();
        let task = tokio::spawn(async move {
            let events = watcher(api, watcher::Config::default()).default_backoff();
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                let mut seen = writer.lock();
                match event {
                    Ok(watcher::Event::Apply(bot)) => {
                        seen.bots.insert(
                            bot.metadata.name.clone().unwrap_or_default(),
                            BotProgress::of(&bot),
                        );
                    }
                    Ok(watcher::Event::Delete(bot)) => {
                        seen.bots
                            .remove(bot.metadata.name.as_deref().unwrap_or_default());
                    }
                    Ok(watcher::Event::Init) => seen.relisting.clear(),
                    Ok(watcher::Event::InitApply(bot)) => {
                        seen.relisting.insert(
                            bot.metadata.name.clone().unwrap_or_default(),
                            BotProgress::of(&bot),
                        );
                    }
                    Ok(watcher::Event::InitDone) => seen.bots = std::mem::take(&mut seen.relisting),
                    Err(_) => seen.errors += 1,
                }
            }
        });
        Self { seen, task }
    }

    /// How far the fleet is now. `Err` while the watch keeps failing (no state yet).
    pub fn state(&self) -> Result<FleetState, String> {
        let seen = self.seen.lock();
        if seen.bots.is_empty() && seen.errors > 0 {
            return Err(format!("the SaintBot watch failed {} times", seen.errors));
        }
        let mut state = FleetState {
            listed: seen.bots.len(),
            converged: 0,
            ready_reasons: BTreeMap::new(),
        };
        for bot in seen.bots.values() {
            if bot.generation.is_some() && bot.observed_generation == bot.generation {
                state.converged += 1;
            }
            let reason = bot
                .ready_reason
                .clone()
                .unwrap_or_else(|| "none".to_owned());
            *state.ready_reasons.entry(reason).or_default() += 1;
        }
        Ok(state)
    }
}

impl Drop for ProgressWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
