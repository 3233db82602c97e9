//! NetworkPolicy enforced on the harness's node (run by `SAINT_E2E_NODE=1 e2e/run.sh`,
//! which starts kube-router's network-policy firewall through `e2e/netpol.sh`): the
//! operator's own sandbox NetworkPolicy (its builder's golden rendering, today
//! `policyTypes: [Ingress, Egress]` and no rules), applied to a pod carrying a sandbox
//! pod's labels, cuts it off from a probe server on the host, from the API server behind
//! the `kubernetes` Service (kube-proxy's rules and kube-router's together) and from
//! other pods, while a pod without any policy still reaches them, and deleting the
//! policy gives the path back; an ingress-only deny blocks pod-to-pod.
//!
//! Every refusal is shown twice: the pod's `probe connect` fails, and the server it
//! aimed at never saw the token it would have sent. Before each policy the same pod
//! reaches the same server (the positive control), so a refusal is the policy's doing,
//! not a network that never worked. Probe servers listen only on this machine: the
//! host's address on the pod bridge, and pods on that bridge.

use std::{
    collections::BTreeMap,
    net::{IpAddr, SocketAddr},
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Service;
use kube::{Api, Client};
use saint_e2e::{Environment, Failure, TestResult, namespace, pods, tools, wait};
use serde_json::json;
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::TcpListener,
};

/// Longest wait for a probe pod to run (the image is imported, so no pull).
const POD_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest wait from applying a policy to kube-router refusing a connection.
const ENFORCEMENT_TIMEOUT: Duration = Duration::from_secs(60);
/// The port the probe pods serve on.
const POD_PORT: u16 = 8080;

/// The node run's settings, exported by `e2e/run.sh` after `node_start` and `netpol_start`.
struct NetpolRun {
    environment: Environment,
    client: Client,
    /// The host's address on the pod bridge (the CNI gateway).
    host_ip: IpAddr,
    /// The probe image `netpol_start` imported into the node's containerd.
    probe_image: String,
}

fn variable(name: &str) -> Result<String, Failure> {
    std::env::var(name)
        .ok()
        .filter(|value| !value.is_empty())
        .ok_or_else(|| {
            Failure::message(format!(
                "failed to find {name} in the environment: the NetworkPolicy scenarios run only \
                 through `SAINT_E2E_NODE=1 e2e/run.sh`, which starts the node and kube-router"
            ))
        })
}

impl NetpolRun {
    async fn from_env() -> Result<Self, Failure> {
        let environment = Environment::from_env()?;
        let client = environment.admin_client().await?;
        let host_ip = variable("SAINT_E2E_HOST_IP")?;
        Ok(Self {
            client,
            host_ip: host_ip.parse().map_err(|error| {
                Failure::message(format!(
                    "SAINT_E2E_HOST_IP={host_ip} is no address: {error}"
                ))
            })?,
            probe_image: variable("SAINT_E2E_NETPOL_PROBE_IMAGE")?,
            environment,
        })
    }

    async fn kubectl(
        &self,
        arguments: &[&str],
        stdin: Option<&str>,
    ) -> Result<tools::ToolOutput, tools::ToolError> {
        tools::run(
            &self.environment.tool("kubectl"),
            &self.environment.admin_kubeconfig,
            arguments,
            stdin,
        )
        .await
    }

    /// Creates a probe pod serving on [`POD_PORT`] under Pod Security "restricted" and
    /// fails on any admission warning (the namespace warns at `restricted` too).
    async fn create_probe_pod(
        &self,
        namespace: &str,
        name: &str,
        labels: &BTreeMap<&str, &str>,
    ) -> TestResult {
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {
                "automountServiceAccountToken": false,
                "terminationGracePeriodSeconds": 1,
                "securityContext": {
                    "runAsNonRoot": true,
                    "runAsUser": 65534,
                    "runAsGroup": 65534,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [{
                    "name": "probe",
                    "image": self.probe_image,
                    // Imported into containerd by netpol_start: there is no registry.
                    "imagePullPolicy": "Never",
                    "args": ["serve", POD_PORT.to_string()],
                    "ports": [{"containerPort": POD_PORT, "protocol": "TCP"}],
                    "securityContext": {
                        "allowPrivilegeEscalation": false,
                        "readOnlyRootFilesystem": true,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }],
            },
        });
        let output = self
            .kubectl(&["create", "-f", "-", "-o", "name"], Some(&pod.to_string()))
            .await?;
        if output.stderr.to_ascii_lowercase().contains("warning") {
            return Err(Failure::message(format!(
                "creating pod {namespace}/{name} drew admission warnings:\n{}",
                output.stderr
            )));
        }
        Ok(())
    }

