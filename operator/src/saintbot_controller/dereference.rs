//! Reads what a SaintBot refers to from the cluster: the Contacts and Roles of its
//! namespace and the ConfigMaps it names (persona, skills). The only step of `reconcile` that reads; it
//! never writes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client, api::ListParams};

use crate::crd::{Contact, Role, SaintBot};

/// Why the cluster could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DereferenceError {
    #[error("failed to list Contacts in namespace {namespace:?}")]
    ListContacts {
        namespace: String,
        source: kube::Error,
    },
    #[error("failed to list Roles in namespace {namespace:?}")]
    ListRoles {
        namespace: String,
        source: kube::Error,
    },
    #[error(
        "failed to find persona ConfigMap {name:?} (spec.persona.configMapName); retrying until it exists"
    )]
    PersonaConfigMapMissing { name: String },
    #[error("failed to read ConfigMap {name:?}")]
    GetConfigMap { name: String, source: kube::Error },
}

/// What a bot refers to, as read from the cluster.
#[derive(Clone, Debug, Default)]
pub struct Dereferenced {
    /// Every Contact in the bot's namespace (selection happens in `validate`).
    pub contacts: Vec<Contact>,
    /// Every Role in the bot's namespace.
    pub roles: Vec<Role>,
    /// The ConfigMaps the bot names that exist, by name: `spec.persona.configMapName`
    /// (always present when named) and those of `spec.skills` (a missing one is left
    /// out here and reported by `validate`, naming the field).
    pub config_maps: BTreeMap<String, ConfigMap>,
}

/// Reads the Contacts, Roles and the ConfigMaps `bot` names in its namespace.
pub async fn dereference(
    client: &Client,
    bot: &SaintBot,
    namespace: &str,
) -> Result<Dereferenced, DereferenceError> {
    let contacts = Api::<Contact>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(|source| DereferenceError::ListContacts {
            namespace: namespace.to_string(),
            source,
        })?
        .items;
    let roles = Api::<Role>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(|source| DereferenceError::ListRoles {
            namespace: namespace.to_string(),
            source,
        })?
        .items;
    let config_map_api = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    let mut config_maps = BTreeMap::new();
    if let Some(name) = &bot.spec.persona.config_map_name {
        let found = config_map_api.get_opt(name).await.map_err(|source| {
            DereferenceError::GetConfigMap {
                name: name.clone(),
                source,
            }
        })?;
        // A GitOps apply may create the bot before its ConfigMap: a transient error
        // retries with backoff instead of starting a bot without its persona.
        let found = found
            .ok_or_else(|| DereferenceError::PersonaConfigMapMissing { name: name.clone() })?;
        config_maps.insert(name.clone(), found);
    }
    for skill in &bot.spec.skills {
        let name = &skill.config_map_ref.name;
        if config_maps.contains_key(name) {
            continue;
        }
        let found = config_map_api.get_opt(name).await.map_err(|source| {
            DereferenceError::GetConfigMap {
                name: name.clone(),
                source,
            }
        })?;
        if let Some(found) = found {
            config_maps.insert(name.clone(), found);
        }
    }
    Ok(Dereferenced {
        contacts,
        roles,
        config_maps,
    })
}
