//! Pure builders: one function per child object of a SaintBot, each reading only the
//! `ValidatedSaintBot`. No client, no clock, no randomness: the same input always gives
//! the same objects, so server-side apply is a no-op when nothing changed.

pub mod config_map;
pub mod ingress;
pub mod network_policy;
pub mod pvc;
pub mod rbac;
pub mod sandbox_job;
pub mod service;
pub mod service_account;
pub mod workload;

pub use crate::cache::child_state::sha256_hex;
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, PersistentVolumeClaim, Service, ServiceAccount},
        networking::v1::{Ingress, NetworkPolicy},
        rbac::v1::RoleBinding,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use serde::de::DeserializeOwned;

use super::validate::ValidatedSaintBot;
use crate::labels::labels;

/// Metadata of a child: name, namespace, standard labels and the controller owner reference.
pub fn child_metadata(bot: &ValidatedSaintBot, name: String, component: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(bot.namespace.clone()),
        labels: Some(labels(&bot.name, component)),
        owner_references: Some(vec![bot.owner_reference.clone()]),
        ..ObjectMeta::default()
    }
}

/// Turns a JSON manifest into its typed object. In debug builds (tests) it also checks
/// that nothing was dropped: k8s-openapi ignores unknown fields, so a misspelt field
/// would otherwise vanish silently.
pub(crate) fn typed<T: DeserializeOwned + serde::Serialize>(value: serde_json::Value) -> T {
    let object: T =
        serde_json::from_value(value.clone()).expect("builder JSON matches the Kubernetes type");
    if cfg!(debug_assertions) {
        let mut round_trip = serde_json::to_value(&object).expect("typed object serialises");
        // Serialising a typed object adds `apiVersion` and `kind`; that is not a loss.
        if value.get("apiVersion").is_none()
            && let Some(fields) = round_trip.as_object_mut()
        {
            fields.remove("apiVersion");
            fields.remove("kind");
        }
        assert_eq!(
            round_trip, value,
            "builder JSON lost or changed fields when typed"
        );
    }
    object
}

/// Every child of one SaintBot.
#[derive(Clone, Debug)]
pub struct Children {
    pub service_account: ServiceAccount,
    pub role_binding: RoleBinding,
    pub config_map: ConfigMap,
    pub persona_config_map: ConfigMap,
    pub workspace_claim: PersistentVolumeClaim,
    pub service: Service,
    pub agent_network_policy: NetworkPolicy,
    pub sandbox_network_policy: NetworkPolicy,
    pub deployment: Deployment,
    /// `None`: no webhook Ingress wanted; a stale one is deleted by `apply`.
    pub webhook_ingress: Option<Ingress>,
}

/// Builds every child.
pub fn build_children(bot: &ValidatedSaintBot) -> Children {
    Children {
        service_account: service_account::service_account(bot),
        role_binding: rbac::agent_role_binding(bot),
        config_map: config_map::config_map(bot),
        persona_config_map: config_map::persona_config_map(bot),
        workspace_claim: pvc::workspace_claim(bot),
        service: service::service(bot),
        agent_network_policy: network_policy::agent_network_policy(bot),
        sandbox_network_policy: network_policy::sandbox_network_policy(bot),
        deployment: workload::deployment(bot),
        webhook_ingress: ingress::webhook_ingress(bot),
    }
}
