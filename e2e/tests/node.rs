//! Saint on a real node (run by `SAINT_E2E_NODE=1 e2e/run.sh`): the chart's operator
//! runs from its image, the example company's bot pod runs its `agent` and `porter`
//! containers, answers through its Service with the scripted model on the node, runs
//! Debian's `gh` in a sandbox Job whose request reaches a stand-in for GitHub through
//! the runner's relay and Porter's proxy with the real token while the sandbox holds
//! only a placeholder, keeps its transcript across a pod deletion and picks up a
//! Contact edit without a restart.
//!
//! The figures the scenario measures (apply → Ready, message → reply, exec cold and
//! warm, Contact edit → agent) are printed and written to
//! `$SAINT_E2E_RUN_DIR/node-figures.json`; nothing asserts on a duration.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    apps::v1::Deployment,
    batch::v1::Job,
    core::v1::{Pod, Secret, Service},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams},
};
use saint_config::sandbox_contract::sandbox_label_selector;
use saint_e2e::{
    Environment, Failure, TestResult, chart,
    company_bot::{BOT, CompanyBot, condition_state},
    examples, manifests, namespace, node, pods,
    standin::{self, GithubStandIn},
    tools, wait,
};
use saint_scripted::llm::{Reply, ScriptedLlm};
use serde_json::{Value, json};

/// Ana, the example's owner (contacts.yaml): exec with nothing blocked.
const ANA_PHONE: &str = "+385991234567";
/// Ivan, an employee (contacts.yaml), whose role the scenario changes.
const IVAN_PHONE: &str = "+385991234569";
/// The example's HTTP channel token (secrets.yaml).
const HTTP_TOKEN: &str = "REPLACE-ME-long-random-bearer-token";
/// The example's GitHub credential: its Secret (secrets.yaml) and the SaintBot entry.
const GITHUB_SECRET: &str = "github";
const GITHUB_SECRET_KEY: &str = "token";
/// Where the test copy of the porter image holds the stand-in's CA.
const STANDIN_CA_PATH: &str = "/etc/saint-e2e/github-standin-ca.pem";
/// The `gh` call the model asks for: GitHub's REST API, as the example's employees and
/// owner may (`requests` in saintbot.yaml); prints the first pull request's title.
const GH_CALL: &str = "gh api repos/acme/website/pulls --jq '.[0].title'";
/// The path that call requests.
const GH_CALL_PATH: &str = "/repos/acme/website/pulls";
/// Longest wait for a pod to start on the node (image unpack, probes, 2 cores).
const POD_TIMEOUT: Duration = Duration::from_secs(240);
/// Longest wait for one turn of the bot (a cold sandbox Job included).
const TURN_TIMEOUT: Duration = Duration::from_secs(180);

/// The node run's settings, exported by `e2e/run.sh` after `node_start`.
struct NodeRun {
    /// The host's address on the pod network: pods reach servers the test binds here.
    host_ip: IpAddr,
    /// The host on a public address: what the bot's egress policy admits as internet.
    public_ip: IpAddr,
    /// Where the node's local volumes live (the bot's workspace among them).
    volumes_dir: PathBuf,
    /// OCI archives of the product images (`e2e/images/build.sh --print-dir`).
    images_dir: PathBuf,
    /// The chart's appVersion, the images' tag.
    version: String,
}

fn variable(name: &str) -> Result<String, Failure> {
    std::env::var(name)
        .ok()
        .filter(|value| !value.is_empty())
        .ok_or_else(|| {
            Failure::message(format!(
                "failed to find {name} in the environment: the node scenarios run only through \
             `SAINT_E2E_NODE=1 e2e/run.sh`, which starts the node"
            ))
        })
}

impl NodeRun {
    fn from_env(environment: &Environment) -> Result<Self, Failure> {
        // The node's own settings come from the harness's reader (it names a missing one).
        let node = node::Node::from_env()?;
        let chart = std::fs::read_to_string(environment.repo.join("charts/saint/Chart.yaml"))?;
        let version = chart
            .lines()
            .find_map(|line| line.strip_prefix("appVersion:"))
            .map(|value| value.trim().trim_matches('"').to_owned())
            .ok_or_else(|| Failure::message("charts/saint/Chart.yaml has no appVersion"))?;
        Ok(Self {
            host_ip: node.host_ip,
            public_ip: node.public_ip,
            volumes_dir: node.volumes_dir,
            images_dir: variable("SAINT_E2E_IMAGES_DIR")?.into(),
            version,
        })
    }
}

