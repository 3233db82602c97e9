//! Parses YAML manifests and sends them to the API server as dynamic objects
//! (resolving each kind through discovery), so scenarios use the same YAML a
//! user would `kubectl apply`.

use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams, PostParams},
    core::GroupVersionKind,
    discovery::{self, ApiCapabilities, Scope},
};
use serde::Deserialize;

use crate::FIELD_MANAGER;

/// A manifest that could not be parsed or sent.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("failed to parse manifest YAML")]
    Parse(#[from] serde_yaml_ng::Error),
    #[error("failed to read apiVersion/kind of a manifest: {0}")]
    TypeMeta(String),
    #[error("failed to discover {kind}")]
    Discovery { kind: String, source: kube::Error },
    #[error("the API server refused {kind} {name}: {message}")]
    Refused {
        kind: String,
        name: String,
        message: String,
        source: Box<kube::Error>,
    },
}

impl ManifestError {
    /// The API server's own words when it refused the object.
    pub fn api_message(&self) -> Option<&str> {
        match self {
            ManifestError::Refused { message, .. } => Some(message),
            _ => None,
        }
    }
}

/// Every non-empty document of a multi-document YAML stream.
pub fn parse(text: &str) -> Result<Vec<DynamicObject>, ManifestError> {
    let mut objects = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let value = serde_yaml_ng::Value::deserialize(document)?;
        if value.is_null() {
            continue;
        }
        objects.push(serde_yaml_ng::from_value(value)?);
    }
    Ok(objects)
}

/// The API for an object's kind, namespaced to `namespace` when the kind is.
pub async fn api_for(
    client: &Client,
    object: &DynamicObject,
    namespace: &str,
) -> Result<(Api<DynamicObject>, ApiCapabilities), ManifestError> {
    let types = object
        .types
        .as_ref()
        .ok_or_else(|| ManifestError::TypeMeta(format!("{:?}", object.metadata.name)))?;
    let gvk = GroupVersionKind::try_from(types)
        .map_err(|error| ManifestError::TypeMeta(error.to_string()))?;
    let (resource, capabilities) =
        discovery::pinned_kind(client, &gvk)
            .await
            .map_err(|source| ManifestError::Discovery {
                kind: types.kind.clone(),
                source,
            })?;
    let api = match capabilities.scope {
        Scope::Namespaced => Api::namespaced_with(client.clone(), namespace, &resource),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    Ok((api, capabilities))
}

fn describe(object: &DynamicObject) -> (String, String) {
    (
        object
            .types
            .as_ref()
            .map(|types| types.kind.clone())
            .unwrap_or_default(),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

/// Creates (POST) the object; the API server's refusal comes back verbatim.
pub async fn create(
    client: &Client,
    object: &DynamicObject,
    namespace: &str,
) -> Result<DynamicObject, ManifestError> {
    let (api, _) = api_for(client, object, namespace).await?;
    api.create(&PostParams::default(), object)
        .await
        .map_err(|source| {
            let (kind, name) = describe(object);
            ManifestError::Refused {
                kind,
                name,
                message: crate::api_message(&source),
                source: Box::new(source),
            }
        })
}

/// Server-side applies the object with the suite's field manager.
pub async fn apply(
    client: &Client,
    object: &DynamicObject,
    namespace: &str,
) -> Result<DynamicObject, ManifestError> {
    let (api, _) = api_for(client, object, namespace).await?;
    let (kind, name) = describe(object);
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map_err(|source| ManifestError::Refused {
        kind,
        name,
        message: crate::api_message(&source),
        source: Box::new(source),
    })
}

/// Applies every document of a YAML stream, in order.
pub async fn apply_all(
    client: &Client,
    text: &str,
    namespace: &str,
) -> Result<Vec<DynamicObject>, ManifestError> {
    let mut applied = Vec::new();
    for object in parse(text)? {
        applied.push(apply(client, &object, namespace).await?);
    }
    Ok(applied)
}
