//! What the operator remembers of the children it writes: per child, a record of a few
//! hundred bytes rather than the object (a cached Deployment, even stripped of its
//! pod template, costs kilobytes in a reflector store). A record holds what
//! [`freshness`] judges — the desired hash stamped on the child, the hash of its live
//! [`content`], the foreign field managers writing its content, its resourceVersion (the
//! precondition of a repair) — plus its controlling SaintBot and, for a Deployment,
//! whether its pod is ready.
//!
//! One watch per kind keeps the records and wakes the owning bot when one changes in
//! what it holds (the old owner too, when a child changes hands). A child's first
//! appearance wakes nobody when it is what its bot's reconcile just wrote (stamped, no
//! foreign writer): that reconcile saw the object in the response. A resourceVersion
//! moving alone (the controller-manager's status updates of a Deployment, several a
//! second in a large fleet) wakes nobody either. Deletions wake the owner, and so does
//! everything a re-list delivers, with what vanished while the watch was away.

use std::{collections::HashMap, fmt::Debug, marker::PhantomData, sync::Arc};

use futures::{StreamExt, channel::mpsc};
use k8s_openapi::{
    NamespaceResourceScope,
    apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta},
};
use kube::{
    Api, Client, Resource,
    runtime::{WatchStreamExt, reflector::ObjectRef, watcher},
};
use saint_config::ErrorChain;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::child_state::{
    content::{self, Content, LIVE_CONTENT_ANNOTATION, LIVE_LABELS_ANNOTATION},
    freshness::{self, DESIRED_HASH_ANNOTATION},
};
use crate::{crd::SaintBot, status::Reason};
use parking_lot::RwLock;

/// A future that keeps one watch and its store up to date; runs until dropped.
pub type Driver = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// A SHA-256, kept as bytes (the annotations carry it as 64 hex digits).
type Digest = [u8; 32];

fn digest(hex_digits: &str) -> Option<Digest> {
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(hex_digits, &mut bytes).ok()?;
    Some(bytes)
}

/// The SaintBot controlling a child.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub name: Box<str>,
    pub uid: Box<str>,
}

/// What the operator remembers of one child.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildRecord {
    resource_version: Box<str>,
    /// The child's own uid, kept only for kinds found by label (a stale webhook Ingress is
    /// deleted with its uid as precondition).
    uid: Option<Box<str>>,
    /// `None` when the child carries no (or no well-formed) desired-hash stamp.
    desired_hash: Option<Digest>,
    live_content: Digest,
    /// The hash of the operator's labels as stored ([`content::labels_hash`]).
    live_labels: Digest,
    /// Field managers other than the operator that wrote the child's content.
    foreign_writers: Box<[Box<str>]>,
    pub owner: Option<Owner>,
    /// A Deployment whose current generation has a ready pod; false for other kinds.
    pub pod_ready: bool,
    /// Why a Deployment's pod cannot be created or rolled out, quoted from its
    /// conditions; `None` for other kinds.
    pub rollout_problem: Option<(Reason, Box<str>)>,
    /// For kinds found by label: whether it is a bot's webhook Ingress.
    pub webhooks: bool,
}