/// Figures measured along the way, printed and kept in the run directory.
#[derive(Default)]
struct Figures(BTreeMap<&'static str, f64>);

impl Figures {
    fn record(&mut self, name: &'static str, since: Instant) -> f64 {
        let seconds = since.elapsed().as_secs_f64();
        eprintln!("node figure: {name} = {seconds:.3} s");
        self.0.insert(name, seconds);
        seconds
    }

    fn save(&self, environment: &Environment) {
        let path = environment.run_dir.join("node-figures.json");
        let text = serde_json::to_string_pretty(&self.0).expect("figures serialise");
        if let Err(error) = std::fs::write(&path, text) {
            eprintln!("failed to write {}: {error}", path.display());
        }
    }
}

/// A test copy of the porter image pointed at the GitHub stand-in, imported into the
/// node's containerd as `ghcr.io/saint-work/saint-porter-e2e:<version>`; returns that
/// reference. It differs from the product image only by the stand-in's CA file and two
/// variables in the image's environment, Porter's own settings "for tests and
/// air-gapped mirrors": `PORTER_UPSTREAM_OVERRIDES` (GitHub's hosts connect to the
/// stand-in's address; TLS is still verified for the host name) and
/// `PORTER_UPSTREAM_CA_FILE` (the stand-in's CA, trusted upstream besides the system's).
/// The operator sets neither, so the pod keeps the image's values. The product image
/// itself is untouched.
async fn porter_image_for_standin(
    run: &NodeRun,
    standin: &GithubStandIn,
) -> Result<String, Failure> {
    let reference = format!("ghcr.io/saint-work/saint-porter-e2e:{}", run.version);
    let archive = run
        .images_dir
        .join(format!("saint-porter-{}.oci.tar", run.version));
    if !archive.is_file() {
        return Err(Failure::message(format!(
            "failed to find the porter image archive {}: e2e/images/build.sh makes it",
            archive.display()
        )));
    }
    let work = tempfile::tempdir()?;
    let ca_file = work.path().join("github-standin-ca.pem");
    std::fs::write(&ca_file, &standin.ca_pem)?;
    let derived = work.path().join("porter-e2e.oci.tar");
    let overrides = standin::HOSTS
        .iter()
        .map(|host| format!("{host}={}", standin.address))
        .collect::<Vec<_>>()
        .join(",");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = r#"
        set -euo pipefail
        python3 "$1/images/saint_images.py" derive --archive "$2" --reference "$3" \
            --output "$4" "${@:5}"
        source "$1/node.sh"
        node_import_image "$4"
    "#;
    let output = tokio::process::Command::new("bash")
        .args(["-c", script, "porter-image-for-standin"])
        .arg(repo)
        .arg(&archive)
        .arg(&reference)
        .arg(&derived)
        .arg("--add")
        .arg(format!("{}:{STANDIN_CA_PATH}:0644", ca_file.display()))
        .arg("--env")
        .arg(format!("PORTER_UPSTREAM_OVERRIDES={overrides}"))
        .arg("--env")
        .arg(format!("PORTER_UPSTREAM_CA_FILE={STANDIN_CA_PATH}"))
        .output()
        .await?;
    if !output.status.success() {
        return Err(Failure::message(format!(
            "failed to make the porter test image: {}{}",
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout)
        )));
    }
    Ok(reference)
}

/// The example company, changed only where this machine differs from a company's: the
/// model is the scripted server on the node and Porter is the test copy of its image
/// that reaches the GitHub stand-in. The `gh` entry (hosts, secret, placeholder,
/// request policy) is the example's own.
fn example_saintbot(
    environment: &Environment,
    model_url: &str,
    porter_image: &str,
) -> Result<DynamicObject, Failure> {
    let mut bot = examples::find(environment, "saintbot.yaml", "SaintBot", BOT)?;
    let spec = &mut bot.data["spec"];
    spec["model"]["baseUrl"] = model_url.into();
    if model_url.starts_with("http://") {
        spec["model"]["allowInsecure"] =
            "the scripted model server on the test node, no key and no real prompts".into();
    }
    spec["images"]["porter"] = porter_image.into();
    let gh = spec["porter"]["clis"]
        .as_array()
        .and_then(|clis| clis.iter().find(|cli| cli["name"] == "gh"))
        .ok_or_else(|| Failure::message("the example SaintBot has no porter.clis entry gh"))?;
    if gh["secretKeyRef"] != json!({"name": GITHUB_SECRET, "key": GITHUB_SECRET_KEY}) {
        return Err(Failure::message(format!(
            "the example's gh entry reads {}, not Secret {GITHUB_SECRET} key {GITHUB_SECRET_KEY}",
            gh["secretKeyRef"]
        )));
    }
    Ok(bot)
}

#[tokio::test]
async fn the_company_bot_runs_on_a_node_answers_execs_through_porter_and_keeps_its_transcript()
-> TestResult {
    let environment = Environment::from_env()?;
    let run = NodeRun::from_env(&environment)?;
    let admin = environment.admin_client().await?;
    let mut figures = Figures::default();
    let mut namespaces: Vec<String> = Vec::new();
    let result = scenario(&environment, &run, &admin, &mut figures, &mut namespaces).await;
    figures.save(&environment);
    if let Err(failure) = result {
        let namespaces: Vec<&str> = namespaces.iter().map(String::as_str).collect();
        let mut report = pods::diagnose(&environment, &namespaces).await;
        // What the policy engine made of it: its chains and sets on this host.
        for command in [
            "iptables-save | grep -E 'KUBE-(ROUTER|POD-FW|NWPLCY)' | head -80",
            "ipset list | head -60",
        ] {
            if let Ok(output) = std::process::Command::new("bash")
                .args(["-c", command])
                .output()
            {
                report += &format!(
                    "===== {command}\n{}\n",
                    String::from_utf8_lossy(&output.stdout)
                );
            }
        }
        return Err(Failure::message(format!("{failure:?}\n{report}")));
    }
    for namespace in &namespaces {
        namespace::delete(&admin, namespace).await?;
    }
    Ok(())
}

