//! Writes the built children, and only those that need it. Each child is judged against
//! the operator's cache ([`freshness`]):
//!
//! - current (same desired hash, nobody else wrote to it): no request;
//! - missing or stale: server-side apply (field manager `saint-operator`, forced: the
//!   operator owns these fields), stamped with the desired hash;
//! - drifted (another field manager changed its content — a hand-added NetworkPolicy
//!   rule, a sidecar added to the Deployment): replaced whole with what the bot wants,
//!   its managed fields reset so no foreign owner survives, then applied again so the
//!   operator owns every field. Server-side apply alone would keep the foreign fields;
//! - relabelled (a label the operator sets removed or changed, on any kind): applied
//!   again, which puts the label back.
//!
//! Every child carries the SaintBot's controller owner reference (set by the builders),
//! so deleting the bot removes them all. The one optional child, the webhook Ingress, is
//! deleted here when no longer wanted.

use std::fmt::Debug;

use k8s_openapi::{
    NamespaceResourceScope,
    api::networking::v1::Ingress,
    apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, OwnerReference},
};
use kube::{
    Api, Client, Resource,
    api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions},
};
use serde::{Serialize, de::DeserializeOwned};

use super::build::Children;
use crate::{
    cache::{
        self,
        child_state::{
            content::{Content, content_hash, labels_hash},
            freshness::{Freshness, desired_hash, freshness, stamp, without_placeholder},
            rollout::Problem,
        },
        children::ChildStore,
    },
    labels::FIELD_MANAGER,
    metrics::Metrics,
};

/// Tries at making the operator sole owner of a repaired child before the next
/// reconcile takes over.
const PRUNE_ATTEMPTS: u32 = 4;

/// Why a child could not be written.
#[derive(Debug, thiserror::Error)]
#[error("failed to apply {kind} {name:?}")]
pub struct ApplyError {
    pub kind: String,
    pub name: String,
    #[source]
    pub source: kube::Error,
}

impl ApplyError {
    /// Whether the API server refused the write only because the object changed since
    /// it was read (optimistic concurrency).
    pub fn is_conflict(&self) -> bool {
        matches!(&self.source, kube::Error::Api(status) if status.code == 409)
    }

    /// The API server's own words when it refused the request, else the client error.
    pub fn refusal(&self) -> String {
        match &self.source {
            kube::Error::Api(status) => status.message.clone(),
            other => saint_config::ErrorChain(other).to_string(),
        }
    }
}

/// What the writes leave for `update_status` to read.
#[derive(Clone, Debug)]
pub struct Applied {
    /// Whether the Deployment as stored (from the cache when it needed no write) has a
    /// ready pod of its current generation.
    pub pod_ready: bool,
    /// Why the Deployment (as stored) cannot create or roll out its pod, if it says so.
    pub rollout_problem: Option<Problem>,
    /// How many children were written.
    pub writes: usize,
}

/// Writes the children of one bot in one namespace.
struct ChildWriter<'a> {
    client: &'a Client,
    namespace: &'a str,
    metrics: &'a Metrics,
    owner: &'a OwnerReference,
    writes: usize,
}

