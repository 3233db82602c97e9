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
//! meanwhile as deletions. Children are cached slimmed to what [`freshness`] reads:
//! compacted metadata and a hash of their compared [`content`]; the Deployment keeps its
//! status (readiness) but not its pod template.

use std::{fmt::Debug, future::Future, pin::Pin, sync::Arc};

use futures::{Stream, StreamExt, channel::mpsc};
use k8s_openapi::{
    NamespaceResourceScope,
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, PersistentVolumeClaim, Service, ServiceAccount},
        networking::v1::{Ingress, NetworkPolicy},
        rbac::v1::RoleBinding,
    },
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
    saintbot_controller::{
        content::{self, Content},
        freshness,
    },
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

/// Starts nothing: builds the store, the feeds (one per consumer) and the driver of one
/// watch.
pub fn reflect<K, S>(kind: &'static str, events: S, consumers: usize) -> Reflection<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
    S: Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let (senders, feeds): (Vec<_>, Vec<_>) = (0..consumers).map(|_| mpsc::unbounded()).unzip();
    let reader = store.clone();
    let driver = Box::pin(async move {
        let events = reflector::reflector(writer, events);
        futures::pin_mut!(events);
        let mut listed_once = false;
        // What the store held when a re-list began: what is missing at its end was
        // deleted while the watch was away.
        let mut before_list: Vec<Arc<K>> = Vec::new();
        while let Some(event) = events.next().await {
            let objects: Vec<K> = match event {
                Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object)) => {
                    vec![object]
                }
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
    .modify(|object: &mut K| object.meta_mut().managed_fields = None);
    reflect(kind_name::<K>(), events, consumers)
}

/// The label every child carries, so the child watches see only the operator's objects.
fn children_config() -> watcher::Config {
    watcher::Config::default()
        .labels("app.kubernetes.io/managed-by=saint-operator")
        .any_semantic()
}

/// A watch of the operator's children of kind `K`, each cached as [`slim_child`] makes it.
fn child_objects<K>(client: &Client, namespace: Option<&str>) -> Reflection<K>
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
        .modify(slim_child::<K>);
    reflect(kind_name::<K>(), events, 1)
}

/// The cache's copy of a child: its compared content hashed, its metadata compacted,
/// its bulk dropped.
pub fn slim_child<K: Content>(child: &mut K) {
    content::cache_copy(child);
    freshness::compact(child.meta_mut());
}

/// Saint's own resources, in stores.
#[derive(Clone)]
pub struct Sources {
    pub bots: Store<SaintBot>,
    pub contacts: Store<Contact>,
    pub roles: Store<Role>,
}

/// The operator's children as last seen, slimmed ([`slim_child`]).
#[derive(Clone)]
pub struct Children {
    pub service_accounts: Store<ServiceAccount>,
    pub role_bindings: Store<RoleBinding>,
    pub config_maps: Store<ConfigMap>,
    pub claims: Store<PersistentVolumeClaim>,
    pub services: Store<Service>,
    pub network_policies: Store<NetworkPolicy>,
    pub ingresses: Store<Ingress>,
    pub deployments: Store<Deployment>,
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
    pub service_accounts: Feed<ServiceAccount>,
    pub role_bindings: Feed<RoleBinding>,
    pub config_maps: Feed<ConfigMap>,
    pub claims: Feed<PersistentVolumeClaim>,
    pub services: Feed<Service>,
    pub network_policies: Feed<NetworkPolicy>,
    pub ingresses: Feed<Ingress>,
    pub deployments: Feed<Deployment>,
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
