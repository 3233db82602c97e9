//! The operator's view of the cluster: one watch per kind, kept in reflector stores and
//! shared by every controller. Reconciles read Contacts, Roles and the state of children
//! from here, never by listing the API server, so the requests a reconcile makes do not
//! grow with the number of bots.
//!
//! Each watch also feeds the controllers' triggers with what changed after its first
//! list, deletions included (a deleted Contact must wake the bots that used it). The
//! first list is not passed on: controllers start once every store is full, reconcile
//! everything once and build their memory of what maps to what from the stores, so no
//! copy of a whole fleet waits in a feed. When a watch lists again (a desync, an API
//! server restart), everything it lists is passed on, and objects that vanished
//! meanwhile as deletions. Children are cached as [`Remembered`]: compacted metadata
//! carrying a hash of their compared [`content`], and for a Deployment whether its pod
//! is ready — a few hundred bytes each instead of the whole object.
//!
//! A change is passed on only when it can matter to a reconcile. Saint's own kinds have
//! a status subresource, so their spec changes move `metadata.generation`; the status
//! writes of the operator itself (and anyone else's) come back as events that change
//! nothing a reconcile reads, and are dropped. A child's change is passed on only when
//! what the cache keeps of it changed: the controller-manager's status updates of a
//! Deployment (several a second in a large fleet) wake no bot unless its pod's
//! readiness changed.

use std::{borrow::Cow, fmt::Debug, future::Future, marker::PhantomData, pin::Pin, sync::Arc};

use futures::{Stream, StreamExt, TryStreamExt, channel::mpsc};
use k8s_openapi::{
    NamespaceResourceScope,
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, PersistentVolumeClaim, Service, ServiceAccount},
        networking::v1::{Ingress, NetworkPolicy},
        rbac::v1::RoleBinding,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, Client, Resource,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use saint_config::ErrorChain;
use serde::de::DeserializeOwned;

use crate::{
    crd::{Contact, Role, SaintBot},
    saintbot_controller::content::{self, Content},
};

/// Objects a controller is told about: created, changed or deleted.
pub type Feed<K> = mpsc::UnboundedReceiver<Result<K, watcher::Error>>;

/// A future that keeps one watch and its store up to date; runs until dropped.
pub type Driver = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One watch: its store, a feed per consumer, and the driver to spawn.
pub struct Reflection<K: Resource<DynamicType = ()> + 'static> {
    pub store: Store<K>,
    pub feeds: Vec<Feed<K>>,
    pub driver: Driver,
}

/// Whether a new version of an object can matter to a reconcile, given the version the
/// store held before it.
pub type Changed<K> = fn(before: &K, after: &K) -> bool;

