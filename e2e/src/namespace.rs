//! Creates a fresh namespace per scenario, optionally enforcing the Pod
//! Security "restricted" level, so scenarios never see each other's objects.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};

/// The namespace could not be created.
#[derive(Debug, thiserror::Error)]
#[error("failed to create or delete namespace {name}: {message}")]
pub struct NamespaceError {
    pub name: String,
    pub message: String,
}

/// Creates `<prefix>-<n>` with a unique suffix and returns its name.
pub async fn create(
    client: &Client,
    prefix: &str,
    restricted: bool,
) -> Result<String, NamespaceError> {
    let suffix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() % 1_000_000)
        .unwrap_or_default();
    let name = format!("{prefix}-{suffix}");
    let mut labels = BTreeMap::new();
    if restricted {
        // "latest" makes the API server judge by its own (1.34) restricted
        // profile rather than an older pinned one.
        for mode in ["enforce", "warn", "audit"] {
            labels.insert(
                format!("pod-security.kubernetes.io/{mode}"),
                "restricted".to_owned(),
            );
            labels.insert(
                format!("pod-security.kubernetes.io/{mode}-version"),
                "latest".to_owned(),
            );
        }
    }
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .map_err(|error| NamespaceError {
            name: name.clone(),
            message: crate::api_message(&error),
        })?;
    Ok(name)
}

/// Deletes a scenario's namespace (the namespace controller removes what is
/// in it), so later scenarios' operators stop reconciling its objects.
pub async fn delete(client: &Client, name: &str) -> Result<(), NamespaceError> {
    Api::<Namespace>::all(client.clone())
        .delete(name, &kube::api::DeleteParams::default())
        .await
        .map(|_| ())
        .map_err(|error| NamespaceError {
            name: name.to_owned(),
            message: crate::api_message(&error),
        })
}