    /// Waits for the pod to be Ready and returns its IP; on timeout the failure carries
    /// the namespace's pods, events and logs.
    async fn ready_pod_ip(&self, namespace: &str, name: &str) -> Result<IpAddr, Failure> {
        let selector = format!("probe-pod={name}");
        let ready = match pods::wait_ready(&self.client, namespace, &selector, POD_TIMEOUT).await {
            Ok(ready) => ready,
            Err(error) => {
                let report = pods::diagnose(&self.environment, &[namespace]).await;
                return Err(Failure::message(format!("{error}\n{report}")));
            }
        };
        let ip = ready
            .first()
            .and_then(|pod| pod.status.as_ref())
            .and_then(|status| status.pod_ip.clone())
            .ok_or_else(|| Failure::message(format!("pod {namespace}/{name} has no IP")))?;
        ip.parse()
            .map_err(|error| Failure::message(format!("pod IP {ip} is no address: {error}")))
    }

    /// `probe connect <address> <token>` inside the pod, through `kubectl exec`.
    async fn connect(
        &self,
        namespace: &str,
        pod: &str,
        address: SocketAddr,
        token: &str,
    ) -> Result<Connection, Failure> {
        self.probe(namespace, pod, &["connect", &address.to_string(), token])
            .await
    }

    /// `probe dial <address>` inside the pod: a TCP connection and nothing more.
    async fn dial(
        &self,
        namespace: &str,
        pod: &str,
        address: SocketAddr,
    ) -> Result<Connection, Failure> {
        self.probe(namespace, pod, &["dial", &address.to_string()])
            .await
    }

    async fn probe(
        &self,
        namespace: &str,
        pod: &str,
        probe_arguments: &[&str],
    ) -> Result<Connection, Failure> {
        let mut arguments = vec!["exec", "-n", namespace, pod, "-c", "probe", "--", "/probe"];
        arguments.extend_from_slice(probe_arguments);
        match self.kubectl(&arguments, None).await {
            Ok(output) => Ok(Connection::Reached(output.stdout.trim().to_owned())),
            // The probe's own refusal: it ran in the pod and could not connect. Anything
            // else (exec itself failing) is no evidence about the policy.
            Err(tools::ToolError::Failed { stderr, .. })
                if stderr.contains("probe: failed to connect") =>
            {
                Ok(Connection::Refused(stderr.trim().to_owned()))
            }
            Err(error) => Err(error.into()),
        }
    }

    /// The `kubernetes` Service's address: kube-proxy sends it to the API server.
    async fn api_service(&self) -> Result<SocketAddr, Failure> {
        let service = Api::<Service>::namespaced(self.client.clone(), "default")
            .get("kubernetes")
            .await?;
        let ip = service
            .spec
            .and_then(|spec| spec.cluster_ip)
            .ok_or_else(|| Failure::message("the kubernetes Service has no cluster IP"))?;
        let ip: IpAddr = ip.parse().map_err(|error| {
            Failure::message(format!(
                "the kubernetes Service's IP {ip} is no address: {error}"
            ))
        })?;
        Ok(SocketAddr::new(ip, 443))
    }

    /// Expects `pod` to reach `address` with `token`.
    async fn expect_reached(
        &self,
        namespace: &str,
        pod: &str,
        address: SocketAddr,
        token: &str,
    ) -> TestResult {
        match self.connect(namespace, pod, address, token).await? {
            Connection::Reached(_) => Ok(()),
            Connection::Refused(error) => Err(Failure::message(format!(
                "{namespace}/{pod} failed to reach {address} (token {token}): {error}\n{}",
                engine_log_tail()
            ))),
        }
    }

    /// Polls `pod` → `address` with throw-away tokens until a connection is refused
    /// (`refused`) or reaches it again (`!refused`), and returns the time since `since`
    /// (when the policy was applied or deleted). Tokens sent before the change took
    /// hold may arrive; only tokens sent afterwards are judged.
    async fn wait_for_path(
        &self,
        namespace: &str,
        pod: &str,
        address: SocketAddr,
        refused: bool,
        since: Instant,
    ) -> Result<Duration, Failure> {
        let mut attempt = 0;
        let (what, label) = if refused {
            ("refused", "canary")
        } else {
            ("reached again", "restored")
        };
        wait::until(
            &format!("{namespace}/{pod} {what} a connection to {address}"),
            ENFORCEMENT_TIMEOUT,
            || {
                attempt += 1;
                let token = format!("{label}-{attempt}");
                async move {
                    match self.connect(namespace, pod, address, &token).await {
                        Ok(Connection::Refused(_)) if refused => Ok(Ok(since.elapsed())),
                        Ok(Connection::Reached(_)) if !refused => Ok(Ok(since.elapsed())),
                        Ok(Connection::Refused(error)) => Err(format!("still refused: {error}")),
                        Ok(Connection::Reached(reply)) => Err(format!("still reached: {reply}")),
                        // exec failing is a failure of the scenario, not "not yet".
                        Err(error) => Ok(Err(error)),
                    }
                }
            },
        )
        .await?
    }

