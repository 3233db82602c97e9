//! The harness's node itself (run by `SAINT_E2E_NODE=1 e2e/run.sh`, which starts it
//! through `e2e/node.sh`): before a bot pod can mean anything, a pod must be scheduled
//! onto the node, run under Pod Security "restricted" (its sandbox is the pause image
//! the harness built), reach the API server through the `kubernetes` Service with its
//! own token, reach a server on the host's pod-network address, write to a `local-path`
//! claim bound by `saint_e2e::node::provide_local_volume` (as its `fsGroup`), and have
//! its log read and a command exec'd through the API server (the kubelet's serving and
//! client certificates).

use std::{
    net::IpAddr,
    os::unix::fs::MetadataExt,
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::{
    Api, Client,
    api::{DeleteParams, PostParams},
};
use saint_e2e::{Environment, Failure, TestResult, namespace, node, pods, tools, wait};
use serde_json::json;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

/// Longest wait for a pod to finish or be Ready (images are imported: no pull).
const POD_TIMEOUT: Duration = Duration::from_secs(120);
/// The pod's user and its fsGroup (the volume's group): the bot's porter uid and the
/// shared group, so a non-owner writes through the group as in the bot pod.
const POD_UID: i64 = 65533;
const POD_GROUP: i64 = 65532;

/// A one-line HTTP server on the host's pod-network address that answers every GET
/// with `host-probe <path>` and records who asked for what.
struct HostServer {
    port: u16,
    requests: Arc<Mutex<Vec<(IpAddr, String)>>>,
}

impl HostServer {
    async fn start(host_ip: IpAddr) -> Result<Self, Failure> {
        let listener = TcpListener::bind((host_ip, 0)).await.map_err(|error| {
            Failure::message(format!(
                "failed to listen on {host_ip} (the node's pod gateway): {error}"
            ))
        })?;
        let port = listener.local_addr()?.port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, peer)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut buffer = vec![0; 4096];
                    let mut read = 0;
                    while !buffer[..read]
                        .windows(4)
                        .any(|window| window == b"\r\n\r\n")
                    {
                        match stream.read(&mut buffer[read..]).await {
                            Ok(0) | Err(_) => return,
                            Ok(count) => read += count,
                        }
                        if read == buffer.len() {
                            return;
                        }
                    }
                    let request = String::from_utf8_lossy(&buffer[..read]).into_owned();
                    let path = request
                        .split_whitespace()
                        .nth(1)
                        .unwrap_or_default()
                        .to_owned();
                    let body = format!("host-probe {path}\n");
                    seen.lock()
                        .expect("the request log is never poisoned")
                        .push((peer.ip(), path));
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        Ok(Self { port, requests })
    }

    fn requests_for(&self, path: &str) -> Vec<IpAddr> {
        self.requests
            .lock()
            .expect("the request log is never poisoned")
            .iter()
            .filter(|(_, seen)| seen == path)
            .map(|(peer, _)| *peer)
            .collect()
    }
}

/// A pod of the probe image that "restricted" admits, on the node's imported image.
fn probe_pod(node: &node::Node, name: &str, arguments: &[String], claim: Option<&str>) -> Pod {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "securityContext": {
                "runAsNonRoot": true,
                "runAsUser": POD_UID,
                "runAsGroup": POD_UID,
                "fsGroup": POD_GROUP,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [{
                "name": "probe",
                "image": node.probe_image,
                "imagePullPolicy": "Never",
                "args": arguments,
                "resources": {"limits": {"cpu": "100m", "memory": "32Mi"}},
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]},
                },
            }],
        },
    });
    if let Some(claim) = claim {
        pod["spec"]["volumes"] =
            json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]);
        pod["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "data", "mountPath": "/data"}]);
    }
    serde_json::from_value(pod).expect("the probe pod is a Pod")
}