async fn scenario(
    environment: &Environment,
    run: &NodeRun,
    admin: &Client,
    figures: &mut Figures,
    namespaces: &mut Vec<String>,
) -> TestResult {
    // The chart, with the operator running from its image on the node.
    let install = chart::install(environment, admin, "saint", &[]).await?;
    namespaces.push(install.namespace.clone());
    let operator_pods = pods::wait_ready(
        admin,
        &install.namespace,
        "app.kubernetes.io/component=operator",
        POD_TIMEOUT,
    )
    .await?;
    let operator_image = operator_pods[0]
        .spec
        .as_ref()
        .map(|spec| spec.containers[0].image.clone().unwrap_or_default())
        .unwrap_or_default();
    assert_eq!(
        operator_image,
        format!("ghcr.io/saint-work/saint-operator:{}", run.version)
    );

    // The scripted model on the node's pod-network address.
    let llm = ScriptedLlm::start_on(run.host_ip).await?;
    llm.set_fallback(Reply::text("(fallback answer)"));
    // The GitHub token is a canary the scenario looks for everywhere it must not be;
    // the stand-in for GitHub, on the node's public address (the bot pod's egress
    // admits it as the internet; the sandbox's admits nothing), accepts only it.
    let canary = format!("canary-gh-token-{}", std::process::id());
    let standin = GithubStandIn::start(SocketAddr::new(run.public_ip, 443), &canary).await?;
    let porter_image = porter_image_for_standin(run, &standin).await?;

    // The example company in a namespace enforcing "restricted".
    let bot_namespace = namespace::create(admin, "company", true).await?;
    namespaces.push(bot_namespace.clone());
    let workspace_claim = format!("{BOT}-workspace");
    node::provide_local_volume(admin, &bot_namespace, &workspace_claim).await?;
    for file in ["secrets.yaml", "roles.yaml", "contacts.yaml"] {
        manifests::apply_all(admin, &examples::text(environment, file)?, &bot_namespace).await?;
    }
    Api::<Secret>::namespaced(admin.clone(), &bot_namespace)
        .patch(
            GITHUB_SECRET,
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {GITHUB_SECRET_KEY: canary}})),
        )
        .await?;
    let bot = CompanyBot {
        client: admin.clone(),
        namespace: bot_namespace.clone(),
    };
    let applied = Instant::now();
    let saintbot = example_saintbot(environment, &llm.base_url(), &porter_image)?;
    for object in manifests::parse(&examples::text(environment, "saintbot.yaml")?)? {
        // The skills ConfigMap and anything else the example file holds, as written.
        if object
            .types
            .as_ref()
            .is_some_and(|types| types.kind != "SaintBot")
        {
            manifests::apply(admin, &object, &bot_namespace).await?;
        }
    }
    manifests::apply(admin, &saintbot, &bot_namespace).await?;

    // `kubectl get sbot`: Ready True / PodReady.
    let status = wait::until(
        "the SaintBot Ready=True with reason PodReady",
        POD_TIMEOUT,
        || async {
            let status = bot
                .bot()
                .await
                .map_err(|error| error.to_string())?
                .data
                .get("status")
                .cloned()
                .unwrap_or(Value::Null);
            match condition_state(&status, "Ready") {
                (ready, reason) if ready == "True" && reason == "PodReady" => Ok(status),
                _ => Err(status.to_string()),
            }
        },
    )
    .await?;
    figures.record("apply_to_ready_seconds", applied);
    let printed = tools::run(
        &environment.tool("kubectl"),
        &environment.admin_kubeconfig,
        &["get", "sbot", BOT, "-n", &bot_namespace, "--no-headers"],
        None,
    )
    .await?
    .stdout;
    assert!(
        printed.contains("True") && printed.contains("PodReady"),
        "kubectl get sbot: {printed}\nstatus: {status}"
    );
    let bot_pod = current_bot_pod(admin, &bot_namespace).await?;
    // Of the bot pod's containers, Porter's alone can read the GitHub Secret.
    let readers: BTreeSet<String> = secret_readers(&bot_pod)
        .into_iter()
        .filter(|(_, secret)| secret == GITHUB_SECRET)
        .map(|(container, _)| container)
        .collect();
    assert_eq!(
        readers,
        BTreeSet::from(["porter".to_owned()]),
        "the containers of the bot pod that read Secret {GITHUB_SECRET}"
    );

    // A message through the Service, answered by the scripted model.
    let service = Api::<Service>::namespaced(admin.clone(), &bot_namespace)
        .get(BOT)
        .await?;
    let cluster_ip = service
        .spec
        .and_then(|spec| spec.cluster_ip)
        .ok_or_else(|| Failure::message("the bot Service has no ClusterIP"))?;
    let address = format!("{cluster_ip}:8080");
    wait_for_service(&address).await?;
    llm.push(Reply::text("Hello Ana, this is Saint on a real node."));
    let sent = Instant::now();
    let answer = send(&address, ANA_PHONE, "Hello from the node scenario")
        .await
        .map_err(Failure::message)?;
    figures.record("message_to_reply_seconds", sent);
    assert_eq!(answer, "Hello Ana, this is Saint on a real node.");

    // The model asks for a `gh` call. It runs in a sandbox Job on the bot's node, as the
    // sandbox user, with the environment Porter handed the agent for this command: a
    // placeholder in GH_TOKEN and the runner's relay as its HTTPS proxy. Porter admits
    // the request (Ana is the owner), swaps the placeholder for the Secret's token and
    // sends it to the stand-in. The same command then looks for the token in the
    // sandbox: Porter's secret directory, every file, every process's environment and
    // command line (the canary is spelled in two halves, so the command line itself
    // never holds it). And it tries the network: the model server on the node (which
    // the bot pod reached a moment ago), the API server behind the `kubernetes` Service
    // and the stand-in itself. The sandbox NetworkPolicy must refuse all three: the
    // relay to Porter is the sandbox's only way out.
    let model_port = llm
        .base_url()
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_owned();
    let connect = "import socket, sys\n\
                   s = socket.socket(); s.settimeout(3)\n\
                   code = s.connect_ex((sys.argv[1], int(sys.argv[2])))\n\
                   print('sandbox-connect', sys.argv[1], 'open' if code == 0 else 'refused')";
    let network_probes = format!(
        "python3 -c \"{connect}\" {host} {model_port}; python3 -c \"{connect}\" 10.0.0.1 443; \
         python3 -c \"{connect}\" {public} 443",
        host = run.host_ip,
        public = run.public_ip,
    );
    let (first_half, second_half) = canary.split_at(8);
    let probe = format!(
        "{GH_CALL}; echo gh-exit=$?; echo uid-in-sandbox=$(id -u); \
         case \"$GH_TOKEN\" in porter_ph_*) echo sandbox-GH_TOKEN-is-a-placeholder;; \
         *) echo sandbox-GH_TOKEN-is-not-a-placeholder;; esac; \
         if cat /etc/porter-secrets/gh/secret; then echo sandbox-read-porter-secret; \
         else echo sandbox-cannot-read-porter-secret; fi; \
         held=$(printf '%s%s\\n' {first_half} {second_half} | \
         grep -rlsF -D skip -f - / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev | head -5); \
         if [ -n \"$held\" ]; then echo sandbox-files-hold-the-canary: $held; else echo sandbox-files-clean; fi; \
         held=$(printf '%s%s\\n' {first_half} {second_half} | \
         grep -lsF -f - /proc/[0-9]*/environ /proc/[0-9]*/cmdline | head -5); \
         if [ -n \"$held\" ]; then echo sandbox-processes-hold-the-canary: $held; \
         else echo sandbox-processes-clean; fi; \
         {network_probes}"
    );
    llm.push(Reply::tool_call("exec", json!({"command": probe})));
    llm.push(Reply::text("gh ran."));
    let requests_before = llm.request_count();
    let exec_sent = Instant::now();
    let answer = send(
        &address,
        ANA_PHONE,
        "Which pull requests are open on the website?",
    )
    .await
    .map_err(Failure::message)?;
    figures.record("exec_cold_turn_seconds", exec_sent);
    assert_eq!(answer, "gh ran.");
    let result = last_tool_result(&llm, requests_before)?;
    assert!(
        result.contains(standin::PULL_REQUEST_TITLE) && result.contains("gh-exit=0"),
        "gh in the sandbox did not get the stand-in's answer through Porter: {result}"
    );
    let received = standin.requests();
    assert!(
        received
            .iter()
            .any(|request| request.host == "api.github.com"
                && request.method == "GET"
                && request.path == GH_CALL_PATH),
        "the stand-in never received {GH_CALL_PATH}: {received:?}"
    );
    // Every request reached GitHub's stand-in with the real token, none with the
    // placeholder the sandbox held (nor the stand-in's answer would have been 401).
    assert!(
        received
            .iter()
            .all(|request| request.credential() == Some(canary.as_str())),
        "a request reached the stand-in without the Secret's token: {:?}",
        received
            .iter()
            .map(|request| (
                &request.path,
                request
                    .authorization
                    .as_deref()
                    .map(|value| value.split(' ').next())
            ))
            .collect::<Vec<_>>()
    );
    assert!(
        result.contains("uid-in-sandbox=65531"),
        "the sandbox user: {result}"
    );
    assert!(
        result.contains("sandbox-GH_TOKEN-is-a-placeholder"),
        "the sandbox's GH_TOKEN is not Porter's placeholder: {result}"
    );
    assert!(
        result.contains("sandbox-cannot-read-porter-secret")
            && result.contains("sandbox-files-clean")
            && result.contains("sandbox-processes-clean"),
        "the credential reached the sandbox: {result}"
    );
    assert!(
        !result.contains(&canary),
        "the credential reached the model: {result}"
    );
    // Refused on the first command already: the runner serves only once its pod's
    // network is cut (the policy engine applies the policy a moment after the pod
    // got its address; without that wait this probe connected on this node).
    for target in [
        run.host_ip.to_string(),
        "10.0.0.1".to_owned(),
        run.public_ip.to_string(),
    ] {
        assert!(
            result.contains(&format!("sandbox-connect {target} refused")),
            "the sandbox reached {target} (or never tried): {result}"
        );
    }

    // Porter's side of the same call: its audit log on the bot's volume records the
    // decision (never the token), and its metrics count it.
    let audit_log = run
        .volumes_dir
        .join(format!("{bot_namespace}-{workspace_claim}"))
        .join("logs/porter.jsonl");
    let decision = wait::until(
        "Porter's audit line for the gh call",
        Duration::from_secs(30),
        || async {
            let text = std::fs::read_to_string(&audit_log)
                .map_err(|error| format!("{}: {error}", audit_log.display()))?;
            if text.contains(&canary) {
                return Ok(Err(format!("Porter's audit log holds the token: {text}")));
            }
            text.lines()
                .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                .find(|line| {
                    line["kind"] == "request" && line["cli"] == "gh" && line["path"] == GH_CALL_PATH
                })
                .map(Ok)
                .ok_or_else(|| format!("no request line for {GH_CALL_PATH} yet: {text}"))
        },
    )
    .await?
    .map_err(Failure::message)?;
    assert_eq!(
        (
            &decision["decision"],
            &decision["host"],
            &decision["method"],
            &decision["role"],
        ),
        (
            &json!("allowed"),
            &json!("api.github.com"),
            &json!("GET"),
            &json!("owner")
        ),
        "{decision}"
    );
    let pod_ip = bot_pod
        .status
        .as_ref()
        .and_then(|status| status.pod_ip.clone())
        .ok_or_else(|| Failure::message("the bot pod has no IP"))?;
    let metrics = chart::http_get(&format!("http://{pod_ip}:9091"), "/metrics")
        .await
        .map_err(Failure::message)?;
    assert!(
        metrics
            .lines()
            .any(|line| line.starts_with(r#"porter_requests_total{cli="gh",decision="allowed"} "#)),
        "Porter's metrics do not count the allowed gh request: {metrics}"
    );

    // The sandbox Job's pod ran on the bot's node and reads no Secret; its spec
    // (`kubectl get pod -o yaml`) holds no credential.
    let sandbox_pods = Api::<Pod>::namespaced(admin.clone(), &bot_namespace)
        .list(&ListParams::default().labels(&sandbox_label_selector(BOT)))
        .await?
        .items;
    let sandbox_pod = sandbox_pods
        .first()
        .ok_or_else(|| Failure::message("no sandbox pod in the bot's namespace"))?;
    assert_eq!(node_of(sandbox_pod), node_of(&bot_pod));
    assert_eq!(
        secret_readers(sandbox_pod),
        BTreeSet::new(),
        "the sandbox pod's containers that read a Secret"
    );
    let sandbox_yaml = tools::run(
        &environment.tool("kubectl"),
        &environment.admin_kubeconfig,
        &[
            "get",
            "pod",
            &sandbox_pod.name_any(),
            "-n",
            &bot_namespace,
            "-o",
            "yaml",
        ],
        None,
    )
    .await?
    .stdout;
    assert!(
        !sandbox_yaml.contains(&canary),
        "the sandbox pod names the credential"
    );

    // Warm: the session's sandbox is already running; the same gh call first (the
    // figure), then the network probes again (their own figure: the cold turn above
    // includes them).
    llm.push(Reply::tool_call("exec", json!({"command": GH_CALL})));
    llm.push(Reply::text("gh ran again."));
    let requests_before = llm.request_count();
    let standin_before = standin.requests().len();
    let warm_sent = Instant::now();
    let answer = send(&address, ANA_PHONE, "And once more?")
        .await
        .map_err(Failure::message)?;
    figures.record("exec_warm_turn_seconds", warm_sent);
    assert_eq!(answer, "gh ran again.");
    let result = last_tool_result(&llm, requests_before)?;
    assert!(result.contains(standin::PULL_REQUEST_TITLE), "{result}");
    let received = standin.requests();
    assert!(
        received.len() > standin_before
            && received[standin_before..]
                .iter()
                .all(|request| request.credential() == Some(canary.as_str())),
        "the warm gh call did not reach the stand-in with the token: {} request(s) before, {} now",
        standin_before,
        received.len()
    );
    llm.push(Reply::tool_call("exec", json!({"command": network_probes})));
    llm.push(Reply::text("still cut off."));
    let requests_before = llm.request_count();
    let probes_sent = Instant::now();
    let answer = send(&address, ANA_PHONE, "Can the sandbox get out now?")
        .await
        .map_err(Failure::message)?;
    figures.record("exec_network_probes_turn_seconds", probes_sent);
    assert_eq!(answer, "still cut off.");
    let result = last_tool_result(&llm, requests_before)?;
    for target in [
        run.host_ip.to_string(),
        "10.0.0.1".to_owned(),
        run.public_ip.to_string(),
    ] {
        assert!(
            result.contains(&format!("sandbox-connect {target} refused")),
            "the warm sandbox reached {target} (or never tried): {result}"
        );
    }
    let jobs = Api::<Job>::namespaced(admin.clone(), &bot_namespace)
        .list(&ListParams::default().labels(&sandbox_label_selector(BOT)))
        .await?
        .items;
    assert_eq!(jobs.len(), 1, "the warm exec made another Job");

    // Idle memory of the bot pod's containers as the kubelet reports it (working set,
    // from the container cgroups).
    let node_name = node_of(&bot_pod).unwrap_or_default();
    let pod_name = bot_pod.name_any();
    let memory = wait::until(
        "the kubelet's memory figures for the bot pod's containers",
        Duration::from_secs(90),
        || async {
            let summary = tools::run(
                &environment.tool("kubectl"),
                &environment.admin_kubeconfig,
                &[
                    "get",
                    "--raw",
                    &format!("/api/v1/nodes/{node_name}/proxy/stats/summary"),
                ],
                None,
            )
            .await
            .map_err(|error| error.to_string())?
            .stdout;
            container_memory(&summary, &bot_namespace, &pod_name)
        },
    )
    .await?;
    for (container, bytes) in &memory {
        let megabytes = *bytes as f64 / 1_048_576.0;
        eprintln!("node figure: idle working set of {container} = {megabytes:.1} MB");
        figures.0.insert(
            if container == "agent" {
                "idle_agent_working_set_mb"
            } else {
                "idle_porter_working_set_mb"
            },
            megabytes,
        );
    }

    // The browser in a cluster: Chromium starts in Ana's sandbox Job; its only way out
    // is the agent's guarded egress proxy, through a socket in the agent's own
    // directory that the sandbox mounts read-only. The page asked for is the
    // stand-in's address, a documentation address the guard refuses: the stand-in
    // must see no request from the browser.
    let standin_before = standin.requests().len();
    llm.push(Reply::tool_call(
        "browser",
        json!({"action": "open", "url": format!("https://{}/", run.public_ip)}),
    ));
    llm.push(Reply::text("browsed."));
    let requests_before = llm.request_count();
    let browse_sent = Instant::now();
    let answer = send(&address, ANA_PHONE, "Open the GitHub page")
        .await
        .map_err(Failure::message)?;
    figures.record("browser_open_cold_turn_seconds", browse_sent);
    assert_eq!(answer, "browsed.");
    let result = last_tool_result(&llm, requests_before)?;
    assert!(
        result.contains("request(s) of the page were refused"),
        "the browser did not run in the sandbox, or its request was not refused: {result}"
    );
    assert_eq!(
        standin.requests().len(),
        standin_before,
        "the browser's page reached the stand-in"
    );
    // While the session lives, a command in the same sandbox tries to take the socket
    // directory's place: write into it, rename it away (the syscall itself, not `mv`,
    // which would fall back to copying).
    let take_over = "import os\n\
                     for name in sorted(os.listdir('/run/saint/browser')): print('listed', name)\n\
                     for what, act in [('write', lambda: open('/run/saint/browser/planted', 'w')),\n\
                                       ('rename', lambda: os.rename('/run/saint/browser', '/run/saint/sandbox/taken'))]:\n\
                     \x20   try:\n\
                     \x20       act(); print('browser-directory', what, 'succeeded')\n\
                     \x20   except OSError as error: print('browser-directory', what, 'refused', error.strerror)";
    llm.push(Reply::tool_call(
        "exec",
        json!({"command": format!("python3 -c \"{take_over}\"")}),
    ));
    llm.push(Reply::text("tried."));
    let requests_before = llm.request_count();
    let answer = send(&address, ANA_PHONE, "Try the browser's directory")
        .await
        .map_err(Failure::message)?;
    assert_eq!(answer, "tried.");
    let result = last_tool_result(&llm, requests_before)?;
    assert!(
        result.contains(".sock")
            && result.contains("browser-directory write refused")
            && result.contains("browser-directory rename refused")
            && !result.contains("succeeded"),
        "the sandbox could change the browser's socket directory: {result}"
    );
    let workspace = run
        .volumes_dir
        .join(format!("{bot_namespace}-{workspace_claim}"));
    let browsers = std::fs::read_dir(workspace.join(".saint/run/browsers"))
        .map_err(|error| Failure::message(format!("the agent's browsers directory: {error}")))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .collect::<Vec<_>>();
    for directory in &browsers {
        use std::os::unix::fs::MetadataExt;
        let metadata = std::fs::metadata(directory)
            .map_err(|error| Failure::message(format!("{}: {error}", directory.display())))?;
        assert_eq!(
            (metadata.uid(), metadata.mode() & 0o777),
            (saint_config::uids::AGENT_UID, 0o750),
            "{} is not the agent's own, closed to the sandbox's writes",
            directory.display()
        );
    }
    assert_eq!(
        browsers.len(),
        1,
        "one sandbox Job, one browser directory: {browsers:?}"
    );

    // Every Saint pod is admitted under "restricted" without a warning.
    let mut all_pods = Api::<Pod>::namespaced(admin.clone(), &bot_namespace)
        .list(&ListParams::default())
        .await?
        .items;
    all_pods.extend(
        Api::<Pod>::namespaced(admin.clone(), &install.namespace)
            .list(&ListParams::default())
            .await?
            .items,
    );
    assert!(all_pods.len() >= 3, "bot, sandbox and operator pods");
    for pod in &all_pods {
        let warnings = pods::admission_warnings(environment, pod).await?;
        assert!(
            warnings.is_empty(),
            "{} draws warnings: {warnings:?}",
            pod.name_any()
        );
    }

    // A Contact edit reaches the running agent through the ConfigMap volume, no restart:
    // Ivan goes from employee (exec allowed) to external (web tools only).
    let ivan_tools = |llm: &ScriptedLlm| {
        llm.requests()
            .last()
            .map(|request| request.tool_names())
            .unwrap_or_default()
    };
    send(&address, IVAN_PHONE, "Hi, Ivan here")
        .await
        .map_err(Failure::message)?;
    assert!(
        ivan_tools(&llm).contains(&"exec".to_owned()),
        "an employee has exec: {:?}",
        ivan_tools(&llm)
    );
    let edited = Instant::now();
    bot.contacts()
        .patch(
            "ivan",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"role": "external"}})),
        )
        .await?;
    wait::until(
        "Ivan's turns to see the external role's tools",
        Duration::from_secs(180),
        || async {
            send(&address, IVAN_PHONE, "What may I do now?").await?;
            let tools = ivan_tools(&llm);
            if tools.contains(&"exec".to_owned()) {
                Err(format!("still {tools:?}"))
            } else {
                Ok(())
            }
        },
    )
    .await?;
    figures.record("contact_edit_to_agent_seconds", edited);
    let after_edit = current_bot_pod(admin, &bot_namespace).await?;
    assert_eq!(
        after_edit.metadata.uid, bot_pod.metadata.uid,
        "the Contact edit restarted the pod"
    );
    assert_eq!(restarts(&after_edit), restarts(&bot_pod));

    // Deleting the pod loses nothing: the new pod reads the transcript from the PVC.
    Api::<Pod>::namespaced(admin.clone(), &bot_namespace)
        .delete(&bot_pod.name_any(), &DeleteParams::default())
        .await?;
    let old_uid = bot_pod.metadata.uid.clone();
    wait::until("a new Ready bot pod", POD_TIMEOUT, || async {
        let pod = current_bot_pod(admin, &bot_namespace)
            .await
            .map_err(|failure| format!("{failure:?}"))?;
        if pod.metadata.uid != old_uid && pods::is_ready(&pod) {
            Ok(())
        } else {
            Err(pods::describe(&pod))
        }
    })
    .await?;
    wait_for_service(&address).await?;
    llm.push(Reply::text("I remember our talk."));
    let requests_before = llm.request_count();
    let answer = send(&address, ANA_PHONE, "Do you remember me?")
        .await
        .map_err(Failure::message)?;
    assert_eq!(answer, "I remember our talk.");
    let history = llm.requests()[requests_before..]
        .first()
        .map(|request| request.user_texts())
        .unwrap_or_default();
    assert!(
        history
            .iter()
            .any(|text| text.contains("Hello from the node scenario")),
        "the new pod lost the transcript: {history:?}"
    );

    // The quick start's smallest bot (docs/kubernetes.md), talked to as its user
    // would: through `kubectl port-forward` and the token in its Secret.
    minimal_bot_through_a_port_forward(environment, admin, &llm, figures, namespaces).await?;

    // The operator, still Ready, never restarted.
    let deployment = Api::<Deployment>::namespaced(admin.clone(), &install.namespace)
        .list(&ListParams::default().labels("app.kubernetes.io/component=operator"))
        .await?;
    assert_eq!(deployment.items.len(), 1);
    Ok(())
}