/// Starts nothing: builds the store, the feeds (one per consumer) and the driver of one
/// watch. After the first list, an update for which `changed` says no is kept in the
/// store but not passed on.
pub fn reflect<K, S>(
    kind: &'static str,
    events: S,
    consumers: usize,
    changed: Changed<K>,
) -> Reflection<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
    S: Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
{
    let (store, mut writer) = reflector::store::<K>();
    let (senders, feeds): (Vec<_>, Vec<_>) = (0..consumers).map(|_| mpsc::unbounded()).unzip();
    let reader = store.clone();
    let driver = Box::pin(async move {
        futures::pin_mut!(events);
        let mut listed_once = false;
        // What the store held when a re-list began: what is missing at its end was
        // deleted while the watch was away.
        let mut before_list: Vec<Arc<K>> = Vec::new();
        while let Some(event) = events.next().await {
            let before = match &event {
                Ok(watcher::Event::Apply(object)) => reader.get(&ObjectRef::from(object)),
                _ => None,
            };
            if let Ok(event) = &event {
                writer.apply_watcher_event(event);
            }
            let objects: Vec<K> = match event {
                Ok(watcher::Event::Apply(object)) => match before {
                    Some(before) if !changed(&before, &object) => continue,
                    _ => vec![object],
                },
                Ok(watcher::Event::Delete(object)) => vec![object],
                Ok(watcher::Event::InitApply(object)) if listed_once => vec![object],
                Ok(watcher::Event::InitApply(_)) => continue,
                Ok(watcher::Event::Init) => {
                    if listed_once {
                        before_list = reader.state();
                    }
                    continue;
                }
                Ok(watcher::Event::InitDone) => {
                    listed_once = true;
                    std::mem::take(&mut before_list)
                        .into_iter()
                        .filter(|object| reader.get(&ObjectRef::from(object.as_ref())).is_none())
                        .map(Arc::unwrap_or_clone)
                        .collect()
                }
                Err(error) => {
                    tracing::warn!(kind, error = %ErrorChain(&error), "watch failed; retrying with backoff");
                    continue;
                }
            };
            for object in objects {
                tracing::trace!(
                    kind,
                    name = object.meta().name.as_deref().unwrap_or_default(),
                    resource_version = object
                        .meta()
                        .resource_version
                        .as_deref()
                        .unwrap_or_default(),
                    "passed on"
                );
                for sender in &senders {
                    // A closed feed belongs to a controller that has stopped.
                    let _ = sender.unbounded_send(Ok(object.clone()));
                }
            }
        }
    });
    Reflection {
        store,
        feeds,
        driver,
    }
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    }
}

fn kind_name<K: Resource<DynamicType = ()>>() -> &'static str {
    // Kinds are 'static strings for every k8s-openapi and derived type.
    match K::kind(&()) {
        std::borrow::Cow::Borrowed(kind) => kind,
        std::borrow::Cow::Owned(_) => "object",
    }
}

/// A watch of whole objects of kind `K` (Saint's own resources), for `consumers`.
pub fn objects<K>(client: &Client, namespace: Option<&str>, consumers: usize) -> Reflection<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let events = watcher(
        api::<K>(client, namespace),
        watcher::Config::default().any_semantic(),
    )
    .default_backoff()
    .modify(|object: &mut K| slim_source(object.meta_mut()));
    reflect(kind_name::<K>(), events, consumers, source_changed::<K>)
}

/// Drops the metadata no reconcile reads from a cached SaintBot, Contact or Role: managed
/// fields, annotations (`kubectl apply` keeps a second copy of the whole object in one),
/// owner references and timestamps. Labels stay: selectors match them.
pub fn slim_source(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.annotations = None;
    meta.owner_references = None;
    meta.creation_timestamp = None;
    meta.generate_name = None;
}

/// Whether a SaintBot, Contact or Role changed in what a reconcile reads: its spec (the
/// generation moves with it), labels, or its deletion. A status write is no change.
pub fn source_changed<K: Resource>(before: &K, after: &K) -> bool {
    let (before, after) = (before.meta(), after.meta());
    before.generation != after.generation
        || before.labels != after.labels
        || before.deletion_timestamp != after.deletion_timestamp
        || before.finalizers != after.finalizers
        || before.uid != after.uid
}

/// The label every child carries, so the child watches see only the operator's objects.
fn children_config() -> watcher::Config {
    watcher::Config::default()
        .labels("app.kubernetes.io/managed-by=saint-operator")
        .any_semantic()
}

/// What the cache keeps of one child of kind `K`: its metadata, compacted to what
/// [`freshness`](crate::saintbot_controller::freshness) reads (the desired-hash annotation, the hash of its live content, the
/// foreign writers among its managed fields) plus its name, uid, resourceVersion and
/// owner, and for a Deployment whether its pod is ready. Labels stay only on kinds the
/// operator finds by label ([`Content::FOUND_BY_LABELS`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Remembered<K> {
    pub metadata: ObjectMeta,
    /// A Deployment whose current generation has a ready pod; false for other kinds.
    pub pod_ready: bool,
    kind: PhantomData<fn() -> K>,
}

