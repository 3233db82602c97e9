//! The chart's example manifests (`charts/saint/examples/`): the company bot,
//! its Contacts, Roles and Secrets — the objects scenarios start from.

use std::path::PathBuf;

use kube::api::DynamicObject;

use crate::{Environment, manifests};

/// An example could not be read or parsed.
#[derive(Debug, thiserror::Error)]
pub enum ExampleError {
    #[error("failed to read example {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to parse example {path}")]
    Parse {
        path: PathBuf,
        source: manifests::ManifestError,
    },
    #[error("example {path} has no {kind} named {name}")]
    Missing {
        path: PathBuf,
        kind: String,
        name: String,
    },
}

/// Directory of the examples.
pub fn directory(environment: &Environment) -> PathBuf {
    environment.repo.join("charts/saint/examples")
}

/// The raw text of `charts/saint/examples/<file>`.
pub fn text(environment: &Environment, file: &str) -> Result<String, ExampleError> {
    let path = directory(environment).join(file);
    std::fs::read_to_string(&path).map_err(|source| ExampleError::Read { path, source })
}

/// Every object in `charts/saint/examples/<file>`.
pub fn load(environment: &Environment, file: &str) -> Result<Vec<DynamicObject>, ExampleError> {
    let text = text(environment, file)?;
    manifests::parse(&text).map_err(|source| ExampleError::Parse {
        path: directory(environment).join(file),
        source,
    })
}

/// The object of `kind` named `name` in `charts/saint/examples/<file>`.
pub fn find(
    environment: &Environment,
    file: &str,
    kind: &str,
    name: &str,
) -> Result<DynamicObject, ExampleError> {
    load(environment, file)?
        .into_iter()
        .find(|object| {
            object
                .types
                .as_ref()
                .is_some_and(|types| types.kind == kind)
                && object.metadata.name.as_deref() == Some(name)
        })
        .ok_or_else(|| ExampleError::Missing {
            path: directory(environment).join(file),
            kind: kind.to_owned(),
            name: name.to_owned(),
        })
}