/// `charts/saint/examples/minimal/hello.yaml` as the quick start applies it (only its
/// model pointed at the scripted server and its two secrets filled in), Ready, then a
/// message through `kubectl port-forward deploy/hello` with the token from its Secret.
async fn minimal_bot_through_a_port_forward(
    environment: &Environment,
    admin: &Client,
    llm: &ScriptedLlm,
    figures: &mut Figures,
    namespaces: &mut Vec<String>,
) -> TestResult {
    let namespace = namespace::create(admin, "minimal", true).await?;
    namespaces.push(namespace.clone());
    node::provide_local_volume(admin, &namespace, "hello-workspace").await?;
    let token = format!("minimal-token-{}", std::process::id());
    let applied = Instant::now();
    for mut object in manifests::parse(&examples::text(environment, "minimal/hello.yaml")?)? {
        let kind = object.types.as_ref().map(|types| types.kind.clone());
        match kind.as_deref() {
            Some("Secret") => {
                object.data["stringData"] =
                    json!({"api-key": "not-used-by-the-scripted-model", "http-token": token});
            }
            Some("SaintBot") => {
                let model = &mut object.data["spec"]["model"];
                model["baseUrl"] = llm.base_url().into();
                model["allowInsecure"] = "the scripted model server on the test node".into();
            }
            _ => {}
        }
        manifests::apply(admin, &object, &namespace).await?;
    }
    let hello = CompanyBot {
        client: admin.clone(),
        namespace: namespace.clone(),
    };
    wait::until("SaintBot hello Ready=True", POD_TIMEOUT, || async {
        let status = hello
            .bots()
            .get("hello")
            .await
            .map_err(|error| error.to_string())?
            .data
            .get("status")
            .cloned()
            .unwrap_or(Value::Null);
        match condition_state(&status, "Ready") {
            (ready, _) if ready == "True" => Ok(()),
            _ => Err(status.to_string()),
        }
    })
    .await?;
    figures.record("minimal_apply_to_ready_seconds", applied);

    // As the quick start does: the token from the Secret, a local port from the forward.
    let secret = Api::<Secret>::namespaced(admin.clone(), &namespace)
        .get("hello-secrets")
        .await?;
    let stored = secret
        .data
        .as_ref()
        .and_then(|data| data.get("http-token"))
        .map(|bytes| String::from_utf8_lossy(&bytes.0).into_owned())
        .ok_or_else(|| Failure::message("Secret hello-secrets has no http-token"))?;
    assert_eq!(stored, token);
    let mut forward = tokio::process::Command::new(environment.tool("kubectl"))
        .args(["port-forward", "-n", &namespace, "deploy/hello", ":8080"])
        .env("KUBECONFIG", &environment.admin_kubeconfig)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    // The event: kubectl prints "Forwarding from 127.0.0.1:<port> -> 8080" once it listens.
    let stdout = forward
        .stdout
        .take()
        .ok_or_else(|| Failure::message("kubectl port-forward has no stdout"))?;
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let local_port = tokio::time::timeout(POD_TIMEOUT, async {
        while let Some(line) = lines.next_line().await? {
            if let Some(port) = line
                .strip_prefix("Forwarding from 127.0.0.1:")
                .and_then(|rest| rest.split(' ').next())
            {
                return Ok::<_, std::io::Error>(Some(port.to_string()));
            }
        }
        Ok(None)
    })
    .await
    .map_err(|_| Failure::message("kubectl port-forward never said it was forwarding"))??
    .ok_or_else(|| Failure::message("kubectl port-forward ended before it forwarded"))?;
    llm.push(Reply::text("Hello Ana, through the port-forward."));
    let request = json!({"channel": "email", "peer": "ana@example.com", "text": "Hello"});
    let (status, body) = tokio::time::timeout(
        TURN_TIMEOUT,
        pods::post_json(
            &format!("127.0.0.1:{local_port}"),
            "/v1/messages",
            &token,
            &request,
        ),
    )
    .await
    .map_err(|_| Failure::message("no answer through the port-forward"))?
    .map_err(Failure::message)?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["reply"], "Hello Ana, through the port-forward.",
        "{body}"
    );
    // The chat page the example turns on (settings.chatPage), through the same forward.
    let page = {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(format!("127.0.0.1:{local_port}")).await?;
        stream
            .write_all(b"GET /chat HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await?;
        let mut response = String::new();
        tokio::time::timeout(TURN_TIMEOUT, stream.read_to_string(&mut response))
            .await
            .map_err(|_| Failure::message("GET /chat through the forward never ended"))??;
        response
    };
    assert!(
        page.starts_with("HTTP/1.1 200") && page.contains("/chat/app.js"),
        "GET /chat through the forward: {page}"
    );
    forward.kill().await?;
    Ok(())
}

