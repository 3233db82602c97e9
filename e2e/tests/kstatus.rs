//! What GitOps tools read from Saint's status, on a real control plane with the chart's
//! operator (its own token, the chart's RBAC):
//! - cli-utils' kstatus (`e2e/tools-kstatus`, the library Flux, kpt and Argo CD's health
//!   checks use) reads an object the operator has not seen as InProgress, a bot waiting
//!   for its pod as InProgress, a ready bot as Current, and each permanent failure as
//!   Failed with `Ready`'s message; `kubectl wait --for=condition=Ready` succeeds only
//!   for the ready bot;
//! - grandchildren reach the bot's `Ready`: a pod a LimitRange refuses (the Deployment's
//!   `ReplicaFailure`) and a Secret key that does not exist;
//! - the `saint.work/bot` label removed from the Deployment or the claim comes back.
//!
//! No kubelet runs: a bot pod is made ready by writing its status as a kubelet would.
//! Every wait names what it waits for and fails with what it last saw.

use std::{collections::BTreeMap, time::Duration};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{PersistentVolumeClaim, Pod},
};
use kube::{
    Api, Client, Resource,
    api::{DynamicObject, ListParams, Patch, PatchParams, WatchEvent, WatchParams},
};
use saint_e2e::{
    Environment, Failure, TestResult,
    chart::{self, ChartInstall, RunningOperator},
    company_bot::{CONVERGE_TIMEOUT, condition, saintbot_resource},
    manifests, namespace, tools, wait,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The chart and its operator, and the namespaces a scenario made.
struct Scenario {
    environment: Environment,
    admin: Client,
    operator: Option<RunningOperator>,
    namespaces: Vec<String>,
    install: ChartInstall,
}

impl Scenario {
    /// `helm install`; the operator is started by [`Scenario::start_operator`].
    async fn install(release: &str) -> Result<Self, Failure> {
        let environment = Environment::from_env()?;
        let admin = environment.admin_client().await?;
        let install = chart::install(&environment, &admin, release, &[]).await?;
        Ok(Self {
            environment,
            admin,
            operator: None,
            namespaces: Vec::new(),
            install,
        })
    }

    fn start_operator(&mut self) -> TestResult {
        let identity = format!("{}-0", self.install.release);
        self.operator = Some(self.install.start_operator(&self.environment, &identity)?);
        Ok(())
    }

    /// A fresh namespace enforcing Pod Security "restricted", removed by [`finish`].
    async fn namespace(&mut self, prefix: &str) -> Result<String, Failure> {
        let name = namespace::create(&self.admin, prefix, true).await?;
        self.namespaces.push(name.clone());
        Ok(name)
    }

    fn operator_log(&self) -> String {
        self.operator
            .as_ref()
            .map(|operator| {
                format!(
                    "operator log (last lines):\n{}",
                    operator.process.log_tail(30)
                )
            })
            .unwrap_or_default()
    }

    /// Applies a JSON/YAML stream into `namespace` as the admin (as a GitOps tool would).
    async fn apply(&self, namespace: &str, text: &str) -> Result<Vec<DynamicObject>, Failure> {
        Ok(manifests::apply_all(&self.admin, text, namespace).await?)
    }

    /// kstatus' verdict on every SaintBot, Contact and Role of `namespace`, by
    /// `Kind/name`: `(status, message)`.
    async fn kstatus(&self, namespace: &str) -> Result<BTreeMap<String, (String, String)>, String> {
        let listed = tools::run(
            &self.environment.tool("kubectl"),
            &self.environment.admin_kubeconfig,
            &[
                "get",
                "saintbots.saint.work,contacts.saint.work,roles.saint.work",
                "--namespace",
                namespace,
                "--output",
                "json",
            ],
            None,
        )
        .await
        .map_err(|error| error.to_string())?;
        kstatus_of(&self.environment, &listed.stdout).await
    }

    /// Waits until kstatus reads `Kind/name` in `namespace` as `status` with a message
    /// `accept`ed; returns the message.
    async fn wait_kstatus(
        &self,
        namespace: &str,
        object: &str,
        status: &str,
        accept: impl Fn(&str) -> bool,
    ) -> Result<String, wait::WaitError> {
        wait::until(
            &format!("kstatus {status} for {object} in {namespace}"),
            CONVERGE_TIMEOUT,
            || async {
                let verdicts = self.kstatus(namespace).await?;
                match verdicts.get(object) {
                    Some((seen, message)) if seen == status && accept(message) => {
                        Ok(message.clone())
                    }
                    other => Err(format!("{object}: {other:?}\n{}", self.operator_log())),
                }
            },
        )
        .await
    }

    /// `kubectl wait --for=condition=<condition> saintbot/<bot>`: whether it succeeded.
    async fn kubectl_wait(
        &self,
        namespace: &str,
        bot: &str,
        condition: &str,
        seconds: u64,
    ) -> bool {
        tools::run(
            &self.environment.tool("kubectl"),
            &self.environment.admin_kubeconfig,
            &[
                "wait",
                "--namespace",
                namespace,
                &format!("--for=condition={condition}"),
                &format!("--timeout={seconds}s"),
                &format!("saintbots.saint.work/{bot}"),
            ],
            None,
        )
        .await
        .is_ok()
    }

    /// The SaintBot's status once its `Ready` has `reason` and a message naming every
    /// needle.
    async fn wait_ready_reason(
        &self,
        namespace: &str,
        bot: &str,
        reason: &str,
        needles: &[&str],
    ) -> Result<Value, wait::WaitError> {
        let bots: Api<DynamicObject> =
            Api::namespaced_with(self.admin.clone(), namespace, &saintbot_resource());
        wait::until(
            &format!("SaintBot {bot} Ready reason {reason} naming {needles:?}"),
            CONVERGE_TIMEOUT,
            || async {
                let object = bots.get(bot).await.map_err(|error| error.to_string())?;
                let status = object.data.get("status").cloned().unwrap_or(Value::Null);
                let ready = condition(&status, "Ready").cloned().unwrap_or(Value::Null);
                let message = ready["message"].as_str().unwrap_or_default();
                if ready["reason"] == reason
                    && needles.iter().all(|needle| message.contains(needle))
                {
                    Ok(status)
                } else {
                    Err(format!("status {status}\n{}", self.operator_log()))
                }
            },
        )
        .await
    }

    /// Fails on an RBAC refusal in the operator's log; removes the namespaces.
    async fn finish(self) -> TestResult {
        let log = self
            .operator
            .as_ref()
            .map(|operator| operator.process.log())
            .unwrap_or_default();
        for name in &self.namespaces {
            namespace::delete(&self.admin, name).await?;
        }
        let forbidden: Vec<&str> = log
            .lines()
            .filter(|line| line.contains("forbidden") && line.contains(" cannot "))
            .collect();
        if forbidden.is_empty() {
            Ok(())
        } else {
            Err(Failure::message(format!(
                "the chart's RBAC lacks verbs the operator uses:\n{}",
                forbidden.join("\n")
            )))
        }
    }
}

/// Runs the kstatus program on `json` (one object or a List).
async fn kstatus_of(
    environment: &Environment,
    json: &str,
) -> Result<BTreeMap<String, (String, String)>, String> {
    let output = tools::run(
        &environment.tool("kstatus"),
        &environment.admin_kubeconfig,
        &[],
        Some(json),
    )
    .await
    .map_err(|error| error.to_string())?;
    output
        .stdout
        .lines()
        .map(|line| {
            let verdict: Value = serde_json::from_str(line).map_err(|error| error.to_string())?;
            let text = |field: &str| verdict[field].as_str().unwrap_or_default().to_owned();
            Ok((
                format!("{}/{}", text("kind"), text("name")),
                (text("status"), text("message")),
            ))
        })
        .collect()
}

/// A small bot: one HTTP channel whose token, and the model key, come from `secret`;
/// it selects the Roles and Contacts labelled with `team`.
fn bot(name: &str, team: &str, secret: &str, default_role: &str, extra: Value) -> Value {
    let mut spec = json!({
        "persona": {"files": {"SOUL.md": "You are brief."}},
        "model": {
            "provider": "anthropic", "name": "claude-sonnet-4-5",
            "apiKeySecretRef": {"name": secret, "key": "api-key"},
            "prices": {"claude-sonnet-4-5": {"inputPerMtok": 3.0, "outputPerMtok": 15.0}},
        },
        "channels": [{"name": "api", "kind": "http", "settings": {"port": "8080"},
            "secrets": {"token": {"name": secret, "key": "http-token"}}}],
        "storage": {"size": "1Gi"},
        "defaultRole": default_role,
        "contactSelector": {"matchLabels": {"saint.work/team": team}},
        "roleSelector": {"matchLabels": {"saint.work/team": team}},
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    json!({"apiVersion": "saint.work/v1alpha1", "kind": "SaintBot",
        "metadata": {"name": name}, "spec": spec})
}

fn secret(name: &str, keys: &[&str]) -> Value {
    let data: serde_json::Map<String, Value> = keys
        .iter()
        .map(|key| (key.to_string(), json!("not-a-real-value")))
        .collect();
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": data})
}

fn role(name: &str, team: &str, allow: &[&str]) -> Value {
    json!({"apiVersion": "saint.work/v1alpha1", "kind": "Role",
        "metadata": {"name": name, "labels": {"saint.work/team": team}},
        "spec": {"tools": {"allow": allow}}})
}

fn contact(name: &str, team: &str, role: &str, email: &str, bots: &[&str]) -> Value {
    json!({"apiVersion": "saint.work/v1alpha1", "kind": "Contact",
        "metadata": {"name": name, "labels": {"saint.work/team": team}},
        "spec": {"displayName": name, "role": role, "identifiers": {"email": email},
            "bots": bots}})
}

/// A YAML stream of `objects` (JSON documents are YAML).
fn stream(objects: &[Value]) -> String {
    objects
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// Makes every pod of `bot` ready as a kubelet would report it (there is none).
async fn mark_pods_ready(admin: &Client, namespace: &str, bot: &str) -> Result<usize, String> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    let listed = pods
        .list(&ListParams::default().labels(&format!("saint.work/bot={bot}")))
        .await
        .map_err(|error| error.to_string())?;
    if listed.items.is_empty() {
        return Err(format!("no pod of {bot} yet"));
    }
    for pod in &listed.items {
        let ready = |type_: &str| json!({"type": type_, "status": "True"});
        let patch = json!({"status": {"phase": "Running", "conditions": [
            ready("PodScheduled"), ready("Initialized"), ready("ContainersReady"), ready("Ready"),
        ]}});
        pods.patch_status(
            pod.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(|error| error.to_string())?;
    }
    Ok(listed.items.len())
}

#[tokio::test]
async fn gitops_tools_read_unseen_and_waiting_as_in_progress_ready_as_current_and_each_failure_as_failed()
-> TestResult {
    let mut scenario = Scenario::install("kstatus").await?;

    // Not seen yet: the objects as the API server answers their creation, before any
    // operator could write a status.
    let ready_namespace = scenario.namespace("kstatus-ready").await?;
    scenario
        .apply(
            &ready_namespace,
            &stream(&[secret("hello-secrets", &["api-key", "http-token"])]),
        )
        .await?;
    let unseen = [
        role("hello-owner", "hello", &["read"]),
        role("guest", "hello", &["web_fetch"]),
        contact(
            "ana",
            "hello",
            "hello-owner",
            "ana@acme.example",
            &["hello"],
        ),
        bot("hello", "hello", "hello-secrets", "guest", json!({})),
    ];
    let mut table = Vec::new();
    for object in &unseen {
        let parsed = manifests::parse(&object.to_string())?;
        let created = manifests::create(&scenario.admin, &parsed[0], &ready_namespace).await?;
        let created = serde_json::to_string(&created)?;
        let verdicts = kstatus_of(&scenario.environment, &created)
            .await
            .map_err(Failure::message)?;
        let (status, message) = verdicts.values().next().cloned().unwrap_or_default();
        if status != "InProgress" || !message.contains("observed generation is 0") {
            return Err(Failure::message(format!(
                "an object no operator has seen must not be Current; kstatus said {status}: \
                 {message}\nobject: {created}"
            )));
        }
        table.push(format!(
            "{}/{} unseen: {status} ({message})",
            object["kind"].as_str().unwrap_or_default(),
            object["metadata"]["name"].as_str().unwrap_or_default()
        ));
    }
    scenario.start_operator()?;

    // Waiting for its pod: InProgress with the reason (Reconciling=True).
    let waiting = scenario
        .wait_kstatus(
            &ready_namespace,
            "SaintBot/hello",
            "InProgress",
            |message| message.contains("waiting for the bot pod"),
        )
        .await?;
    table.push(format!(
        "SaintBot/hello waiting for its pod: InProgress ({waiting})"
    ));
    scenario
        .wait_kstatus(&ready_namespace, "Contact/ana", "Current", |_| true)
        .await?;
    scenario
        .wait_kstatus(&ready_namespace, "Role/guest", "Current", |_| true)
        .await?;
    let early = scenario
        .kubectl_wait(&ready_namespace, "hello", "Ready", 2)
        .await;
    if early {
        return Err(Failure::message(
            "kubectl wait --for=condition=Ready succeeded before the pod was ready",
        ));
    }

    // Ready: the pod reports ready, the ReplicaSet and Deployment count it, the bot is
    // Current and `kubectl wait` succeeds.
    let admin = scenario.admin.clone();
    wait::until("a pod of hello to mark ready", CONVERGE_TIMEOUT, || {
        mark_pods_ready(&admin, &ready_namespace, "hello")
    })
    .await?;
    let ready = scenario
        .wait_kstatus(&ready_namespace, "SaintBot/hello", "Current", |_| true)
        .await?;
    table.push(format!("SaintBot/hello pod ready: Current ({ready})"));
    if !scenario
        .kubectl_wait(&ready_namespace, "hello", "Ready", 60)
        .await
    {
        return Err(Failure::message(
            "kubectl wait --for=condition=Ready failed for a ready bot",
        ));
    }

    // Each permanent failure: Failed, with Ready's message, `kubectl wait` for Ready
    // times out and for Stalled succeeds.
    let failing = scenario.namespace("kstatus-failing").await?;
    scenario
        .apply(
            &failing,
            &stream(&[
                secret("s", &["api-key", "http-token"]),
                role("guest", "f", &["web_fetch"]),
                // A Role bots cannot render: InvalidSpec.
                role("broken", "unselected", &["teleport*"]),
                // A Contact naming a Role that does not exist: RoleNotFound.
                contact("lost", "f", "nobody", "lost@acme.example", &["twins"]),
                // Two Contacts of one bot claiming one address: IdentifierConflict on both.
                contact("ana", "f", "guest", "same@acme.example", &["twins"]),
                contact("ana-twin", "f", "guest", "same@acme.example", &["twins"]),
                // A default Role that does not exist: RoleNotFound on the bot.
                bot("no-role", "f", "s", "visitor", json!({})),
                // A skill whose ConfigMap does not exist: ConfigMapNotFound.
                bot(
                    "no-skill",
                    "f",
                    "s",
                    "guest",
                    json!({"skills": [{"name": "faq", "configMapRef": {"name": "faq-skill"}}]}),
                ),
                bot("twins", "f", "s", "guest", json!({})),
            ]),
        )
        .await?;
    // A namespace whose LimitRange refuses the bot's claim: the API server refuses a
    // child the operator applies (admission alone, no controller involved).
    let refusing = scenario.namespace("kstatus-refusing").await?;
    scenario
        .apply(
            &refusing,
            &stream(&[
                json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "tiny-claims"},
                    "spec": {"limits": [{"type": "PersistentVolumeClaim", "max": {"storage": "1Mi"}}]}}),
                secret("s", &["api-key", "http-token"]),
                role("guest", "q", &["web_fetch"]),
                bot("refused", "q", "s", "guest", json!({})),
            ]),
        )
        .await?;
    let cases = [
        (
            &failing,
            "SaintBot/no-role",
            "RoleNotFound",
            "spec.defaultRole",
        ),
        (
            &failing,
            "SaintBot/no-skill",
            "ConfigMapNotFound",
            "faq-skill",
        ),
        (&failing, "Role/broken", "InvalidSpec", "teleport*"),
        (&failing, "Contact/lost", "RoleNotFound", "nobody"),
        (
            &failing,
            "Contact/ana",
            "IdentifierConflict",
            "same@acme.example",
        ),
        (
            &failing,
            "Contact/ana-twin",
            "IdentifierConflict",
            "same@acme.example",
        ),
        (
            &refusing,
            "SaintBot/refused",
            "ApplyFailed",
            "maximum storage usage per PersistentVolumeClaim",
        ),
    ];
    for (namespace, object, reason, needle) in cases {
        let message = scenario
            .wait_kstatus(namespace, object, "Failed", |message| {
                message.contains(needle)
            })
            .await?;
        let (kind, name) = object.split_once('/').unwrap_or_default();
        let resource = match kind {
            "SaintBot" => saintbot_resource(),
            "Contact" => saint_e2e::company_bot::contact_resource(),
            _ => kube::core::ApiResource::from_gvk_with_plural(
                &kube::core::GroupVersionKind::gvk("saint.work", "v1alpha1", "Role"),
                "roles",
            ),
        };
        let stored =
            Api::<DynamicObject>::namespaced_with(scenario.admin.clone(), namespace, &resource)
                .get(name)
                .await?;
        let status = stored.data.get("status").cloned().unwrap_or(Value::Null);
        let ready = condition(&status, "Ready").cloned().unwrap_or(Value::Null);
        let stalled = condition(&status, "Stalled")
            .cloned()
            .unwrap_or(Value::Null);
        if ready["reason"] != reason
            || stalled["reason"] != reason
            || ready["message"] != message.as_str()
        {
            return Err(Failure::message(format!(
                "{object}: expected Ready and Stalled with {reason} and kstatus' message to be \
                 Ready's; status {status}"
            )));
        }
        if kind == "SaintBot" {
            let name = name.to_owned();
            if scenario.kubectl_wait(namespace, &name, "Ready", 2).await
                || !scenario.kubectl_wait(namespace, &name, "Stalled", 30).await
            {
                return Err(Failure::message(format!(
                    "{object}: kubectl wait must time out for Ready and succeed for Stalled"
                )));
            }
        }
        table.push(format!("{object}: Failed ({reason})"));
    }
    eprintln!("kstatus table:\n  {}", table.join("\n  "));
    scenario.finish().await
}

#[tokio::test]
async fn a_pod_a_limit_range_refuses_and_a_missing_secret_key_are_the_bots_ready_reason()
-> TestResult {
    let mut scenario = Scenario::install("grandchildren").await?;
    scenario.start_operator()?;

    let limited = scenario.namespace("limit-range").await?;
    scenario
        .apply(
            &limited,
            &stream(&[
                json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "tiny"},
                    "spec": {"limits": [{"type": "Container", "max": {"memory": "1Mi"}}]}}),
                secret("s", &["api-key", "http-token"]),
                role("guest", "l", &["web_fetch"]),
                bot("limited", "l", "s", "guest", json!({})),
            ]),
        )
        .await?;
    let status = scenario
        .wait_ready_reason(
            &limited,
            "limited",
            "ReplicaFailure",
            &["FailedCreate", "maximum memory usage per Container is 1Mi"],
        )
        .await?;
    let message = condition(&status, "Ready").cloned().unwrap_or_default()["message"].clone();
    eprintln!("LimitRange: Ready ReplicaFailure: {message}");
    scenario
        .wait_kstatus(&limited, "SaintBot/limited", "Failed", |text| {
            text.contains("FailedCreate")
        })
        .await?;

    let keyless = scenario.namespace("missing-key").await?;
    scenario
        .apply(
            &keyless,
            &stream(&[
                // The channel's token key is missing.
                secret("s", &["api-key"]),
                role("guest", "k", &["web_fetch"]),
                bot("keyless", "k", "s", "guest", json!({})),
            ]),
        )
        .await?;
    let status = scenario
        .wait_ready_reason(
            &keyless,
            "keyless",
            "SecretMissing",
            &["Secret \"s\"", "has no key \"http-token\""],
        )
        .await?;
    let message = condition(&status, "Ready").cloned().unwrap_or_default()["message"].clone();
    eprintln!("missing key: Ready SecretMissing: {message}");
    scenario
        .wait_kstatus(&keyless, "SaintBot/keyless", "Failed", |text| {
            text.contains("http-token")
        })
        .await?;
    scenario.finish().await
}