    async fn apply(&self, namespace: &str, manifest: serde_json::Value) -> TestResult {
        let output = self
            .kubectl(
                &["apply", "-n", namespace, "-f", "-", "-o", "name"],
                Some(&manifest.to_string()),
            )
            .await?;
        if output.stderr.to_ascii_lowercase().contains("warning") {
            return Err(Failure::message(format!(
                "applying to {namespace} drew warnings:\n{}",
                output.stderr
            )));
        }
        Ok(())
    }

    async fn pod_log(&self, namespace: &str, pod: &str) -> Result<String, Failure> {
        Ok(self
            .kubectl(&["logs", "-n", namespace, pod, "-c", "probe"], None)
            .await?
            .stdout)
    }
}

/// The end of kube-router's log (`netpol_start` exports where it is), for a failure
/// that may be the engine's.
fn engine_log_tail() -> String {
    let Ok(path) = std::env::var("SAINT_E2E_NETPOL_LOG") else {
        return "(SAINT_E2E_NETPOL_LOG is not set: no kube-router log to show)".to_owned();
    };
    match std::fs::read_to_string(&path) {
        Ok(log) => {
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(30)..].join("\n");
            format!("===== last lines of {path}\n{tail}")
        }
        Err(error) => format!("failed to read kube-router's log {path}: {error}"),
    }
}

/// What one `probe connect` in a pod came to.
enum Connection {
    /// The server answered `ok <token>` (the probe's output).
    Reached(String),
    /// The probe could not connect (its error).
    Refused(String),
}

/// A probe server on the host: records every token that arrives, with the peer's
/// address, and answers `ok <token>` like the pods' `probe serve`.
struct HostProbe {
    address: SocketAddr,
    arrivals: Arc<Mutex<Vec<(String, IpAddr)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl HostProbe {
    async fn start(host_ip: IpAddr) -> Result<Self, Failure> {
        let listener = TcpListener::bind((host_ip, 0)).await.map_err(|error| {
            Failure::message(format!(
                "failed to bind the probe server to {host_ip} (the pod bridge's gateway): {error}"
            ))
        })?;
        let address = listener.local_addr()?;
        // kube-router lets pods reach the node's NodePort range whatever their policy
        // says (kube-proxy serves Services there); a probe port inside it would prove
        // nothing. The kernel's ephemeral ports start above it by default.
        if (30000..=32767).contains(&address.port()) {
            return Err(Failure::message(format!(
                "the probe server got port {} inside the NodePort range 30000-32767;                  widen net.ipv4.ip_local_port_range's lower bound above it",
                address.port()
            )));
        }
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&arrivals);
        let task = tokio::spawn(async move {
            while let Ok((stream, peer)) = listener.accept().await {
                let recorded = Arc::clone(&recorded);
                tokio::spawn(async move {
                    let (reader, mut writer) = stream.into_split();
                    let mut token = String::new();
                    if BufReader::new(reader).read_line(&mut token).await.is_err() {
                        return;
                    }
                    let token = token.trim().to_owned();
                    recorded
                        .lock()
                        .expect("arrivals lock")
                        .push((token.clone(), peer.ip()));
                    let _ = writer.write_all(format!("ok {token}\n").as_bytes()).await;
                });
            }
        });
        Ok(Self {
            address,
            arrivals,
            task,
        })
    }

    /// Where `token` arrived from, if it did.
    fn arrival(&self, token: &str) -> Option<IpAddr> {
        self.arrivals
            .lock()
            .expect("arrivals lock")
            .iter()
            .find(|(arrived, _)| arrived == token)
            .map(|(_, peer)| *peer)
    }
}

