//! Writes the built children with server-side apply (field manager `saint-operator`,
//! forced: the operator owns these fields). Every child carries the SaintBot's controller
//! owner reference (set by the builders), so deleting the bot removes them all. The one
//! optional child, the webhook Ingress, is deleted here when no longer wanted.

use std::fmt::Debug;

use k8s_openapi::{
    NamespaceResourceScope,
    api::{apps::v1::Deployment, networking::v1::Ingress},
    apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::{
    Api, Client, Resource,
    api::{DeleteParams, ListParams, Patch, PatchParams, Preconditions},
};
use serde::{Serialize, de::DeserializeOwned};

use super::build::Children;
use crate::labels::{FIELD_MANAGER, WEBHOOKS_COMPONENT, webhook_ingress_name};

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

/// Deletes the webhook Ingress this bot owns but no longer wants (`spec.webhookIngress`
/// removed, or its last webhook channel gone or switched to a mode that connects out,
/// such as telegram polling or slack socket). Garbage collection only removes children
/// with their owner, so this one is deleted by hand: found by its labels, taken only
/// when its controller is this SaintBot (uid), and deleted with that object's uid as a
/// precondition, so an Ingress someone else made under the same name is never touched.
async fn delete_stale_webhook_ingress(
    client: &Client,
    namespace: &str,
    owner: &OwnerReference,
) -> Result<(), ApplyError> {
    let api = Api::<Ingress>::namespaced(client.clone(), namespace);
    let failed = |name: String| {
        move |source| ApplyError {
            kind: "Ingress".to_string(),
            name,
            source,
        }
    };
    let selector = format!(
        "app.kubernetes.io/instance={},app.kubernetes.io/component={WEBHOOKS_COMPONENT}",
        owner.name
    );
    let stale = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(failed(webhook_ingress_name(&owner.name)))?;
    for ingress in stale.items {
        let owned = ingress
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|reference| reference.controller == Some(true) && reference.uid == owner.uid);
        let (Some(name), Some(uid)) = (ingress.metadata.name, ingress.metadata.uid) else {
            continue;
        };
        if !owned {
            continue;
        }
        let parameters = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &parameters).await {
            // Gone already (another reconcile, a person): what we wanted.
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => return Err(failed(name)(source)),
            Ok(_) => {
                tracing::info!(namespace, ingress = %name, "deleted the webhook Ingress no longer asked for")
            }
        }
    }
    Ok(())
}

/// Applies every child in dependency order. `owner`: the SaintBot's controller
/// reference, to recognise a webhook Ingress of its own that is no longer wanted.
pub async fn apply(
    client: &Client,
    namespace: &str,
    children: &Children,
    owner: &OwnerReference,
) -> Result<Applied, ApplyError> {
    // Identity and permissions first, so the pod never starts with a missing account.
    apply_one(client, namespace, &children.service_account).await?;
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
    // Public exposure after everything behind it, and after the NetworkPolicy that
    // admits the ingress controller.
    match &children.webhook_ingress {
        Some(ingress) => {
            apply_one(client, namespace, ingress).await?;
        }
        None => delete_stale_webhook_ingress(client, namespace, owner).await?,
    }
    Ok(Applied { deployment })
}
