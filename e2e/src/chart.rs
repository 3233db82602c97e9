//! Installs the Helm chart (`charts/saint`) with `helm install`, then runs the
//! operator as a separate process with the chart's own arguments and a token
//! of the chart's ServiceAccount — so the chart's RBAC, not the admin's, is
//! what the operator gets, and a missing verb fails the scenario.

use std::path::PathBuf;

use k8s_openapi::api::apps::v1::Deployment;
use kube::{Api, Client, api::ListParams};

use crate::{
    Environment, namespace,
    operator_process::{OperatorProcess, OperatorProcessError},
    service_account, tools,
};

/// The chart could not be installed or its operator not started.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    #[error(transparent)]
    Namespace(#[from] namespace::NamespaceError),
    #[error(transparent)]
    Helm(#[from] tools::ToolError),
    #[error("failed to read the chart's operator Deployment in {namespace}: {message}")]
    Deployment { namespace: String, message: String },
    #[error(transparent)]
    ServiceAccount(#[from] service_account::ServiceAccountError),
    #[error(transparent)]
    Process(#[from] OperatorProcessError),
    #[error("failed to find a free loopback port: {0}")]
    Port(std::io::Error),
}

/// One `helm install` of the chart.
#[derive(Debug, Clone)]
pub struct ChartInstall {
    pub release: String,
    /// Release namespace (the operator's Lease and ServiceAccount live here).
    pub namespace: String,
    /// The operator's ServiceAccount, as the chart names it.
    pub service_account: String,
    /// The operator container's arguments, as the chart renders them.
    pub operator_arguments: Vec<String>,
    /// Kubeconfig holding a token of `service_account` (no admin credentials).
    pub kubeconfig: PathBuf,
}

/// `helm install <release> charts/saint` into a fresh namespace that enforces
/// Pod Security "restricted" (the chart's own operator pod must pass it).
pub async fn install(
    environment: &Environment,
    admin: &Client,
    release: &str,
    values: &[&str],
) -> Result<ChartInstall, ChartError> {
    let namespace = namespace::create(admin, release, true).await?;
    let chart = environment.repo.join("charts/saint");
    let chart = chart.to_string_lossy();
    let mut arguments = vec![
        "install",
        release,
        &chart,
        "--namespace",
        &namespace,
        // No kubelet: the chart's own operator pod is admitted but never runs.
        "--wait=false",
    ];
    for value in values {
        arguments.extend(["--set", value]);
    }
    tools::run(
        &environment.tool("helm"),
        &environment.admin_kubeconfig,
        &arguments,
        None,
    )
    .await?;

    let deployments = Api::<Deployment>::namespaced(admin.clone(), &namespace)
        .list(&ListParams::default().labels(&format!(
            "app.kubernetes.io/instance={release},app.kubernetes.io/component=operator"
        )))
        .await
        .map_err(|error| ChartError::Deployment {
            namespace: namespace.clone(),
            message: crate::api_message(&error),
        })?;
    let pod_spec = deployments
        .items
        .first()
        .and_then(|deployment| deployment.spec.as_ref())
        .and_then(|spec| spec.template.spec.clone())
        .ok_or_else(|| ChartError::Deployment {
            namespace: namespace.clone(),
            message: "no operator Deployment with a pod template".to_owned(),
        })?;
    let service_account = pod_spec.service_account_name.clone().unwrap_or_default();
    let operator_arguments = pod_spec
        .containers
        .first()
        .and_then(|container| container.args.clone())
        .unwrap_or_default();
    let kubeconfig =
        service_account::kubeconfig(environment, admin, &namespace, &service_account).await?;
    Ok(ChartInstall {
        release: release.to_owned(),
        namespace,
        service_account,
        operator_arguments,
        kubeconfig,
    })
}

/// A free TCP port on loopback (bind port 0 and let the kernel choose).
pub fn free_port() -> Result<u16, ChartError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(ChartError::Port)?;
    listener
        .local_addr()
        .map(|address| address.port())
        .map_err(ChartError::Port)
}

/// An operator process started from a chart install.
#[derive(Debug)]
pub struct RunningOperator {
    pub process: OperatorProcess,
    /// `http://127.0.0.1:<port>` serving /healthz, /readyz, /metrics.
    pub http_url: String,
    /// Lease holder identity (`POD_NAME`).
    pub identity: String,
}

impl RunningOperator {
    /// The Prometheus text from `/metrics`, or the error as text.
    pub async fn metrics(&self) -> Result<String, String> {
        http_get(&self.http_url, "/metrics").await
    }
}

/// A plain HTTP/1.0 GET on loopback: the body of a 200 answer, or the error
/// as text. (The operator serves plain HTTP; no client library needed.)
pub async fn http_get(base_url: &str, path: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let address = base_url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|error| format!("failed to connect to {address}: {error}"))?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|error| format!("failed to send GET {path} to {address}: {error}"))?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .map_err(|error| format!("failed to read GET {path} from {address}: {error}"))?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    if head
        .lines()
        .next()
        .is_some_and(|status| status.contains(" 200 "))
    {
        Ok(body.to_owned())
    } else {
        Err(format!("GET {address}{path} answered: {head}"))
    }
}

impl ChartInstall {
    /// Starts `saint-operator` with the chart's arguments (the listen address
    /// moved to a free loopback port) and the chart ServiceAccount's token.
    pub fn start_operator(
        &self,
        environment: &Environment,
        identity: &str,
    ) -> Result<RunningOperator, ChartError> {
        let port = free_port()?;
        let arguments: Vec<String> = self
            .operator_arguments
            .iter()
            .map(|argument| {
                if argument.starts_with("--listen-address") {
                    format!("--listen-address=127.0.0.1:{port}")
                } else {
                    argument.clone()
                }
            })
            .collect();
        let log = environment
            .run_dir
            .join(format!("operator-{}-{identity}.log", self.release));
        let process = OperatorProcess::start(
            &environment.operator_bin,
            &self.kubeconfig,
            &arguments,
            &[
                ("POD_NAME", identity.to_owned()),
                ("POD_NAMESPACE", self.namespace.clone()),
            ],
            log,
        )?;
        Ok(RunningOperator {
            process,
            http_url: format!("http://127.0.0.1:{port}"),
            identity: identity.to_owned(),
        })
    }
}
