//! Writes the built children with server-side apply (field manager `saint-operator`,
//! forced: the operator owns these fields). Every child carries the SaintBot's controller
//! owner reference (set by the builders), so deleting the bot removes them all.

use std::fmt::Debug;

use k8s_openapi::{NamespaceResourceScope, api::apps::v1::Deployment};
use kube::{
    Api, Client, Resource,
    api::{Patch, PatchParams},
};
use serde::{Serialize, de::DeserializeOwned};

use super::build::Children;
use crate::labels::FIELD_MANAGER;

/// Why a child could not be applied.
#[derive(Debug, thiserror::Error)]
#[error("failed to apply {kind} {name:?}")]
pub struct ApplyError {
    pub kind: String,
    pub name: String,
    #[source]
    pub source: kube::Error,
}

/// What the API server returned for the children whose state `update_status` reads.
#[derive(Clone, Debug)]
pub struct Applied {
    /// The Deployment as stored, status included.
    pub deployment: Deployment,
}

async fn apply_one<K>(client: &Client, namespace: &str, object: &K) -> Result<K, ApplyError>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Serialize
        + DeserializeOwned
        + Clone
        + Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    Api::<K>::namespaced(client.clone(), namespace)
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(object),
        )
        .await
        .map_err(|source| ApplyError {
            kind: K::kind(&()).to_string(),
            name,
            source,
        })
}

/// Applies every child in dependency order.
pub async fn apply(
    client: &Client,
    namespace: &str,
    children: &Children,
) -> Result<Applied, ApplyError> {
    // Identity and permissions first, so the pod never starts with a missing account.
    apply_one(client, namespace, &children.service_account).await?;
    apply_one(client, namespace, &children.role).await?;
    apply_one(client, namespace, &children.role_binding).await?;
    // Config and storage the pod mounts; a pod started before them would hang in
    // ContainerCreating.
    apply_one(client, namespace, &children.persona_config_map).await?;
    apply_one(client, namespace, &children.config_map).await?;
    apply_one(client, namespace, &children.workspace_claim).await?;
    apply_one(client, namespace, &children.service).await?;
    // Network fences before any pod they protect exists: sandbox pods (created later by
    // the agent) must never run a moment without their deny-all policy.
    apply_one(client, namespace, &children.sandbox_network_policy).await?;
    apply_one(client, namespace, &children.agent_network_policy).await?;
    // The workload last: it starts only once everything it needs is in place.
    let deployment = apply_one(client, namespace, &children.deployment).await?;
    Ok(Applied { deployment })
}
