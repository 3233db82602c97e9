//! Reads what a SaintBot refers to from the cluster: the Contacts and Roles of its
//! namespace and its persona ConfigMap. The only step of `reconcile` that reads; it
//! never writes.

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
    #[error("failed to read persona ConfigMap {name:?}")]
    GetPersonaConfigMap { name: String, source: kube::Error },
}

/// What a bot refers to, as read from the cluster.
#[derive(Clone, Debug, Default)]
pub struct Dereferenced {
    /// Every Contact in the bot's namespace (selection happens in `validate`).
    pub contacts: Vec<Contact>,
    /// Every Role in the bot's namespace.
    pub roles: Vec<Role>,
    /// `spec.persona.configMapName`, if set and present.
    pub persona_config_map: Option<ConfigMap>,
}

/// Reads the Contacts, Roles and persona ConfigMap of `bot`'s namespace.
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
    let persona_config_map = match &bot.spec.persona.config_map_name {
        Some(name) => {
            let found = Api::<ConfigMap>::namespaced(client.clone(), namespace)
                .get_opt(name)
                .await
                .map_err(|source| DereferenceError::GetPersonaConfigMap {
                    name: name.clone(),
                    source,
                })?;
            // A GitOps apply may create the bot before its ConfigMap: a transient error
            // retries with backoff instead of starting a bot without its persona.
            Some(
                found.ok_or_else(|| DereferenceError::PersonaConfigMapMissing {
                    name: name.clone(),
                })?,
            )
        }
        None => None,
    };
    Ok(Dereferenced {
        contacts,
        roles,
        persona_config_map,
    })
}