impl ChildWriter<'_> {
    /// [`ChildWriter::ensure`] with the child's metadata as `store` last saw it.
    async fn ensure_cached<K>(
        &mut self,
        desired: &K,
        store: &ChildStore<K>,
        repairable: bool,
    ) -> Result<Option<K>, ApplyError>
    where
        K: Content
            + Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Serialize
            + DeserializeOwned
            + Clone
            + std::fmt::Debug,
    {
        let cached = cached(store, self.namespace, desired.meta().name.as_ref());
        self.ensure(desired, cached, repairable).await
    }

    /// Brings one child to its desired state. `cached`: its metadata as last seen.
    /// `repairable`: whether foreign writes to it are undone. Returns the stored object
    /// when a request was made.
    async fn ensure<K>(
        &mut self,
        desired: &K,
        cached: Option<ObjectMeta>,
        repairable: bool,
    ) -> Result<Option<K>, ApplyError>
    where
        K: Content
            + Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Serialize
            + DeserializeOwned
            + Clone
            + Debug,
    {
        let hash = desired_hash(desired);
        let mut stamped = desired.clone();
        stamp(stamped.meta_mut(), &hash);
        let name = desired.meta().name.clone().unwrap_or_default();
        let kind = K::kind(&()).to_string();
        let failed = |source| ApplyError {
            kind: kind.clone(),
            name: name.clone(),
            source,
        };
        let api = Api::<K>::namespaced(self.client.clone(), self.namespace);
        let mut repaired = false;
        let content = content_hash(desired);
        let labels = labels_hash(desired);
        match freshness(cached.as_ref(), &hash, &content, &labels, repairable) {
            Freshness::Current => return Ok(None),
            Freshness::Missing | Freshness::Stale => {}
            Freshness::Relabel => {
                tracing::warn!(
                    namespace = self.namespace,
                    %kind,
                    %name,
                    "restoring the labels of a child someone relabelled"
                );
                self.metrics.record_drift_repair(&kind);
            }
            Freshness::Drifted { managers } => {
                repaired = true;
                tracing::warn!(
                    namespace = self.namespace,
                    %kind,
                    %name,
                    ?managers,
                    "restoring a child another field manager changed"
                );
                let mut replacement = stamped.clone();
                let meta = replacement.meta_mut();
                // Optimistic concurrency: a change after the cached one fails the write,
                // and the retry sees it.
                meta.resource_version = cached.and_then(|cached| cached.resource_version);
                // One empty entry resets every field manager of the object.
                meta.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
                self.wrote();
                api.replace(
                    &name,
                    &PostParams {
                        field_manager: Some(FIELD_MANAGER.to_string()),
                        ..PostParams::default()
                    },
                    &replacement,
                )
                .await
                .map_err(failed)?;
                self.metrics.record_drift_repair(&kind);
            }
        }
        self.wrote();
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match api.patch(&name, &params, &Patch::Apply(&stamped)).await {
            Ok(stored) if repaired => self
                .prune_owners(&api, stored)
                .await
                .map(Some)
                .map_err(failed),
            Ok(stored) => Ok(Some(stored)),
            Err(error) if K::kind(&()) == "RoleBinding" && changes_role_ref(&error) => {
                // A binding's roleRef cannot change; one made by an earlier version (to a
                // per-bot Role) is deleted and made again, if it is this bot's.
                self.delete_owned::<K>(&name, cached_uid_of_owned(&api, &name, self.owner).await)
                    .await
                    .map_err(failed)?;
                self.wrote();
                api.patch(&name, &params, &Patch::Apply(&stamped))
                    .await
                    .map(Some)
                    .map_err(failed)
            }
            Err(error) => Err(failed(error)),
        }
    }

    fn wrote(&mut self) {
        self.writes += 1;
        self.metrics.child_writes.inc();
    }

    /// The last step of a repair: leaves the operator sole owner of the restored child
    /// ([`without_placeholder`]). The patch is conditional on the resourceVersion it was
    /// computed from; other controllers' status writes move it on, so a conflict is
    /// retried from a fresh read a few times.
    async fn prune_owners<K>(&mut self, api: &Api<K>, stored: K) -> Result<K, kube::Error>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Debug,
    {
        let mut current = stored;
        for attempt in 1..=PRUNE_ATTEMPTS {
            let meta = current.meta();
            let entries = meta.managed_fields.clone().unwrap_or_default();
            let kept = without_placeholder(&entries);
            if kept.len() == entries.len() {
                return Ok(current);
            }
            let name = meta.name.clone().unwrap_or_default();
            // A resourceVersion in a merge patch is a precondition.
            let patch = serde_json::json!({
                "metadata": {"resourceVersion": meta.resource_version, "managedFields": kept}
            });
            self.wrote();
            let parameters = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..PatchParams::default()
            };
            match api.patch(&name, &parameters, &Patch::Merge(patch)).await {
                Err(kube::Error::Api(status)) if status.code == 409 && attempt < PRUNE_ATTEMPTS => {
                    current = api.get(&name).await?;
                }
                result => return result,
            }
        }
        Ok(current)
    }

    /// Deletes `name` when `uid` (the object this bot controls) is known, with the uid as
    /// precondition so an object re-made meanwhile is never touched.
    async fn delete_owned<K>(&mut self, name: &str, uid: Option<String>) -> Result<(), kube::Error>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + DeserializeOwned
            + Clone
            + Debug,
    {
        let Some(uid) = uid else {
            return Ok(());
        };
        let parameters = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        self.wrote();
        match Api::<K>::namespaced(self.client.clone(), self.namespace)
            .delete(name, &parameters)
            .await
        {
            // Gone already (another reconcile, a person): what we wanted.
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(error) => Err(error),
            Ok(_) => Ok(()),
        }
    }
}

fn changes_role_ref(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 422 && status.message.contains("roleRef"))
}

/// The uid of `name` when this bot controls it (read once, only on the rare roleRef
/// change, so it is not worth a cache of its own).
async fn cached_uid_of_owned<K>(api: &Api<K>, name: &str, owner: &OwnerReference) -> Option<String>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let meta = api.get_metadata_opt(name).await.ok()??;
    controlled_by(&meta.metadata, owner).then_some(meta.metadata.uid?)
}