/// Waits until the pod's phase is one of `phases`; a pod that ends `Failed` instead
/// fails at once.
async fn wait_phase(
    client: &Client,
    namespace: &str,
    name: &str,
    phases: &[&str],
) -> Result<Pod, Failure> {
    let api = Api::<Pod>::namespaced(client.clone(), namespace);
    let pod = wait::until(
        &format!("pod {namespace}/{name} {phases:?}"),
        POD_TIMEOUT,
        || {
            let api = api.clone();
            async move {
                let pod = api
                    .get(name)
                    .await
                    .map_err(|error| saint_e2e::api_message(&error))?;
                let phase = pod
                    .status
                    .as_ref()
                    .and_then(|status| status.phase.clone())
                    .unwrap_or_default();
                if phases.contains(&phase.as_str()) || phase == "Failed" {
                    Ok(pod)
                } else {
                    Err(pods::describe(&pod))
                }
            }
        },
    )
    .await?;
    let phase = pod
        .status
        .as_ref()
        .and_then(|status| status.phase.clone())
        .unwrap_or_default();
    if phase == "Failed" {
        return Err(Failure::message(format!(
            "pod {namespace}/{name} failed: {}",
            pods::describe(&pod)
        )));
    }
    Ok(pod)
}

fn pod_ip(pod: &Pod) -> Result<IpAddr, Failure> {
    let ip = pod
        .status
        .as_ref()
        .and_then(|status| status.pod_ip.clone())
        .unwrap_or_default();
    ip.parse()
        .map_err(|_| Failure::message(format!("pod has no IP: {}", pods::describe(pod))))
}

async fn kubectl(environment: &Environment, arguments: &[&str]) -> Result<String, Failure> {
    Ok(tools::run(
        &environment.tool("kubectl"),
        &environment.admin_kubeconfig,
        arguments,
        None,
    )
    .await?
    .stdout)
}

#[tokio::test]
async fn restricted_pod_reaches_the_api_server_and_the_host_writes_its_claim_and_answers_logs_and_exec()
-> TestResult {
    let environment = Environment::from_env()?;
    let node = node::Node::from_env()?;
    let client = environment.admin_client().await?;
    let namespace = namespace::create(&client, "node-smoke", true).await?;
    let outcome = smoke(&environment, &node, &client, &namespace).await;
    let outcome = match outcome {
        Ok(()) => Ok(()),
        Err(failure) => {
            let report = pods::diagnose(&environment, &[namespace.as_str()]).await;
            Err(Failure::message(format!("{failure:?}\n{report}")))
        }
    };
    namespace::delete(&client, &namespace).await?;
    let volume = format!("{namespace}-data");
    match Api::<PersistentVolume>::all(client.clone())
        .delete(&volume, &DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(error) => return Err(error.into()),
    }
    outcome
}

