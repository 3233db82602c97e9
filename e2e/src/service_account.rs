//! Acts as a ServiceAccount: asks the TokenRequest API for a token and writes
//! a kubeconfig holding only that token, so a process or client gets exactly
//! the account's RBAC — never the admin's.

use std::path::{Path, PathBuf};

use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::ServiceAccount,
};
use kube::{Api, Client, api::PostParams};

use crate::Environment;

/// No token or kubeconfig could be had.
#[derive(Debug, thiserror::Error)]
pub enum ServiceAccountError {
    #[error("failed to request a token for ServiceAccount {namespace}/{name}: {message}")]
    TokenRequest {
        namespace: String,
        name: String,
        message: String,
    },
    #[error("the TokenRequest for {namespace}/{name} returned no token")]
    EmptyToken { namespace: String, name: String },
    #[error("failed to write kubeconfig {path}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A bearer token for `namespace/name`, valid for an hour.
pub async fn token(
    admin: &Client,
    namespace: &str,
    name: &str,
) -> Result<String, ServiceAccountError> {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3_600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let response = Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .map_err(|error| ServiceAccountError::TokenRequest {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            message: crate::api_message(&error),
        })?;
    response
        .status
        .map(|status| status.token)
        .filter(|token| !token.is_empty())
        .ok_or_else(|| ServiceAccountError::EmptyToken {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
}

/// Writes a kubeconfig for `namespace/name` into the run directory and
/// returns its path. Its default namespace is the account's own.
pub async fn kubeconfig(
    environment: &Environment,
    admin: &Client,
    namespace: &str,
    name: &str,
) -> Result<PathBuf, ServiceAccountError> {
    let token = token(admin, namespace, name).await?;
    let path = environment
        .run_dir
        .join(format!("serviceaccount-{namespace}-{name}.kubeconfig"));
    write_kubeconfig(environment, &path, namespace, name, &token)?;
    Ok(path)
}

fn write_kubeconfig(
    environment: &Environment,
    path: &Path,
    namespace: &str,
    name: &str,
    token: &str,
) -> Result<(), ServiceAccountError> {
    let document = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "saint-e2e", "cluster": {
            "server": environment.api_server,
            "certificate-authority": environment.ca_file,
        }}],
        "users": [{"name": format!("{namespace}-{name}"), "user": {"token": token}}],
        "contexts": [{"name": "saint-e2e", "context": {
            "cluster": "saint-e2e",
            "user": format!("{namespace}-{name}"),
            "namespace": namespace,
        }}],
        "current-context": "saint-e2e",
    });
    // JSON is valid YAML, and every kubeconfig reader accepts it.
    std::fs::write(path, document.to_string()).map_err(|source| ServiceAccountError::Write {
        path: path.to_owned(),
        source,
    })
}
