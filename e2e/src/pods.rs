//! Pods that really run on the harness's node: waiting for them, explaining them when
//! they fail (events and container logs), asking the API server what Pod Security says
//! of them, and talking HTTP to Services from the host.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client, api::ListParams};
use serde_json::Value;

use crate::{Environment, tools, wait};

/// Ready pods matching `selector` in `namespace`, at least one, waited for.
pub async fn wait_ready(
    client: &Client,
    namespace: &str,
    selector: &str,
    timeout: Duration,
) -> Result<Vec<Pod>, wait::WaitError> {
    let api = Api::<Pod>::namespaced(client.clone(), namespace);
    wait::until(
        &format!("a Ready pod with {selector} in {namespace}"),
        timeout,
        || {
            let api = api.clone();
            async move {
                let pods = api
                    .list(&ListParams::default().labels(selector))
                    .await
                    .map_err(|error| crate::api_message(&error))?
                    .items;
                let ready: Vec<Pod> = pods
                    .iter()
                    .filter(|pod| pod.metadata.deletion_timestamp.is_none() && is_ready(pod))
                    .cloned()
                    .collect();
                if ready.is_empty() {
                    Err(pods.iter().map(describe).collect::<Vec<_>>().join("; "))
                } else {
                    Ok(ready)
                }
            }
        },
    )
    .await
}

/// Whether the pod's `Ready` condition is true.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|condition| condition.type_ == "Ready" && condition.status == "True")
        })
}

/// One line about a pod: name, phase, node and each container's state.
pub fn describe(pod: &Pod) -> String {
    let status = pod.status.clone().unwrap_or_default();
    let containers: Vec<String> = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .map(|container| {
            let state = container
                .state
                .as_ref()
                .map(|state| {
                    if let Some(waiting) = &state.waiting {
                        format!("waiting {}", waiting.reason.clone().unwrap_or_default())
                    } else if let Some(terminated) = &state.terminated {
                        format!(
                            "terminated {} ({})",
                            terminated.exit_code,
                            terminated.reason.clone().unwrap_or_default()
                        )
                    } else {
                        "running".to_owned()
                    }
                })
                .unwrap_or_default();
            format!(
                "{}: {state}, ready {}, restarts {}",
                container.name, container.ready, container.restart_count
            )
        })
        .collect();
    format!(
        "{} {} on {} [{}]",
        pod.metadata.name.clone().unwrap_or_default(),
        status.phase.unwrap_or_default(),
        pod.spec
            .as_ref()
            .and_then(|spec| spec.node_name.clone())
            .unwrap_or_else(|| "no node".to_owned()),
        containers.join("; ")
    )
}

/// What a failing scenario prints: the pods, the events and every container's log
/// (the previous run's too, for restarted containers) in `namespaces`.
pub async fn diagnose(environment: &Environment, namespaces: &[&str]) -> String {
    let kubectl = environment.tool("kubectl");
    let run = |arguments: Vec<String>| {
        let kubectl = kubectl.clone();
        async move {
            let arguments: Vec<&str> = arguments.iter().map(String::as_str).collect();
            match tools::run(&kubectl, &environment.admin_kubeconfig, &arguments, None).await {
                Ok(output) => output.stdout,
                Err(error) => error.to_string(),
            }
        }
    };
    let mut report = String::new();
    for namespace in namespaces {
        let namespace = namespace.to_string();
        report += &format!("===== pods in {namespace}\n");
        report += &run(vec![
            "get".into(),
            "pods,jobs,networkpolicies,pvc".into(),
            "-o".into(),
            "wide".into(),
            "--show-labels".into(),
            "-n".into(),
            namespace.clone(),
        ])
        .await;
        report += &format!("===== events in {namespace}\n");
        report += &run(vec![
            "get".into(),
            "events".into(),
            "--sort-by=.lastTimestamp".into(),
            "-n".into(),
            namespace.clone(),
        ])
        .await;
        let names = run(vec![
            "get".into(),
            "pods".into(),
            "-o".into(),
            "name".into(),
            "-n".into(),
            namespace.clone(),
        ])
        .await;
        for pod in names.lines().filter(|line| line.starts_with("pod/")) {
            for previous in [false, true] {
                let mut arguments = vec![
                    "logs".into(),
                    pod.to_owned(),
                    "--all-containers".into(),
                    "--prefix".into(),
                    "--tail=60".into(),
                    "-n".into(),
                    namespace.clone(),
                ];
                if previous {
                    arguments.push("--previous".into());
                }
                let logs = run(arguments).await;
                if previous && logs.contains("not found") {
                    continue;
                }
                report += &format!(
                    "===== logs of {pod}{}\n{logs}\n",
                    if previous { " (previous)" } else { "" }
                );
            }
        }
    }
    report
}

/// The warnings the API server gives for creating this pod again (a server-side dry
/// run of its spec): Pod Security's `warn` mode speaks here even for pods `enforce`
/// admitted.
pub async fn admission_warnings(
    environment: &Environment,
    pod: &Pod,
) -> Result<Vec<String>, tools::ToolError> {
    let mut copy = serde_json::to_value(pod).expect("pods serialise");
    let name = format!("dry-run-{}", pod.metadata.name.clone().unwrap_or_default());
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    copy["metadata"] = serde_json::json!({
        "name": name.chars().take(63).collect::<String>(),
        "namespace": namespace,
        "labels": pod.metadata.labels.clone().unwrap_or_default(),
    });
    if let Some(object) = copy.as_object_mut() {
        object.remove("status");
    }
    if let Some(spec) = copy["spec"].as_object_mut() {
        spec.remove("nodeName");
    }
    let output = tools::run(
        &environment.tool("kubectl"),
        &environment.admin_kubeconfig,
        &["create", "--dry-run=server", "-f", "-", "-o", "name"],
        Some(&copy.to_string()),
    )
    .await?;
    Ok(output
        .stderr
        .lines()
        .filter(|line| line.to_ascii_lowercase().contains("warning"))
        .map(str::to_owned)
        .collect())
}

/// An HTTP/1.1 POST of a JSON body with a bearer token; returns the status code and
/// the parsed body (a plain client on purpose: the request is exactly what a user's
/// `curl` would send to the Service).
pub async fn post_json(
    address: &str,
    path: &str,
    token: &str,
    body: &Value,
) -> Result<(u16, Value), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|error| format!("failed to connect to {address}: {error}"))?;
    let body = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|error| format!("failed to send POST {path} to {address}: {error}"))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .await
        .map_err(|error| format!("failed to read the answer of {address}{path}: {error}"))?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{address}{path} answered without a header end: {response}"))?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("{address}{path} answered no status line: {head}"))?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    let value = serde_json::from_str(&body).unwrap_or(Value::String(body));
    Ok((status, value))
}

/// The payload of a chunked HTTP/1.1 body.
fn dechunk(mut body: &str) -> String {
    let mut payload = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        let (Some(chunk), Some(after)) = (rest.get(..size), rest.get(size..)) else {
            break;
        };
        if size == 0 {
            break;
        }
        payload.push_str(chunk);
        body = after.trim_start_matches("\r\n");
    }
    payload
}