impl<K: Resource<DynamicType = ()>> Resource for Remembered<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dynamic: &()) -> Cow<'_, str> {
        K::kind(dynamic)
    }
    fn group(dynamic: &()) -> Cow<'_, str> {
        K::group(dynamic)
    }
    fn version(dynamic: &()) -> Cow<'_, str> {
        K::version(dynamic)
    }
    fn plural(dynamic: &()) -> Cow<'_, str> {
        K::plural(dynamic)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The cache's copy of a child: its compared content hashed, its metadata compacted,
/// the rest dropped.
pub fn remember<K: Content + Resource<DynamicType = ()>>(child: K) -> Remembered<K> {
    let pod_ready = child.pod_ready();
    let mut metadata = content::cached_metadata(child);
    if !K::FOUND_BY_LABELS {
        metadata.labels = None;
    }
    metadata.creation_timestamp = None;
    metadata.generate_name = None;
    metadata.generation = None;
    Remembered {
        metadata,
        pod_ready,
        kind: PhantomData,
    }
}

/// Whether a child changed in what the cache keeps of it (a new resourceVersion alone
/// is no change).
pub fn child_changed<K>(before: &Remembered<K>, after: &Remembered<K>) -> bool {
    before.pod_ready != after.pod_ready
        || ObjectMeta {
            resource_version: None,
            ..before.metadata.clone()
        } != ObjectMeta {
            resource_version: None,
            ..after.metadata.clone()
        }
}