/// Removes the `saint.work/bot` label from `name` and waits, on a watch from that
/// write, for the operator to put it back; returns how long that took.
async fn label_comes_back<K>(api: &Api<K>, name: &str, bot: &str) -> Result<Duration, Failure>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let removed: K = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"saint.work/bot": null}}})),
        )
        .await?;
    let version = removed.meta().resource_version.clone().unwrap_or_default();
    let started = std::time::Instant::now();
    let stream = api
        .watch(
            &WatchParams::default().fields(&format!("metadata.name={name}")),
            &version,
        )
        .await?;
    let back = stream.try_filter_map(|event| async move {
        Ok(match event {
            WatchEvent::Modified(object) | WatchEvent::Added(object) => object
                .meta()
                .labels
                .as_ref()
                .and_then(|labels| labels.get("saint.work/bot"))
                .filter(|value| value.as_str() == bot)
                .map(|_| ()),
            _ => None,
        })
    });
    futures::pin_mut!(back);
    match tokio::time::timeout(CONVERGE_TIMEOUT, back.next()).await {
        Ok(Some(Ok(()))) => Ok(started.elapsed()),
        Ok(other) => Err(Failure::message(format!(
            "the watch of {name} ended before the saint.work/bot label came back: {other:?}"
        ))),
        Err(_) => Err(Failure::message(format!(
            "the saint.work/bot label of {name} did not come back within {} s",
            CONVERGE_TIMEOUT.as_secs()
        ))),
    }
}

#[tokio::test]
async fn the_bot_label_removed_from_the_deployment_or_the_claim_is_put_back() -> TestResult {
    let mut scenario = Scenario::install("relabel").await?;
    scenario.start_operator()?;
    let relabel = scenario.namespace("relabel").await?;
    scenario
        .apply(
            &relabel,
            &stream(&[
                secret("s", &["api-key", "http-token"]),
                role("guest", "t", &["web_fetch"]),
                bot("tagged", "t", "s", "guest", json!({})),
            ]),
        )
        .await?;
    scenario
        .wait_ready_reason(&relabel, "tagged", "PodNotReady", &[])
        .await?;
    let deployments: Api<Deployment> = Api::namespaced(scenario.admin.clone(), &relabel);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(scenario.admin.clone(), &relabel);
    let deployment = label_comes_back(&deployments, "tagged", "tagged").await?;
    let claim = label_comes_back(&claims, "tagged-workspace", "tagged").await?;
    eprintln!(
        "saint.work/bot put back on the Deployment in {:.1} s, on the claim in {:.1} s",
        deployment.as_secs_f64(),
        claim.as_secs_f64()
    );
    scenario.finish().await
}
