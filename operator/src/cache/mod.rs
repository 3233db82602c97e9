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
//! meanwhile as deletions. Children are remembered as small records
//! ([`children`]), not objects.
//!
//! A change is passed on only when it can matter to a reconcile. Saint's own kinds have
//! a status subresource, so their spec changes move `metadata.generation`; the status
//! writes of the operator itself (and anyone else's) come back as events that change
//! nothing a reconcile reads, and are dropped.
//!
//! The layer is this folder: this file watches Saint's own kinds and wires every watch
//! of a leadership term ([`caches`]); [`children`] keeps the children as records and
//! holds the waking rules; [`chain_reports`] keeps the agents' model-chain reports;
//! [`child_state`] is what a child says about itself, kept in the records and read by
//! the controller too. Why it looks like this, and what it must not touch: `README.md`
//! beside this file.

pub mod chain_reports;
pub mod child_state;
pub mod children;

use std::{fmt::Debug, sync::Arc};

use futures::{Stream, StreamExt, channel::mpsc};
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

use self::{
    chain_reports::{ChainReportWatch, ChainReports, watch_chain_reports},
    children::{ChildStore, ChildWatch, Wakes, WatchStopped, watch_children},
};
use crate::crd::{Contact, Role, SaintBot};

/// Objects a controller is told about: created, changed or deleted.
pub type Feed<K> = mpsc::UnboundedReceiver<Result<K, watcher::Error>>;

// Defined with the child watches, the lowest of the watch modules, so that the watches
// of children and of chain reports do not import this module back.
pub use self::children::Driver;

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
/// fields, annotations (`kubectl apply` keeps a second copy of the whole object in one)
/// and owner references. Labels stay: selectors match them; so does the creation time:
/// the earliest bot owns a shared webhook host (`validate::webhook_ingress`).
pub fn slim_source(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.annotations = None;
    meta.owner_references = None;
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
const CHILD_LABELS: &str = "app.kubernetes.io/managed-by=saint-operator";

/// Saint's own resources, in stores.
#[derive(Clone)]
pub struct Sources {
    pub bots: Store<SaintBot>,
    pub contacts: Store<Contact>,
    pub roles: Store<Role>,
}

/// What the operator remembers of its children ([`children`]).
#[derive(Clone)]
pub struct Children {
    pub service_accounts: ChildStore<ServiceAccount>,
    pub role_bindings: ChildStore<RoleBinding>,
    pub config_maps: ChildStore<ConfigMap>,
    pub claims: ChildStore<PersistentVolumeClaim>,
    pub services: ChildStore<Service>,
    pub network_policies: ChildStore<NetworkPolicy>,
    pub ingresses: ChildStore<Ingress>,
    pub deployments: ChildStore<Deployment>,
    /// Not a child: each bot's latest model-chain report from its agent's Events.
    pub chain_reports: ChainReports,
}

impl Children {
    /// Waits until every child watch has listed once.
    pub async fn wait_until_ready(&self) -> Result<(), WatchStopped> {
        self.service_accounts.wait_until_ready().await?;
        self.role_bindings.wait_until_ready().await?;
        self.config_maps.wait_until_ready().await?;
        self.claims.wait_until_ready().await?;
        self.services.wait_until_ready().await?;
        self.network_policies.wait_until_ready().await?;
        self.ingresses.wait_until_ready().await?;
        self.deployments.wait_until_ready().await?;
        self.chain_reports.wait_until_ready().await
    }
}

/// What the SaintBot controller is told about.
pub struct BotFeeds {
    pub bots: Feed<SaintBot>,
    /// SaintBots again, mapped to the bots sharing their webhook host: a bot that gives
    /// a host up (deleted, or its spec changed) wakes the next one in line.
    pub bots_sharing_host: Feed<SaintBot>,
    pub contacts: Feed<Contact>,
    pub roles: Feed<Role>,
    pub service_accounts: Wakes,
    pub role_bindings: Wakes,
    pub config_maps: Wakes,
    pub claims: Wakes,
    pub services: Wakes,
    pub network_policies: Wakes,
    pub ingresses: Wakes,
    pub deployments: Wakes,
    /// Bots whose agent's model-chain report changed.
    pub chain_reports: Wakes,
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

fn split_children<K>(watch: ChildWatch<K>, drivers: &mut Vec<Driver>) -> (ChildStore<K>, Wakes) {
    drivers.push(watch.driver);
    (watch.store, watch.wakes)
}

fn next<K>(feeds: &mut std::vec::IntoIter<Feed<K>>) -> Feed<K> {
    feeds.next().expect("one feed per declared consumer")
}

/// Builds every watch (in `namespace`, or all). Nothing runs until the drivers do.
pub fn caches(client: &Client, namespace: Option<&str>) -> Caches {
    let mut drivers: Vec<Driver> = Vec::new();
    // Consumers, in order: the bot controller (bots twice: its own kind and the mapper
    // to bots sharing a webhook host), then the Contact controller (bots and Contacts
    // twice: its own kind and a mapper), then the Role controller (Roles).
    let (bots, mut bot_feeds) = split(objects::<SaintBot>(client, namespace, 3), &mut drivers);
    let (contacts, mut contact_feeds) =
        split(objects::<Contact>(client, namespace, 3), &mut drivers);
    let (roles, mut role_feeds) = split(objects::<Role>(client, namespace, 3), &mut drivers);
    let (service_accounts, service_accounts_wakes) = split_children(
        watch_children::<ServiceAccount>(client, namespace, CHILD_LABELS),
        &mut drivers,
    );
    let (role_bindings, role_bindings_wakes) = split_children(
        watch_children::<RoleBinding>(client, namespace, CHILD_LABELS),
        &mut drivers,
    );
    let (config_maps, config_maps_wakes) = split_children(
        watch_children::<ConfigMap>(client, namespace, CHILD_LABELS),
        &mut drivers,
    );
    let (claims, claims_wakes) = split_children(
        watch_children::<PersistentVolumeClaim>(client, namespace, CHILD_LABELS),
        &mut drivers,
    );
    let (services, services_wakes) = split_children(
        watch_children::<Service>(client, namespace, CHILD_LABELS),
        &mut drivers,
    );
    let (network_policies, network_policies_wakes) = split_children(
        watch_children::<NetworkPolicy>(client, namespace, CHILD_LABELS),
        &mut drivers,
    );
    let (ingresses, ingresses_wakes) = split_children(
        watch_children::<Ingress>(client, namespace, CHILD_LABELS),
        &mut drivers,
    );
    let (deployments, deployments_wakes) = split_children(
        watch_children::<Deployment>(client, namespace, CHILD_LABELS),
        &mut drivers,
    );
    let ChainReportWatch {
        store: chain_reports,
        wakes: chain_reports_wakes,
        driver,
    } = watch_chain_reports(client, namespace);
    drivers.push(driver);
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
            chain_reports,
        },
        bot_feeds: BotFeeds {
            bots: next(&mut bot_feeds),
            bots_sharing_host: next(&mut bot_feeds),
            contacts: next(&mut contact_feeds),
            roles: next(&mut role_feeds),
            service_accounts: service_accounts_wakes,
            role_bindings: role_bindings_wakes,
            config_maps: config_maps_wakes,
            claims: claims_wakes,
            services: services_wakes,
            network_policies: network_policies_wakes,
            ingresses: ingresses_wakes,
            deployments: deployments_wakes,
            chain_reports: chain_reports_wakes,
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
}