/// The bot's one pod that is not being deleted.
async fn current_bot_pod(admin: &Client, namespace: &str) -> Result<Pod, Failure> {
    Api::<Pod>::namespaced(admin.clone(), namespace)
        .list(&ListParams::default().labels(&format!(
            "app.kubernetes.io/component=agent,app.kubernetes.io/instance={BOT}"
        )))
        .await?
        .items
        .into_iter()
        .find(|pod| pod.metadata.deletion_timestamp.is_none())
        .ok_or_else(|| Failure::message("no bot pod"))
}

/// Which container of `pod` (init containers included) can read which Secret: through
/// a mounted `secret` or `projected` volume, an `env` value or `envFrom`.
fn secret_readers(pod: &Pod) -> BTreeSet<(String, String)> {
    let spec = serde_json::to_value(&pod.spec).unwrap_or_default();
    let mut volume_secrets: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        let name = volume["name"].as_str().unwrap_or_default();
        let entry = volume_secrets.entry(name).or_default();
        entry.extend(volume["secret"]["secretName"].as_str());
        for source in volume["projected"]["sources"]
            .as_array()
            .into_iter()
            .flatten()
        {
            entry.extend(source["secret"]["name"].as_str());
        }
    }
    let mut readers = BTreeSet::new();
    let containers = spec["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(spec["containers"].as_array().into_iter().flatten());
    for container in containers {
        let name = container["name"].as_str().unwrap_or_default().to_owned();
        let mounted = container["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|mount| volume_secrets.get(mount["name"].as_str().unwrap_or_default()))
            .flatten()
            .copied();
        let from_env = container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|variable| variable["valueFrom"]["secretKeyRef"]["name"].as_str());
        let from_env_from = container["envFrom"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|source| source["secretRef"]["name"].as_str());
        for secret in mounted.chain(from_env).chain(from_env_from) {
            readers.insert((name.clone(), secret.to_owned()));
        }
    }
    readers
}

fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref().and_then(|spec| spec.node_name.clone())
}

fn restarts(pod: &Pod) -> Vec<i32> {
    pod.status
        .as_ref()
        .and_then(|status| status.container_statuses.as_ref())
        .map(|statuses| statuses.iter().map(|status| status.restart_count).collect())
        .unwrap_or_default()
}

/// Sends `text` as `peer` on WhatsApp through the HTTP API and returns the reply.
async fn send(address: &str, peer: &str, text: &str) -> Result<String, String> {
    let request = json!({"channel": "whatsapp", "peer": peer, "text": text});
    let (status, body) = tokio::time::timeout(
        TURN_TIMEOUT,
        pods::post_json(address, "/v1/messages", HTTP_TOKEN, &request),
    )
    .await
    .map_err(|_| format!("no answer from {address} within {TURN_TIMEOUT:?}"))??;
    if status != 200 {
        return Err(format!("{address}/v1/messages answered {status}: {body}"));
    }
    body["reply"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("no reply in {body}"))
}

/// The newest tool result the model was sent since request number `since`.
fn last_tool_result(llm: &ScriptedLlm, since: usize) -> Result<String, Failure> {
    llm.requests()[since..]
        .iter()
        .rev()
        .find_map(|request| request.tool_results().last().cloned())
        .map(|(content, _)| content)
        .ok_or_else(|| Failure::message("the model was sent no tool result"))
}

