//! Offline rendering: reads SaintBot, Contact, Role and ConfigMap manifests from YAML
//! text and renders what the controller would, without a cluster. Used by the `render`
//! example and the tests. Pure: no client, no files.

use k8s_openapi::api::core::v1::ConfigMap;
use serde::Deserialize;

use crate::{
    crd::{Contact, Role, SaintBot},
    saintbot_controller::dereference::Dereferenced,
};

/// The uid given to SaintBots read without one (owner references need a uid).
pub const OFFLINE_UID: &str = "00000000-0000-0000-0000-000000000000";

/// Why manifests could not be read.
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    #[error("failed to parse YAML document {index}")]
    Yaml {
        index: usize,
        source: serde_yaml_ng::Error,
    },
    #[error("failed to read {kind} in YAML document {index}")]
    Object {
        kind: String,
        index: usize,
        source: serde_json::Error,
    },
}

/// The bots of a manifest set and everything they could refer to.
#[derive(Debug, Default)]
pub struct Manifests {
    /// SaintBots, in file order.
    pub bots: Vec<SaintBot>,
    /// Contacts, Roles and ConfigMaps (by name), as `dereference` would read them.
    pub dereferenced: Dereferenced,
}

/// Reads multi-document YAML. Objects without a namespace get `default_namespace`;
/// kinds other than SaintBot, Contact, Role and ConfigMap (e.g. Secrets) are skipped.
pub fn read_manifests(
    text: &str,
    default_namespace: &str,
    manifests: &mut Manifests,
) -> Result<(), OfflineError> {
    for (index, document) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let mut value = serde_json::Value::deserialize(document)
            .map_err(|source| OfflineError::Yaml { index, source })?;
        if value.is_null() {
            continue;
        }
        let kind = value["kind"].as_str().unwrap_or_default().to_string();
        if value["metadata"]["namespace"].is_null() {
            value["metadata"]["namespace"] =
                serde_json::Value::String(default_namespace.to_string());
        }
        // Owner references need a uid; offline there is none, so a recognisable stand-in.
        if kind == "SaintBot" && value["metadata"]["uid"].is_null() {
            value["metadata"]["uid"] = serde_json::Value::String(OFFLINE_UID.to_string());
        }
        let error = |source| OfflineError::Object {
            kind: kind.clone(),
            index,
            source,
        };
        match kind.as_str() {
            "SaintBot" => manifests
                .bots
                .push(serde_json::from_value(value).map_err(error)?),
            "Contact" => manifests
                .dereferenced
                .contacts
                .push(serde_json::from_value::<Contact>(value).map_err(error)?),
            "Role" => manifests
                .dereferenced
                .roles
                .push(serde_json::from_value::<Role>(value).map_err(error)?),
            "ConfigMap" => {
                let config_map = serde_json::from_value::<ConfigMap>(value).map_err(error)?;
                let name = config_map.metadata.name.clone().unwrap_or_default();
                manifests.dereferenced.config_maps.insert(name, config_map);
            }
            _ => {}
        }
    }
    Ok(())
}