impl ChildRecord {
    /// The record of a child as the API server returned it.
    pub fn of<K: Content>(child: &K) -> Self {
        let meta = child.meta();
        let owner = meta
            .owner_references
            .iter()
            .flatten()
            .find(|reference| reference.controller == Some(true) && reference.kind == "SaintBot")
            .map(|reference| Owner {
                name: reference.name.as_str().into(),
                uid: reference.uid.as_str().into(),
            });
        let desired_hash = meta
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(DESIRED_HASH_ANNOTATION))
            .and_then(|hash| digest(hash));
        let webhooks = K::FOUND_BY_LABELS
            && meta
                .labels
                .as_ref()
                .and_then(|labels| labels.get("app.kubernetes.io/component"))
                .map(String::as_str)
                == Some(crate::labels::WEBHOOKS_COMPONENT);
        Self {
            resource_version: meta.resource_version.as_deref().unwrap_or_default().into(),
            uid: K::FOUND_BY_LABELS
                .then(|| meta.uid.as_deref().map(Into::into))
                .flatten(),
            desired_hash,
            live_content: digest(&content::content_hash(child))
                .expect("content hashes are 64 hex digits"),
            live_labels: digest(&content::labels_hash(child))
                .expect("label hashes are 64 hex digits"),
            foreign_writers: freshness::foreign_writers(meta)
                .into_iter()
                .map(Into::into)
                .collect(),
            owner,
            pod_ready: child.pod_ready(),
            rollout_problem: child
                .rollout_problem()
                .map(|(reason, message)| (reason, message.into())),
            webhooks,
        }
    }

    /// The child's metadata as [`freshness::freshness`] reads it: the three hashes as
    /// annotations, each foreign writer as a managed-fields entry owning content, and the
    /// resourceVersion.
    pub fn metadata(&self, namespace: &str, name: &str) -> ObjectMeta {
        let mut annotations = std::collections::BTreeMap::from([
            (
                LIVE_CONTENT_ANNOTATION.to_string(),
                hex::encode(self.live_content),
            ),
            (
                LIVE_LABELS_ANNOTATION.to_string(),
                hex::encode(self.live_labels),
            ),
        ]);
        if let Some(hash) = self.desired_hash {
            annotations.insert(DESIRED_HASH_ANNOTATION.to_string(), hex::encode(hash));
        }
        let foreign: Vec<ManagedFieldsEntry> = self
            .foreign_writers
            .iter()
            .map(|manager| ManagedFieldsEntry {
                manager: Some(manager.to_string()),
                operation: Some("Update".to_string()),
                fields_v1: Some(FieldsV1(serde_json::json!({"f:spec": {}}))),
                ..ManagedFieldsEntry::default()
            })
            .collect();
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            uid: self.uid.as_deref().map(str::to_string),
            resource_version: Some(self.resource_version.to_string()),
            annotations: Some(annotations),
            managed_fields: (!foreign.is_empty()).then_some(foreign),
            ..ObjectMeta::default()
        }
    }

    /// Whether a child seen for the first time needs its bot's judgement anyway. A child
    /// its bot's reconcile created carries the operator's stamp and no foreign writer,
    /// and that reconcile saw it in the response. One that does not was written by
    /// someone else: re-created by hand, or edited and, its label removed and restored
    /// meanwhile, back in the watch with the foreign fields an apply keeps. Kinds found
    /// by label (the webhook Ingress) are always looked at: a reconcile that ran before
    /// the watch delivered one could not have deleted it.
    fn needs_a_look<K: Content>(&self) -> bool {
        K::FOUND_BY_LABELS || self.desired_hash.is_none() || !self.foreign_writers.is_empty()
    }

    /// Whether it differs from `other` in more than its resourceVersion.
    fn differs_from(&self, other: &Self) -> bool {
        Self {
            resource_version: other.resource_version.clone(),
            ..self.clone()
        } != *other
    }
}

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// The records of one child kind, shared by the watch that fills them and the
/// reconciles that read them.
pub struct ChildStore<K> {
    records: Arc<RwLock<HashMap<String, ChildRecord>>>,
    listed: watch::Receiver<bool>,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for ChildStore<K> {
    fn clone(&self) -> Self {
        Self {
            records: self.records.clone(),
            listed: self.listed.clone(),
            kind: PhantomData,
        }
    }
}

/// A watch ended before it listed once.
#[derive(Debug, thiserror::Error)]
#[error("a watch stopped before it listed")]
pub struct WatchStopped;

impl From<kube::runtime::reflector::store::WriterDropped> for WatchStopped {
    fn from(_: kube::runtime::reflector::store::WriterDropped) -> Self {
        Self
    }
}

impl<K> ChildStore<K> {
    /// A store and the handle that fills it. The store reads as listed once
    /// [`Recorder::listed`] has been called.
    pub fn new() -> (Self, Recorder<K>) {
        let (sender, listed) = watch::channel(false);
        let records = Arc::new(RwLock::new(HashMap::new()));
        (
            Self {
                records: records.clone(),
                listed,
                kind: PhantomData,
            },
            Recorder {
                records,
                listed: sender,
                kind: PhantomData,
            },
        )
    }

    /// A store that has listed `children` (for tests and offline rendering).
    pub fn holding(children: &[K]) -> Self
    where
        K: Content,
    {
        let (store, recorder) = Self::new();
        recorder.relist(children.iter().map(Recorder::entry).collect());
        recorder.listed();
        store
    }

    fn read(&self) -> parking_lot::RwLockReadGuard<'_, HashMap<String, ChildRecord>> {
        self.records.read()
    }