async fn smoke(
    environment: &Environment,
    node: &node::Node,
    client: &Client,
    namespace: &str,
) -> TestResult {
    let server = HostServer::start(node.host_ip).await?;
    let token = format!("smoke-{}", std::process::id());
    let host_url = |path: &str| format!("http://{}:{}/{path}", node.host_ip, server.port);

    // The workspace-like claim, bound by the harness's stand-in provisioner.
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace);
    claims
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": node::STORAGE_CLASS,
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }))?,
        )
        .await?;
    let volume = node::provide_local_volume(client, namespace, "data").await?;
    wait::until(
        &format!("claim {namespace}/data Bound"),
        POD_TIMEOUT,
        || {
            let claims = claims.clone();
            async move {
                let claim = claims
                    .get("data")
                    .await
                    .map_err(|error| saint_e2e::api_message(&error))?;
                match claim
                    .status
                    .as_ref()
                    .and_then(|status| status.phase.as_deref())
                {
                    Some("Bound") => Ok(()),
                    other => Err(format!("phase {other:?}")),
                }
            }
        },
    )
    .await?;

    // One pod that runs to completion: API server, host, volume.
    let pods_api = Api::<Pod>::namespaced(client.clone(), namespace);
    let arguments = vec![
        "api".to_owned(),
        "get".to_owned(),
        host_url(&token),
        "write".to_owned(),
        "/data/proof".to_owned(),
        token.clone(),
    ];
    let probe = probe_pod(node, "probe", &arguments, Some("data"));
    let warnings = pods::admission_warnings(environment, &probe).await?;
    assert!(
        warnings.is_empty(),
        "Pod Security warns about the probe pod: {warnings:?}"
    );
    pods_api.create(&PostParams::default(), &probe).await?;
    let finished = wait_phase(client, namespace, "probe", &["Succeeded"]).await?;
    let spec = finished.spec.as_ref().expect("a pod has a spec");
    assert_eq!(
        spec.node_name.as_deref(),
        Some(node.name.as_str()),
        "scheduled elsewhere"
    );
    let probe_ip = pod_ip(&finished)?;

    let log = kubectl(environment, &["logs", "probe", "-n", namespace]).await?;
    let api_line = format!(
        "api: https://10.0.0.1:443/apis/authentication.k8s.io/v1/selfsubjectreviews answered 201 \
         user=system:serviceaccount:{namespace}:default"
    );
    assert!(
        log.contains(&api_line),
        "the pod did not reach the API server through the kubernetes Service as its own account; log:\n{log}"
    );
    let get_line = format!(
        "get: {} answered 200 body=host-probe /{token}",
        host_url(&token)
    );
    assert!(
        log.contains(&get_line),
        "the pod did not reach the host; log:\n{log}"
    );
    assert_eq!(
        server.requests_for(&format!("/{token}")),
        vec![probe_ip],
        "the host server saw other peers than the pod's own address {probe_ip}"
    );

    // The claim's directory on the host holds what the pod wrote, group-owned by
    // the fsGroup the kubelet applied.
    let directory = volume
        .spec
        .as_ref()
        .and_then(|spec| spec.local.as_ref())
        .map(|local| local.path.clone())
        .ok_or_else(|| Failure::message("the provided volume is not a local volume"))?;
    let proof = std::path::Path::new(&directory).join("proof");
    let written = std::fs::read_to_string(&proof)?;
    assert_eq!(written, token, "{} holds something else", proof.display());
    let metadata = std::fs::metadata(&proof)?;
    assert_eq!(
        i64::from(metadata.uid()),
        POD_UID,
        "{} not written by the pod's user",
        proof.display()
    );
    assert_eq!(
        i64::from(metadata.gid()),
        POD_GROUP,
        "{} not in the pod's fsGroup",
        proof.display()
    );

    // A long-running pod: Ready, its log streamed, a command exec'd in it through the
    // API server and the kubelet.
    let sleeper = probe_pod(node, "sleeper", &["sleep".to_owned()], None);
    pods_api.create(&PostParams::default(), &sleeper).await?;
    let ready = pods::wait_ready(client, namespace, "app=sleeper", POD_TIMEOUT).await?;
    let sleeper_ip = pod_ip(&ready[0])?;
    assert_ne!(sleeper_ip, probe_ip, "two pods got the same address");
    let exec_path = format!("{token}-exec");
    let exec = kubectl(
        environment,
        &[
            "exec",
            "sleeper",
            "-n",
            namespace,
            "--",
            "/probe",
            "get",
            &host_url(&exec_path),
        ],
    )
    .await?;
    assert!(
        exec.contains(&format!("answered 200 body=host-probe /{exec_path}")),
        "exec output: {exec}"
    );
    assert_eq!(
        server.requests_for(&format!("/{exec_path}")),
        vec![sleeper_ip]
    );
    // Ready says the container started, not that it has written yet: poll.
    wait::until(
        &format!("sleeper's log in {namespace} to show it waiting"),
        POD_TIMEOUT,
        || async move {
            let log = kubectl(environment, &["logs", "sleeper", "-n", namespace])
                .await
                .map_err(|failure| format!("{failure:?}"))?;
            if log.contains("sleep: waiting for SIGTERM") {
                Ok(())
            } else {
                Err(format!("log: {log:?}"))
            }
        },
    )
    .await?;
    Ok(())
}
