//! Reads what a SaintBot refers to: the Contacts and Roles of its namespace from the
//! operator's caches (no request), and the ConfigMaps it names (persona, skills) from the
//! API server. The only step of `reconcile` that reads; it never writes.

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};

use crate::{
    cache::{Sources, in_namespace},
    crd::{Contact, Role, SaintBot},
    saintbot_controller::validate::webhook_ingress::{HostClaim, claims_sharing_host},
    selection::{bot_uses_contact, bot_uses_role},
};

/// Why the cluster could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DereferenceError {
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
    /// The Contacts of the bot's namespace it selects.
    pub contacts: Vec<Contact>,
    /// The Roles of the bot's namespace it selects.
    pub roles: Vec<Role>,
    /// The ConfigMaps the bot names that exist, by name: `spec.persona.configMapName`
    /// (always present when named) and those of `spec.skills` (a missing one is left
    /// out here and reported by `validate`, naming the field).
    pub config_maps: BTreeMap<String, ConfigMap>,
    /// The other bots' claims on the webhook host this bot claims (any namespace the
    /// operator watches), from the cache: who owns a shared host is decided in `validate`.
    pub host_claims: Vec<HostClaim>,
}

/// Reads the Contacts and Roles of `bot`'s namespace from `sources` and the ConfigMaps
/// it names from the API server.
pub async fn dereference(
    client: &Client,
    sources: &Sources,
    bot: &SaintBot,
    namespace: &str,
) -> Result<Dereferenced, DereferenceError> {
    // Only what the bot selects is copied out of the cache; `validate` selects with the
    // same predicates, so it sees exactly what it would pick from the whole namespace.
    let contacts = in_namespace(&sources.contacts, namespace)
        .into_iter()
        .filter(|contact| bot_uses_contact(bot, contact))
        .map(Arc::unwrap_or_clone)
        .collect();
    let roles = in_namespace(&sources.roles, namespace)
        .into_iter()
        .filter(|role| bot_uses_role(bot, role))
        .map(Arc::unwrap_or_clone)
        .collect();
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
    let host_claims =
        claims_sharing_host(bot, sources.bots.state().iter().map(|other| other.as_ref()));
    Ok(Dereferenced {
        contacts,
        roles,
        config_maps,
        host_claims,
    })
}