    /// The record of `namespace/name`, if the child exists.
    pub fn get(&self, namespace: &str, name: &str) -> Option<ChildRecord> {
        self.read().get(&key(namespace, name)).cloned()
    }

    /// The children of `namespace` the SaintBot with `owner_uid` controls: `(name,
    /// record)`.
    pub fn controlled_by(&self, namespace: &str, owner_uid: &str) -> Vec<(String, ChildRecord)> {
        let prefix = format!("{namespace}/");
        self.read()
            .iter()
            .filter(|(_, record)| {
                record
                    .owner
                    .as_ref()
                    .is_some_and(|owner| &*owner.uid == owner_uid)
            })
            .filter_map(|(key, record)| {
                Some((key.strip_prefix(&prefix)?.to_string(), record.clone()))
            })
            .collect()
    }

    /// How many children are remembered.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether no child is remembered.
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

/// Fills a [`ChildStore`] from watch events and says which bots they concern.
pub struct Recorder<K> {
    records: Arc<RwLock<HashMap<String, ChildRecord>>>,
    listed: watch::Sender<bool>,
    kind: PhantomData<fn() -> K>,
}

/// The bot a child event concerns.
fn owner_ref(namespace: &str, record: &ChildRecord) -> Option<ObjectRef<SaintBot>> {
    let owner = record.owner.as_ref()?;
    Some(ObjectRef::new(&owner.name).within(namespace))
}

/// Splits `namespace/name`.
fn namespace_of(key: &str) -> &str {
    key.split_once('/').map_or("", |(namespace, _)| namespace)
}

impl<K: Content> Recorder<K> {
    fn write(&self) -> parking_lot::RwLockWriteGuard<'_, HashMap<String, ChildRecord>> {
        self.records.write()
    }

    /// Records one change to a child outside a list; returns the bots to wake.
    pub fn apply(&self, child: &K) -> Vec<ObjectRef<SaintBot>> {
        let meta = child.meta();
        let namespace = meta.namespace.as_deref().unwrap_or_default();
        let record = ChildRecord::of(child);
        let before = self.write().insert(
            key(namespace, meta.name.as_deref().unwrap_or_default()),
            record.clone(),
        );
        let mut wake: Vec<ObjectRef<SaintBot>> = match &before {
            Some(before) if !before.differs_from(&record) => return Vec::new(),
            Some(_) => owner_ref(namespace, &record).into_iter().collect(),
            None if record.needs_a_look::<K>() => {
                owner_ref(namespace, &record).into_iter().collect()
            }
            None => Vec::new(),
        };
        // A child handed to another owner (or to none) is no longer its old bot's.
        if let Some(before) = before
            && before.owner != record.owner
        {
            wake.extend(owner_ref(namespace, &before));
        }
        wake
    }

    /// Forgets a deleted child; returns its bot, to be woken.
    pub fn delete(&self, child: &K) -> Option<ObjectRef<SaintBot>> {
        let meta = child.meta();
        let namespace = meta.namespace.as_deref().unwrap_or_default();
        self.write()
            .remove(&key(namespace, meta.name.as_deref().unwrap_or_default()));
        owner_ref(namespace, &ChildRecord::of(child))
    }

    /// Replaces every record with a complete list (`key` → record, see [`Recorder::entry`]);
    /// returns the bots of the listed children and of the remembered ones the list lacks
    /// (deleted meanwhile).
    pub fn relist(&self, listed: HashMap<String, ChildRecord>) -> Vec<ObjectRef<SaintBot>> {
        let mut wake: Vec<ObjectRef<SaintBot>> = listed
            .iter()
            .filter_map(|(key, record)| owner_ref(namespace_of(key), record))
            .collect();
        let mut records = self.write();
        for (key, record) in records.iter() {
            if !listed.contains_key(key) {
                wake.extend(owner_ref(namespace_of(key), record));
            }
        }
        *records = listed;
        wake
    }

    /// The key and record of a listed child.
    pub fn entry(child: &K) -> (String, ChildRecord) {
        let meta = child.meta();
        (
            key(
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default(),
            ),
            ChildRecord::of(child),
        )
    }

    /// Marks the store listed.
    pub fn listed(&self) {
        self.listed.send_replace(true);
    }
}

/// Bots to wake because one of their children changed.
pub type Wakes = mpsc::UnboundedReceiver<ObjectRef<SaintBot>>;

