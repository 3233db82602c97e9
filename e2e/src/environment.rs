//! Reads what `e2e/run.sh` exports about the running control plane; never
//! starts anything itself.

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig};

/// Failure to find or reach the control plane `run.sh` started.
#[derive(Debug, thiserror::Error)]
pub enum EnvironmentError {
    #[error(
        "failed to find {variable} in the environment: run the end-to-end suite through e2e/run.sh, which builds and starts the control plane"
    )]
    Missing { variable: &'static str },
    #[error("failed to read kubeconfig {path}")]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("failed to build a client from kubeconfig {path}")]
    Client { path: PathBuf, source: kube::Error },
}

/// Where the control plane and the tools are.
#[derive(Clone, Debug)]
pub struct Environment {
    /// Repository root (for `crds/`, `charts/`, examples).
    pub repo: PathBuf,
    /// Directory holding `kubectl`, `helm`, `etcd`, `kube-apiserver`.
    pub bin_dir: PathBuf,
    /// Admin kubeconfig (client certificate in `system:masters`).
    pub admin_kubeconfig: PathBuf,
    /// `https://127.0.0.1:<port>`.
    pub api_server: String,
    /// CA that signed the API server's serving certificate.
    pub ca_file: PathBuf,
    /// This run's scratch directory (kubeconfigs for service accounts, logs).
    pub run_dir: PathBuf,
    /// The `saint-operator` binary under test.
    pub operator_bin: PathBuf,
}

fn variable(name: &'static str) -> Result<String, EnvironmentError> {
    std::env::var(name)
        .ok()
        .filter(|value| !value.is_empty())
        .ok_or(EnvironmentError::Missing { variable: name })
}

impl Environment {
    /// Reads the variables `run.sh` exports.
    pub fn from_env() -> Result<Self, EnvironmentError> {
        Ok(Self {
            repo: variable("SAINT_E2E_REPO")?.into(),
            bin_dir: variable("SAINT_E2E_BIN_DIR")?.into(),
            admin_kubeconfig: variable("KUBECONFIG")?.into(),
            api_server: variable("SAINT_E2E_API_SERVER")?,
            ca_file: variable("SAINT_E2E_CA_FILE")?.into(),
            run_dir: variable("SAINT_E2E_RUN_DIR")?.into(),
            operator_bin: variable("SAINT_E2E_OPERATOR_BIN")?.into(),
        })
    }

    /// A client authenticated as the cluster admin.
    pub async fn admin_client(&self) -> Result<kube::Client, EnvironmentError> {
        client_from_kubeconfig(&self.admin_kubeconfig).await
    }

    /// Path of a tool built by `e2e/setup.sh`.
    pub fn tool(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }
}

/// A client from a kubeconfig file (admin or a service account's token).
pub async fn client_from_kubeconfig(path: &Path) -> Result<kube::Client, EnvironmentError> {
    let kubeconfig =
        Kubeconfig::read_from(path).map_err(|source| EnvironmentError::Kubeconfig {
            path: path.to_owned(),
            source,
        })?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|source| EnvironmentError::Kubeconfig {
            path: path.to_owned(),
            source,
        })?;
    kube::Client::try_from(config).map_err(|source| EnvironmentError::Client {
        path: path.to_owned(),
        source,
    })
}