fn controlled_by(meta: &ObjectMeta, owner: &OwnerReference) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|reference| reference.controller == Some(true) && reference.uid == owner.uid)
}

fn cached<K>(store: &ChildStore<K>, namespace: &str, name: Option<&String>) -> Option<ObjectMeta> {
    let name = name?;
    store
        .get(namespace, name)
        .map(|record| record.metadata(namespace, name))
}

/// Writes every child that needs it, in dependency order. `owner`: the SaintBot's
/// controller reference, to recognise a webhook Ingress of its own no longer wanted.
pub async fn apply(
    client: &Client,
    metrics: &Metrics,
    children_cache: &cache::Children,
    namespace: &str,
    children: &Children,
    owner: &OwnerReference,
) -> Result<Applied, ApplyError> {
    let mut writer = ChildWriter {
        client,
        namespace,
        metrics,
        owner,
        writes: 0,
    };
    let cache = children_cache;
    // Identity and permissions first, so the pod never starts with a missing account.
    writer
        .ensure_cached(&children.service_account, &cache.service_accounts, true)
        .await?;
    writer
        .ensure_cached(&children.role_binding, &cache.role_bindings, true)
        .await?;
    // Config and storage the pod mounts; a pod started before them would hang in
    // ContainerCreating.
    for config_map in [&children.persona_config_map, &children.config_map] {
        writer
            .ensure_cached(config_map, &cache.config_maps, true)
            .await?;
    }
    // The volume controller binds a claim by writing spec.volumeName: not drift.
    writer
        .ensure_cached(&children.workspace_claim, &cache.claims, false)
        .await?;
    writer
        .ensure_cached(&children.service, &cache.services, true)
        .await?;
    // Network fences before any pod they protect exists: sandbox pods (created later by
    // the agent) must never run a moment without their deny-all policy.
    for policy in [
        &children.sandbox_network_policy,
        &children.agent_network_policy,
    ] {
        writer
            .ensure_cached(policy, &cache.network_policies, true)
            .await?;
    }
    // The workload last: it starts only once everything it needs is in place.
    let desired = &children.deployment;
    let deployment_name = desired.metadata.name.clone().unwrap_or_default();
    let stored = cache.deployments.get(namespace, &deployment_name);
    let written = writer
        .ensure(
            desired,
            stored
                .as_ref()
                .map(|stored| stored.metadata(namespace, &deployment_name)),
            true,
        )
        .await?;
    let (pod_ready, rollout_problem) = match (written, stored) {
        (Some(written), _) => (written.pod_ready(), written.rollout_problem()),
        (None, Some(stored)) => (
            stored.pod_ready,
            stored
                .rollout_problem
                .map(|(reason, message)| (reason, message.into())),
        ),
        (None, None) => unreachable!("a child missing from the cache is always written"),
    };
    // Public exposure after everything behind it, and after the NetworkPolicy that
    // admits the ingress controller.
    match &children.webhook_ingress {
        Some(ingress) => {
            writer
                .ensure_cached(ingress, &cache.ingresses, true)
                .await?;
        }
        None => delete_stale_webhook_ingresses(&mut writer, &cache.ingresses).await?,
    }
    Ok(Applied {
        pod_ready,
        rollout_problem,
        writes: writer.writes,
    })
}

/// Deletes the webhook Ingress this bot controls but no longer wants (`spec.webhookIngress`
/// removed, or its last webhook channel gone or switched to a mode that connects out,
/// such as telegram polling or slack socket). Garbage collection only removes children
/// with their owner, so this one is deleted by hand: found in the cache by its labels,
/// taken only when its controller is this SaintBot (uid), and deleted with that object's
/// uid as a precondition, so an Ingress someone else made under the same name is never
/// touched.
async fn delete_stale_webhook_ingresses(
    writer: &mut ChildWriter<'_>,
    ingresses: &ChildStore<Ingress>,
) -> Result<(), ApplyError> {
    let stale = ingresses
        .controlled_by(writer.namespace, &writer.owner.uid)
        .into_iter()
        .filter(|(_, record)| record.webhooks);
    for (name, record) in stale {
        writer
            .delete_owned::<Ingress>(&name, record.metadata(writer.namespace, &name).uid)
            .await
            .map_err(|source| ApplyError {
                kind: "Ingress".to_string(),
                name: name.clone(),
                source,
            })?;
        tracing::info!(namespace = writer.namespace, ingress = %name, "deleted the webhook Ingress no longer asked for");
    }
    Ok(())
}