/// Working-set bytes of the `agent` and `porter` containers of `pod` in the kubelet's
/// stats summary, once both are there.
fn container_memory(
    summary: &str,
    namespace: &str,
    pod: &str,
) -> Result<BTreeMap<String, u64>, String> {
    let summary: Value = serde_json::from_str(summary).map_err(|error| error.to_string())?;
    let entry = summary["pods"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|entry| entry["podRef"]["name"] == pod && entry["podRef"]["namespace"] == namespace)
        .ok_or_else(|| format!("no stats for {namespace}/{pod} yet"))?;
    let memory: BTreeMap<String, u64> = entry["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|container| {
            let bytes = container["memory"]["workingSetBytes"].as_u64()?;
            Some((container["name"].as_str()?.to_owned(), bytes))
        })
        .filter(|(name, _)| name == "agent" || name == "porter")
        .collect();
    if memory.len() == 2 {
        Ok(memory)
    } else {
        Err(format!("containers so far: {}", entry["containers"]))
    }
}

/// Waits until the bot answers `/healthz` through its Service: a Ready pod reaches the
/// Service only once its EndpointSlice and kube-proxy's rules follow.
async fn wait_for_service(address: &str) -> Result<(), wait::WaitError> {
    wait::until(
        &format!("the bot's /healthz through its Service at {address}"),
        POD_TIMEOUT,
        || async {
            chart::http_get(&format!("http://{address}"), "/healthz")
                .await
                .map(drop)
        },
    )
    .await
}