fn map_event<K, T>(event: watcher::Event<K>, map: impl Fn(K) -> T) -> watcher::Event<T> {
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(map(object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(map(object)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(object) => watcher::Event::InitApply(map(object)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// A watch of the operator's children of kind `K`, each cached as [`remember`] makes it.
fn child_objects<K>(client: &Client, namespace: Option<&str>) -> Reflection<Remembered<K>>
where
    K: Content
        + Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let events = watcher(api::<K>(client, namespace), children_config())
        .default_backoff()
        .map_ok(|event| map_event(event, remember::<K>));
    reflect(kind_name::<K>(), events, 1, child_changed::<K>)
}

/// Saint's own resources, in stores.
#[derive(Clone)]
pub struct Sources {
    pub bots: Store<SaintBot>,
    pub contacts: Store<Contact>,
    pub roles: Store<Role>,
}

/// The operator's children as last seen ([`remember`]).
#[derive(Clone)]
pub struct Children {
    pub service_accounts: Store<Remembered<ServiceAccount>>,
    pub role_bindings: Store<Remembered<RoleBinding>>,
    pub config_maps: Store<Remembered<ConfigMap>>,
    pub claims: Store<Remembered<PersistentVolumeClaim>>,
    pub services: Store<Remembered<Service>>,
    pub network_policies: Store<Remembered<NetworkPolicy>>,
    pub ingresses: Store<Remembered<Ingress>>,
    pub deployments: Store<Remembered<Deployment>>,
}

impl Children {
    /// Waits until every child watch has listed once.
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.service_accounts.wait_until_ready().await?;
        self.role_bindings.wait_until_ready().await?;
        self.config_maps.wait_until_ready().await?;
        self.claims.wait_until_ready().await?;
        self.services.wait_until_ready().await?;
        self.network_policies.wait_until_ready().await?;
        self.ingresses.wait_until_ready().await?;
        self.deployments.wait_until_ready().await
    }
}

/// What the SaintBot controller is told about.
pub struct BotFeeds {
    pub bots: Feed<SaintBot>,
    pub contacts: Feed<Contact>,
    pub roles: Feed<Role>,
    pub service_accounts: Feed<Remembered<ServiceAccount>>,
    pub role_bindings: Feed<Remembered<RoleBinding>>,
    pub config_maps: Feed<Remembered<ConfigMap>>,
    pub claims: Feed<Remembered<PersistentVolumeClaim>>,
    pub services: Feed<Remembered<Service>>,
    pub network_policies: Feed<Remembered<NetworkPolicy>>,
    pub ingresses: Feed<Remembered<Ingress>>,
    pub deployments: Feed<Remembered<Deployment>>,
}

/// What the Contact and Role controllers are told about.
pub struct ReferenceFeeds {
    pub contacts: Feed<Contact>,
    pub contacts_changed: Feed<Contact>,
    pub bots_changed: Feed<SaintBot>,
    pub roles_changed: Feed<Role>,
    pub roles: Feed<Role>,
}

/// Every watch of one leadership term.
pub struct Caches {
    pub sources: Sources,
    pub children: Children,
    pub bot_feeds: BotFeeds,
    pub reference_feeds: ReferenceFeeds,
    pub drivers: Vec<Driver>,
}

impl Sources {
    /// Waits until Saint's own resources have listed once.
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.bots.wait_until_ready().await?;
        self.contacts.wait_until_ready().await?;
        self.roles.wait_until_ready().await
    }
}

fn split<K: Resource<DynamicType = ()> + 'static>(
    reflection: Reflection<K>,
    drivers: &mut Vec<Driver>,
) -> (Store<K>, std::vec::IntoIter<Feed<K>>) {
    drivers.push(reflection.driver);
    (reflection.store, reflection.feeds.into_iter())
}

fn next<K>(feeds: &mut std::vec::IntoIter<Feed<K>>) -> Feed<K> {
    feeds.next().expect("one feed per declared consumer")
}

/// Builds every watch (in `namespace`, or all). Nothing runs until the drivers do.
pub fn caches(client: &Client, namespace: Option<&str>) -> Caches {
    let mut drivers: Vec<Driver> = Vec::new();
    // Consumers, in order: the bot controller, then the Contact controller (bots and
    // Contacts twice: its own kind and a mapper), then the Role controller (Roles).
    let (bots, mut bot_feeds) = split(objects::<SaintBot>(client, namespace, 2), &mut drivers);
    let (contacts, mut contact_feeds) =
        split(objects::<Contact>(client, namespace, 3), &mut drivers);
    let (roles, mut role_feeds) = split(objects::<Role>(client, namespace, 3), &mut drivers);
    let (service_accounts, mut service_account_feeds) = split(
        child_objects::<ServiceAccount>(client, namespace),
        &mut drivers,
    );
    let (role_bindings, mut role_binding_feeds) = split(
        child_objects::<RoleBinding>(client, namespace),
        &mut drivers,
    );
    let (config_maps, mut config_map_feeds) =
        split(child_objects::<ConfigMap>(client, namespace), &mut drivers);
    let (claims, mut claim_feeds) = split(
        child_objects::<PersistentVolumeClaim>(client, namespace),
        &mut drivers,
    );
    let (services, mut service_feeds) =
        split(child_objects::<Service>(client, namespace), &mut drivers);
    let (network_policies, mut network_policy_feeds) = split(
        child_objects::<NetworkPolicy>(client, namespace),
        &mut drivers,
    );
    let (ingresses, mut ingress_feeds) =
        split(child_objects::<Ingress>(client, namespace), &mut drivers);
    let (deployments, mut deployment_feeds) =
        split(child_objects::<Deployment>(client, namespace), &mut drivers);
    Caches {
        sources: Sources {
            bots,
            contacts,
            roles,
        },
        children: Children {
            service_accounts,
            role_bindings,
            config_maps,
            claims,
            services,
            network_policies,
            ingresses,
            deployments,
        },
        bot_feeds: BotFeeds {
            bots: next(&mut bot_feeds),
            contacts: next(&mut contact_feeds),
            roles: next(&mut role_feeds),
            service_accounts: next(&mut service_account_feeds),
            role_bindings: next(&mut role_binding_feeds),
            config_maps: next(&mut config_map_feeds),
            claims: next(&mut claim_feeds),
            services: next(&mut service_feeds),
            network_policies: next(&mut network_policy_feeds),
            ingresses: next(&mut ingress_feeds),
            deployments: next(&mut deployment_feeds),
        },
        reference_feeds: ReferenceFeeds {
            bots_changed: next(&mut bot_feeds),
            contacts: next(&mut contact_feeds),
            contacts_changed: next(&mut contact_feeds),
            roles_changed: next(&mut role_feeds),
            roles: next(&mut role_feeds),
        },
        drivers,
    }
}

/// Objects of `store` in `namespace`.
pub fn in_namespace<K>(store: &Store<K>, namespace: &str) -> Vec<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone,
{
    store
        .state()
        .into_iter()
        .filter(|object| object.meta().namespace.as_deref() == Some(namespace))
        .collect()
}

#[cfg(test)]
mod tests {
    use futures::stream;
    use serde_json::json;

    use super::*;

    fn bot(generation: i64, resource_version: &str, status: Option<serde_json::Value>) -> SaintBot {
        let mut value = json!({
            "apiVersion": "saint.work/v1alpha1", "kind": "SaintBot",
            "metadata": {"name": "my-bot", "namespace": "acme", "uid": "u1",
                "generation": generation, "resourceVersion": resource_version,
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{}}"}},
            "spec": {"model": {"provider": "anthropic", "name": "m"}},
        });
        if let Some(status) = status {
            value["status"] = status;
        }
        let mut bot: SaintBot = serde_json::from_value(value).unwrap();
        slim_source(bot.meta_mut());
        bot
    }

    fn deployment(resource_version: &str, ready_replicas: i32, conditions: usize) -> Deployment {
        let conditions: Vec<_> = (0..conditions)
            .map(|n| json!({"type": "Progressing", "status": "True", "lastUpdateTime": format!("2026-11-26T00:00:{n:02}Z")}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "my-bot", "namespace": "acme", "uid": "d1", "generation": 1,
                "resourceVersion": resource_version,
                "labels": {"app.kubernetes.io/managed-by": "saint-operator"},
                "ownerReferences": [{"apiVersion": "saint.work/v1alpha1", "kind": "SaintBot",
                    "name": "my-bot", "uid": "u1", "controller": true}]},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "agent", "image": "a:1"}]}}},
            "status": {"observedGeneration": 1, "updatedReplicas": 1, "readyReplicas": ready_replicas,
                "conditions": conditions},
        }))
        .unwrap()
    }

    /// Runs one watch's driver over `events` and returns what its single feed received.
    async fn passed_on<K>(events: Vec<watcher::Event<K>>, changed: Changed<K>) -> (Vec<K>, Store<K>)
    where
        K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
    {
        let reflection = reflect("test", stream::iter(events.into_iter().map(Ok)), 1, changed);
        reflection.driver.await;
        let feed = reflection.feeds.into_iter().next().unwrap();
        let objects = feed
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        (objects, reflection.store)
    }

    #[tokio::test]
    async fn a_status_write_to_a_bot_is_stored_but_wakes_nobody() {
        let listed = bot(1, "10", None);
        let status_written = bot(1, "11", Some(json!({"observedGeneration": 1})));
        let spec_changed = bot(2, "12", Some(json!({"observedGeneration": 1})));
        let (passed, store) = passed_on(
            vec![
                watcher::Event::Init,
                watcher::Event::InitApply(listed),
                watcher::Event::InitDone,
                watcher::Event::Apply(status_written),
                watcher::Event::Apply(spec_changed.clone()),
            ],
            source_changed::<SaintBot>,
        )
        .await;
        let versions: Vec<_> = passed
            .iter()
            .map(|bot| bot.metadata.resource_version.clone().unwrap())
            .collect();
        assert_eq!(versions, ["12"], "only the spec change is passed on");
        let cached = store.state();
        assert_eq!(cached.len(), 1);
        assert_eq!(cached[0].metadata.resource_version.as_deref(), Some("12"));
        assert_eq!(
            cached[0].metadata.annotations, None,
            "last-applied copies are not cached"
        );
    }

    #[tokio::test]
    async fn a_label_change_or_deletion_of_a_bot_is_passed_on() {
        let listed = bot(1, "10", None);
        let mut labelled = bot(1, "11", None);
        labelled.metadata.labels = Some([("team".to_string(), "sales".to_string())].into());
        let (passed, store) = passed_on(
            vec![
                watcher::Event::Init,
                watcher::Event::InitApply(listed),
                watcher::Event::InitDone,
                watcher::Event::Apply(labelled.clone()),
                watcher::Event::Delete(labelled),
            ],
            source_changed::<SaintBot>,
        )
        .await;
        assert_eq!(passed.len(), 2, "{passed:?}");
        assert!(store.state().is_empty());
    }

    #[tokio::test]
    async fn deployment_status_churn_wakes_nobody_until_readiness_changes() {
        let remembered = |version: &str, ready: i32, conditions: usize| {
            remember(deployment(version, ready, conditions))
        };
        let (passed, store) = passed_on(
            vec![
                watcher::Event::Init,
                watcher::Event::InitApply(remembered("1", 0, 0)),
                watcher::Event::InitDone,
                // The controller-manager's condition updates: nothing the cache keeps.
                watcher::Event::Apply(remembered("2", 0, 1)),
                watcher::Event::Apply(remembered("3", 0, 2)),
                // The pod became ready.
                watcher::Event::Apply(remembered("4", 1, 2)),
            ],
            child_changed::<Deployment>,
        )
        .await;
        assert_eq!(passed.len(), 1, "{passed:?}");
        assert!(passed[0].pod_ready);
        assert_eq!(passed[0].metadata.resource_version.as_deref(), Some("4"));
        assert_eq!(
            store.state()[0].metadata.resource_version.as_deref(),
            Some("4"),
            "the store always holds the newest version (a repair's precondition)"
        );
    }

    #[tokio::test]
    async fn a_relist_passes_on_what_it_lists_and_what_vanished_meanwhile() {
        let mut other = deployment("5", 0, 0);
        other.metadata.name = Some("other-bot".into());
        let (passed, store) = passed_on(
            vec![
                watcher::Event::Init,
                watcher::Event::InitApply(remember(deployment("1", 0, 0))),
                watcher::Event::InitApply(remember(other)),
                watcher::Event::InitDone,
                // The watch desynced; other-bot's Deployment was deleted meanwhile.
                watcher::Event::Init,
                watcher::Event::InitApply(remember(deployment("6", 1, 0))),
                watcher::Event::InitDone,
            ],
            child_changed::<Deployment>,
        )
        .await;
        let names: Vec<_> = passed
            .iter()
            .map(|child| child.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["my-bot", "other-bot"]);
        assert_eq!(store.state().len(), 1);
    }

    #[test]
    fn a_remembered_child_keeps_what_freshness_and_ownership_read_and_nothing_else() {
        let child = deployment("1", 1, 3);
        let remembered = remember(child.clone());
        let meta = &remembered.metadata;
        assert!(remembered.pod_ready);
        assert_eq!(meta.name.as_deref(), Some("my-bot"));
        assert_eq!(meta.uid.as_deref(), Some("d1"));
        assert_eq!(meta.resource_version.as_deref(), Some("1"));
        assert_eq!(meta.owner_references, child.metadata.owner_references);
        assert_eq!(meta.labels, None, "Deployments are not found by label");
        assert_eq!(
            meta.annotations.as_ref().unwrap()[content::LIVE_CONTENT_ANNOTATION],
            content::content_hash(&child)
        );

        let ingress: Ingress = serde_json::from_value(json!({
            "metadata": {"name": "my-bot-webhooks", "labels": {"app.kubernetes.io/component": "webhooks"}},
            "spec": {},
        }))
        .unwrap();
        assert_eq!(
            remember(ingress.clone()).metadata.labels,
            ingress.metadata.labels,
            "webhook Ingresses are found by label"
        );
        assert!(!remember(ingress).pod_ready);
    }
}