/// One child kind's watch: its store, the bots it wakes, and the driver to spawn.
pub struct ChildWatch<K> {
    pub store: ChildStore<K>,
    pub wakes: Wakes,
    pub driver: Driver,
}

/// Builds the watch of the operator's children of kind `K` (those carrying `labels`), in
/// `namespace` or all. Nothing runs until the driver does.
pub fn watch_children<K>(client: &Client, namespace: Option<&str>, labels: &str) -> ChildWatch<K>
where
    K: Content
        + Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let api: Api<K> = match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    let events = watcher(
        api,
        watcher::Config::default().labels(labels).any_semantic(),
    )
    .default_backoff();
    let (store, recorder) = ChildStore::<K>::new();
    let (sender, wakes) = mpsc::unbounded();
    let driver = Box::pin(drive(K::kind(&()).to_string(), events, recorder, sender));
    ChildWatch {
        store,
        wakes,
        driver,
    }
}

/// Feeds `recorder` from a child watch's events and sends the bots to wake.
async fn drive<K, S>(
    kind: String,
    events: S,
    recorder: Recorder<K>,
    sender: mpsc::UnboundedSender<ObjectRef<SaintBot>>,
) where
    K: Content,
    S: futures::Stream<Item = watcher::Result<watcher::Event<K>>>,
{
    futures::pin_mut!(events);
    let mut listed_once = false;
    let mut listing: HashMap<String, ChildRecord> = HashMap::new();
    while let Some(event) = events.next().await {
        let woken: Vec<ObjectRef<SaintBot>> = match event {
            Ok(watcher::Event::Apply(child)) => recorder.apply(&child),
            Ok(watcher::Event::Delete(child)) => recorder.delete(&child).into_iter().collect(),
            Ok(watcher::Event::Init) => {
                listing.clear();
                continue;
            }
            Ok(watcher::Event::InitApply(child)) => {
                let (key, record) = Recorder::entry(&child);
                listing.insert(key, record);
                continue;
            }
            Ok(watcher::Event::InitDone) => {
                let woken = recorder.relist(std::mem::take(&mut listing));
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
                tracing::warn!(%kind, error = %ErrorChain(&error), "watch failed; retrying with backoff");
                continue;
            }
        };
        for bot in woken {
            tracing::trace!(%kind, bot = %bot, "child changed");
            // A closed feed belongs to a controller that has stopped.
            let _ = sender.unbounded_send(bot);
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::stream;
    use k8s_openapi::api::{apps::v1::Deployment, networking::v1::Ingress};
    use serde_json::json;

    use super::*;

    fn deployment(
        name: &str,
        resource_version: &str,
        ready_replicas: i32,
        conditions: usize,
    ) -> Deployment {
        let conditions: Vec<_> = (0..conditions)
            .map(|n| {
                json!({"type": "Progressing", "status": "True",
                "lastUpdateTime": format!("2026-11-26T00:00:{n:02}Z")})
            })
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "acme", "uid": "d1", "generation": 1,
                "resourceVersion": resource_version,
                "labels": {"app.kubernetes.io/managed-by": "saint-operator"},
                "annotations": {DESIRED_HASH_ANNOTATION: "ab".repeat(32)},
                "ownerReferences": [{"apiVersion": "saint.work/v1alpha1", "kind": "SaintBot",
                    "name": name, "uid": "u1", "controller": true}]},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "agent", "image": "a:1"}]}}},
            "status": {"observedGeneration": 1, "updatedReplicas": 1, "readyReplicas": ready_replicas,
                "conditions": conditions},
        }))
        .unwrap()
    }

    /// Runs one child watch's driver over `events`; returns the bots it woke and its store.
    async fn woken<K>(events: Vec<watcher::Event<K>>) -> (Vec<String>, ChildStore<K>)
    where
        K: Content + Debug + Send + Sync + 'static,
    {
        let (store, recorder) = ChildStore::<K>::new();
        let (sender, wakes) = mpsc::unbounded();
        let driver = drive(
            "test".into(),
            stream::iter(events.into_iter().map(Ok)),
            recorder,
            sender,
        );
        driver.await;
        let names = wakes.map(|bot| bot.name).collect().await;
        (names, store)
    }

    #[tokio::test]
    async fn status_churn_and_first_appearances_wake_nobody_readiness_and_deletion_do() {
        let (woken, store) = woken(vec![
            watcher::Event::Init,
            watcher::Event::InitDone,
            // The bot's own create comes back: it saw the response already.
            watcher::Event::Apply(deployment("my-bot", "1", 0, 0)),
            // The controller-manager's condition updates: nothing the record keeps.
            watcher::Event::Apply(deployment("my-bot", "2", 0, 1)),
            watcher::Event::Apply(deployment("my-bot", "3", 0, 2)),
            // The pod became ready.
            watcher::Event::Apply(deployment("my-bot", "4", 1, 2)),
            watcher::Event::Delete(deployment("my-bot", "5", 1, 2)),
        ])
        .await;
        assert_eq!(woken, ["my-bot", "my-bot"], "readiness, then the deletion");
        assert!(store.get("acme", "my-bot").is_none());
    }

    #[tokio::test]
    async fn a_foreign_writer_wakes_the_owner_and_the_store_keeps_the_newest_version() {
        let mut edited = deployment("my-bot", "2", 0, 0);
        edited.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubectl-edit".into()),
            operation: Some("Update".into()),
            fields_v1: Some(FieldsV1(json!({"f:spec": {"f:template": {}}}))),
            ..ManagedFieldsEntry::default()
        }]);
        let (woken, store) = woken(vec![
            watcher::Event::Init,
            watcher::Event::InitApply(deployment("my-bot", "1", 0, 0)),
            watcher::Event::InitDone,
            watcher::Event::Apply(edited),
        ])
        .await;
        assert_eq!(woken, ["my-bot"]);
        let meta = store
            .get("acme", "my-bot")
            .unwrap()
            .metadata("acme", "my-bot");
        assert_eq!(
            meta.resource_version.as_deref(),
            Some("2"),
            "a repair's precondition"
        );
        assert_eq!(freshness::foreign_writers(&meta), ["kubectl-edit"]);
    }

    #[tokio::test]
    async fn a_first_appearance_someone_else_wrote_wakes_its_bot() {
        // Edited by hand, its managed-by label removed (gone from the watch) and put
        // back by the bot's apply, which keeps the foreign fields.
        let mut edited = deployment("edited-bot", "3", 0, 0);
        edited.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubectl-edit".into()),
            operation: Some("Update".into()),
            fields_v1: Some(FieldsV1(json!({"f:spec": {"f:template": {}}}))),
            ..ManagedFieldsEntry::default()
        }]);
        // Re-created by someone else, without the operator's stamp.
        let mut unstamped = deployment("unstamped-bot", "4", 0, 0);
        unstamped.metadata.annotations = None;
        let (woken, _) = woken(vec![
            watcher::Event::Init,
            watcher::Event::InitDone,
            watcher::Event::Apply(deployment("own-bot", "2", 0, 0)),
            watcher::Event::Apply(edited),
            watcher::Event::Apply(unstamped),
        ])
        .await;
        assert_eq!(woken, ["edited-bot", "unstamped-bot"]);
    }

    #[tokio::test]
    async fn a_webhook_ingress_seen_late_and_a_child_given_away_wake_their_bots() {
        let ingress: Ingress = serde_json::from_value(json!({
            "metadata": {"name": "my-bot-webhooks", "namespace": "acme", "resourceVersion": "1",
                "annotations": {DESIRED_HASH_ANNOTATION: "ab".repeat(32)},
                "ownerReferences": [{"apiVersion": "saint.work/v1alpha1", "kind": "SaintBot",
                    "name": "my-bot", "uid": "u1", "controller": true}]},
            "spec": {},
        }))
        .unwrap();
        let mut given_away = deployment("my-bot", "6", 0, 0);
        given_away.metadata.owner_references.as_mut().unwrap()[0].name = "other-bot".into();
        let (woken, _) = woken(vec![
            watcher::Event::Init,
            watcher::Event::InitDone,
            watcher::Event::Apply(ingress),
        ])
        .await;
        assert_eq!(woken, ["my-bot"], "an Ingress a reconcile may have missed");
        let (mut woken, _) = woken_after_list(
            deployment("my-bot", "5", 0, 0),
            watcher::Event::Apply(given_away),
        )
        .await;
        woken.sort();
        assert_eq!(woken, ["my-bot", "other-bot"], "the new owner and the old");
    }

    /// [`woken`] over a list of `listed`, then `event`.
    async fn woken_after_list(
        listed: Deployment,
        event: watcher::Event<Deployment>,
    ) -> (Vec<String>, ChildStore<Deployment>) {
        woken(vec![
            watcher::Event::Init,
            watcher::Event::InitApply(listed),
            watcher::Event::InitDone,
            event,
        ])
        .await
    }

    #[tokio::test]
    async fn a_relist_wakes_what_it_lists_and_what_vanished_meanwhile() {
        let (woken, store) = woken(vec![
            watcher::Event::Init,
            watcher::Event::InitApply(deployment("my-bot", "1", 0, 0)),
            watcher::Event::InitApply(deployment("other-bot", "2", 0, 0)),
            watcher::Event::InitDone,
            // The watch desynced; other-bot's Deployment was deleted meanwhile.
            watcher::Event::Init,
            watcher::Event::InitApply(deployment("my-bot", "6", 1, 0)),
            watcher::Event::InitDone,
        ])
        .await;
        let mut woken = woken;
        woken.sort();
        assert_eq!(woken, ["my-bot", "other-bot"]);
        assert_eq!(store.len(), 1);
        assert!(store.get("acme", "my-bot").unwrap().pod_ready);
    }

    #[test]
    fn the_metadata_of_a_record_judges_as_the_object_did() {
        let child = deployment("my-bot", "7", 1, 3);
        let record = ChildRecord::of(&child);
        let meta = record.metadata("acme", "my-bot");
        let content = content::content_hash(&child);
        let labels = content::labels_hash(&child);
        let stamped = "ab".repeat(32);
        assert_eq!(
            freshness::freshness(Some(&meta), &stamped, &content, &labels, true),
            freshness::Freshness::Current
        );
        assert_eq!(
            freshness::freshness(Some(&meta), &"cd".repeat(32), &content, &labels, true),
            freshness::Freshness::Stale
        );
        assert!(matches!(
            freshness::freshness(Some(&meta), &stamped, &"00".repeat(32), &labels, true),
            freshness::Freshness::Drifted { .. }
        ));
        assert_eq!(meta.uid, None, "a Deployment's uid is not kept");
        let mut unlabelled = child.clone();
        unlabelled.metadata.labels = None;
        let meta_unlabelled = ChildRecord::of(&unlabelled).metadata("acme", "my-bot");
        assert_eq!(
            freshness::freshness(Some(&meta_unlabelled), &stamped, &content, &labels, true),
            freshness::Freshness::Relabel
        );

        // A hand-edited stamp that is no hash reads as no stamp: the child is applied.
        let mut garbled = child.clone();
        garbled
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(DESIRED_HASH_ANNOTATION.into(), "not-a-hash".into());
        let meta = ChildRecord::of(&garbled).metadata("acme", "my-bot");
        assert_eq!(
            freshness::freshness(Some(&meta), "not-a-hash", &content, &labels, true),
            freshness::Freshness::Stale
        );
    }

    #[test]
    fn webhook_ingresses_are_found_by_their_controller() {
        let ingress = |name: &str, owner_uid: &str, component: &str| -> Ingress {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "acme", "uid": format!("uid-{name}"),
                    "labels": {"app.kubernetes.io/component": component},
                    "ownerReferences": [{"apiVersion": "saint.work/v1alpha1", "kind": "SaintBot",
                        "name": "my-bot", "uid": owner_uid, "controller": true}]},
                "spec": {},
            }))
            .unwrap()
        };
        let store = ChildStore::holding(&[
            ingress("mine", "u1", crate::labels::WEBHOOKS_COMPONENT),
            ingress("someone-elses", "u2", crate::labels::WEBHOOKS_COMPONENT),
            ingress("not-webhooks", "u1", "other"),
        ]);
        let mut found: Vec<(String, bool, Option<String>)> = store
            .controlled_by("acme", "u1")
            .into_iter()
            .map(|(name, record)| {
                let uid = record.metadata("acme", &name).uid;
                (name, record.webhooks, uid)
            })
            .collect();
        found.sort();
        assert_eq!(
            found,
            [
                ("mine".to_string(), true, Some("uid-mine".to_string())),
                (
                    "not-webhooks".to_string(),
                    false,
                    Some("uid-not-webhooks".to_string())
                ),
            ]
        );
        assert!(store.controlled_by("other-namespace", "u1").is_empty());
    }
}