impl Drop for HostProbe {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The operator's sandbox NetworkPolicy exactly as its builder renders it: the golden
/// file that `operator/tests/builders.rs` keeps equal to `sandbox_network_policy`'s
/// output, less the owner reference (there is no SaintBot here) and the fixture's
/// namespace. A rule added to the sandbox policy reaches this scenario by itself.
struct SandboxPolicy {
    manifest: serde_json::Value,
    name: String,
    /// The labels it selects pods by (a sandbox Job's pod carries them).
    pod_labels: BTreeMap<String, String>,
}

fn operator_sandbox_policy(repo: &Path) -> Result<SandboxPolicy, Failure> {
    let path = repo.join("operator/tests/golden/sandbox-network-policy.yaml");
    let text = std::fs::read_to_string(&path)
        .map_err(|error| Failure::message(format!("failed to read {}: {error}", path.display())))?;
    let mut manifest: serde_json::Value = serde_yaml_ng::from_str(&text)?;
    let metadata = manifest["metadata"]
        .as_object_mut()
        .ok_or_else(|| Failure::message(format!("{} has no metadata", path.display())))?;
    metadata.remove("ownerReferences");
    metadata.remove("namespace");
    let name = manifest["metadata"]["name"]
        .as_str()
        .ok_or_else(|| Failure::message(format!("{} has no name", path.display())))?
        .to_owned();
    let pod_labels = serde_json::from_value(manifest["spec"]["podSelector"]["matchLabels"].clone())
        .map_err(|error| {
            Failure::message(format!(
                "{} selects pods by no matchLabels: {error}",
                path.display()
            ))
        })?;
    Ok(SandboxPolicy {
        manifest,
        name,
        pod_labels,
    })
}

#[tokio::test]
async fn operator_sandbox_policy_cuts_the_pod_off_while_an_unselected_pod_still_reaches_the_host()
-> TestResult {
    let run = NetpolRun::from_env().await?;
    let policy = operator_sandbox_policy(&run.environment.repo)?;
    let namespace = namespace::create(&run.client, "netpol-sandbox", true).await?;
    run.create_probe_pod(&namespace, "open", &BTreeMap::from([("probe-pod", "open")]))
        .await?;
    let mut sandbox_labels: BTreeMap<&str, &str> = policy
        .pod_labels
        .iter()
        .map(|(key, value)| (key.as_str(), value.as_str()))
        .collect();
    sandbox_labels.insert("probe-pod", "sandbox");
    run.create_probe_pod(&namespace, "sandbox", &sandbox_labels)
        .await?;
    let open_ip = run.ready_pod_ip(&namespace, "open").await?;
    let sandbox_ip = run.ready_pod_ip(&namespace, "sandbox").await?;
    // Bound only now: the bridge gets the gateway address with its first pod.
    let host = HostProbe::start(run.host_ip).await?;
    let sandbox_server = SocketAddr::new(sandbox_ip, POD_PORT);

    // Positive controls: without a policy both pods reach the host, and the open pod
    // reaches the sandbox pod. The host sees the pod's own address (no masquerade), the
    // address kube-router's rules match on.
    run.expect_reached(&namespace, "open", host.address, "open-before")
        .await?;
    run.expect_reached(&namespace, "sandbox", host.address, "sandbox-before")
        .await?;
    run.expect_reached(&namespace, "open", sandbox_server, "ingress-before")
        .await?;
    // Through kube-proxy's Service rules too: the sandbox pod reaches the API server's
    // TCP port behind the `kubernetes` Service.
    let api_service = run.api_service().await?;
    if let Connection::Refused(error) = run.dial(&namespace, "sandbox", api_service).await? {
        return Err(Failure::message(format!(
            "without a policy the sandbox pod failed to reach the kubernetes Service {api_service}: {error}"
        )));
    }
    assert_eq!(host.arrival("open-before"), Some(open_ip));
    assert_eq!(host.arrival("sandbox-before"), Some(sandbox_ip));
    assert!(
        run.pod_log(&namespace, "sandbox")
            .await?
            .contains("arrived ingress-before from"),
        "the sandbox pod's server did not log the open pod's connection"
    );

    let applied = Instant::now();
    run.apply(&namespace, policy.manifest.clone()).await?;
    let enforced = run
        .wait_for_path(&namespace, "sandbox", host.address, true, applied)
        .await?;
    println!(
        "network policy: the operator's sandbox policy enforced {} ms after it was applied",
        enforced.as_millis()
    );

    // Egress: refused by the pod's own side, and nothing arrived at the host.
    match run
        .connect(&namespace, "sandbox", host.address, "sandbox-after")
        .await?
    {
        Connection::Refused(error) => println!("network policy: sandbox → host refused: {error}"),
        Connection::Reached(reply) => {
            return Err(Failure::message(format!(
                "the sandbox pod still reached the host under its policy: {reply}\n{}",
                engine_log_tail()
            )));
        }
    }
    assert_eq!(
        host.arrival("sandbox-after"),
        None,
        "the refused connection arrived at the host"
    );
    // Ingress: the open pod can no longer reach the sandbox pod's server.
    match run
        .connect(&namespace, "open", sandbox_server, "ingress-after")
        .await?
    {
        Connection::Refused(error) => println!("network policy: open → sandbox refused: {error}"),
        Connection::Reached(reply) => {
            return Err(Failure::message(format!(
                "the open pod still reached the sandbox pod under its policy: {reply}\n{}",
                engine_log_tail()
            )));
        }
    }
    let sandbox_log = run.pod_log(&namespace, "sandbox").await?;
    assert!(
        !sandbox_log.contains("ingress-after"),
        "the refused connection arrived at the sandbox pod:\n{sandbox_log}"
    );
    // Nor the API server through the kubernetes Service (kube-proxy's DNAT first, then
    // kube-router's egress check on the translated address).
    match run.dial(&namespace, "sandbox", api_service).await? {
        Connection::Refused(error) => {
            println!("network policy: sandbox → kubernetes Service refused: {error}");
        }
        Connection::Reached(reply) => {
            return Err(Failure::message(format!(
                "the sandbox pod still reached the kubernetes Service under its policy: {reply}\n{}",
                engine_log_tail()
            )));
        }
    }
    // The unselected pod is untouched: it still reaches the host and the API server.
    if let Connection::Refused(error) = run.dial(&namespace, "open", api_service).await? {
        return Err(Failure::message(format!(
            "the open pod failed to reach the kubernetes Service {api_service}: {error}"
        )));
    }
    run.expect_reached(&namespace, "open", host.address, "open-after")
        .await?;
    assert_eq!(host.arrival("open-after"), Some(open_ip));

    // Deleting the policy gives the sandbox pod its path back: the refusals were the
    // policy's doing, and the engine removes what it enforced.
    let deleted = Instant::now();
    run.kubectl(
        &["delete", "networkpolicy", "-n", &namespace, &policy.name],
        None,
    )
    .await?;
    let restored = run
        .wait_for_path(&namespace, "sandbox", host.address, false, deleted)
        .await?;
    println!(
        "network policy: sandbox pod reached the host again {} ms after its policy was deleted",
        restored.as_millis()
    );
    run.expect_reached(&namespace, "sandbox", host.address, "sandbox-restored")
        .await?;
    assert_eq!(host.arrival("sandbox-restored"), Some(sandbox_ip));

    namespace::delete(&run.client, &namespace).await?;
    Ok(())
}

#[tokio::test]
async fn ingress_deny_policy_blocks_a_pod_to_pod_connection() -> TestResult {
    let run = NetpolRun::from_env().await?;
    let namespace = namespace::create(&run.client, "netpol-ingress", true).await?;
    run.create_probe_pod(
        &namespace,
        "server",
        &BTreeMap::from([("probe-pod", "server")]),
    )
    .await?;
    run.create_probe_pod(
        &namespace,
        "client",
        &BTreeMap::from([("probe-pod", "client")]),
    )
    .await?;
    let server_ip = run.ready_pod_ip(&namespace, "server").await?;
    run.ready_pod_ip(&namespace, "client").await?;
    let server = SocketAddr::new(server_ip, POD_PORT);

    run.expect_reached(&namespace, "client", server, "before-policy")
        .await?;
    let applied = Instant::now();
    run.apply(
        &namespace,
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "server-deny-ingress"},
            "spec": {
                "podSelector": {"matchLabels": {"probe-pod": "server"}},
                "policyTypes": ["Ingress"],
            },
        }),
    )
    .await?;
    let enforced = run
        .wait_for_path(&namespace, "client", server, true, applied)
        .await?;
    println!(
        "network policy: ingress deny enforced {} ms after it was applied",
        enforced.as_millis()
    );
    match run
        .connect(&namespace, "client", server, "after-policy")
        .await?
    {
        Connection::Refused(error) => println!("network policy: client → server refused: {error}"),
        Connection::Reached(reply) => {
            return Err(Failure::message(format!(
                "the client still reached the server under its ingress deny: {reply}\n{}",
                engine_log_tail()
            )));
        }
    }
    let server_log = run.pod_log(&namespace, "server").await?;
    assert!(
        server_log.contains("arrived before-policy from"),
        "the server did not log the connection made before the policy:\n{server_log}"
    );
    assert!(
        !server_log.contains("after-policy"),
        "the refused connection arrived at the server:\n{server_log}"
    );

    namespace::delete(&run.client, &namespace).await?;
    Ok(())
}
