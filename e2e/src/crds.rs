//! Installs the CRDs from the repository's `crds/` directory (what users
//! apply) with server-side apply, and waits until the API server serves them.

use std::{path::Path, time::Duration};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};

use crate::{FIELD_MANAGER, wait};

/// The CRDs could not be read, applied or established.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("failed to read CRD directory {path}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("failed to find any CRD YAML in {path}")]
    Empty { path: String },
    #[error("failed to parse CRD {path}")]
    Parse {
        path: String,
        source: serde_yaml_ng::Error,
    },
    #[error("the API server refused CRD {name}: {message}")]
    Refused { name: String, message: String },
    #[error(transparent)]
    NotEstablished(#[from] wait::WaitError),
}

/// Every CRD in `directory`, sorted by file name.
pub fn read(directory: &Path) -> Result<Vec<CustomResourceDefinition>, CrdError> {
    let display = directory.display().to_string();
    let mut paths: Vec<_> = std::fs::read_dir(directory)
        .map_err(|source| CrdError::Read {
            path: display.clone(),
            source,
        })?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "yaml")
        })
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(CrdError::Empty { path: display });
    }
    paths
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).map_err(|source| CrdError::Read {
                path: path.display().to_string(),
                source,
            })?;
            serde_yaml_ng::from_str(&text).map_err(|source| CrdError::Parse {
                path: path.display().to_string(),
                source,
            })
        })
        .collect()
}

/// Applies every CRD in `directory` and waits for each to be Established.
/// Idempotent: scenarios call it whether or not another one already did.
pub async fn install(
    client: &Client,
    directory: &Path,
) -> Result<Vec<CustomResourceDefinition>, CrdError> {
    let definitions = read(directory)?;
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    for definition in &definitions {
        let name = definition.metadata.name.clone().unwrap_or_default();
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(definition),
        )
        .await
        .map_err(|error| CrdError::Refused {
            name: name.clone(),
            message: crate::api_message(&error),
        })?;
    }
    for definition in &definitions {
        let name = definition.metadata.name.clone().unwrap_or_default();
        wait::until(
            &format!("CRD {name} Established"),
            Duration::from_secs(60),
            || async {
                let current = api.get(&name).await.map_err(|error| error.to_string())?;
                let conditions = current
                    .status
                    .and_then(|status| status.conditions)
                    .unwrap_or_default();
                if conditions
                    .iter()
                    .any(|condition| condition.type_ == "Established" && condition.status == "True")
                {
                    Ok(())
                } else {
                    Err(format!("conditions: {conditions:?}"))
                }
            },
        )
        .await?;
    }
    Ok(definitions)
}
