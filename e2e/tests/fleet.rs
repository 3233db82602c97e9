//! What the operator does when the cluster does not go its way, on a real control
//! plane with the chart's operator running as the chart's ServiceAccount:
//! - hand edits to the bot's fences (a sandbox NetworkPolicy rule, a RoleBinding
//!   subject) and to its pod template (a sidecar) are undone within seconds;
//! - a child the API server refuses (here a ResourceQuota forbids the claim) sets
//!   `Ready=False/ApplyFailed` naming the child in the API server's words, with a
//!   Warning Event, until the cause goes;
//! - a Secret the pod needs that does not exist sets `Ready=False/SecretMissing`
//!   naming it, until it is created.
//!
//! Every assertion reads the API server.

use std::time::Instant;

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Event, ResourceQuota},
    networking::v1::NetworkPolicy,
    rbac::v1::RoleBinding,
};
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use saint_e2e::{
    Environment, Failure, TestResult,
    chart::{self, RunningOperator},
    company_bot::{BOT, CONVERGE_TIMEOUT, CompanyBot, condition, condition_state},
    examples, manifests, namespace, wait,
};
use serde_json::{Value, json};

/// The chart installed, its operator running, and a restricted namespace for a bot.
struct Stage {
    environment: Environment,
    admin: Client,
    operator: RunningOperator,
    namespace: String,
}

impl Stage {
    async fn start(release: &str) -> Result<Self, Failure> {
        let environment = Environment::from_env()?;
        let admin = environment.admin_client().await?;
        let install = chart::install(&environment, &admin, release, &[]).await?;
        let operator = install.start_operator(&environment, &format!("{release}-0"))?;
        let namespace = namespace::create(&admin, &format!("{release}-bot"), true).await?;
        Ok(Self {
            environment,
            admin,
            operator,
            namespace,
        })
    }

    /// Applies the example's `files` (as the admin, like a GitOps tool would).
    async fn apply_example(&self, files: &[&str]) -> TestResult {
        for file in files {
            let mut text = examples::text(&self.environment, file)?;
            // A host of the stage's own: a bot an earlier stage left would own the
            // example's host and withhold this one's Ingress.
            if *file == "saintbot.yaml" {
                text = saint_e2e::company_bot::with_own_webhook_host(&text, &self.namespace);
            }
            manifests::apply_all(&self.admin, &text, &self.namespace).await?;
        }
        Ok(())
    }

    fn bot(&self) -> CompanyBot {
        CompanyBot {
            client: self.admin.clone(),
            namespace: self.namespace.clone(),
        }
    }

    fn log(&self) -> String {
        format!(
            "operator log (last lines):\n{}",
            self.operator.process.log_tail(30)
        )
    }

    /// Waits until `Ready` is False with `reason` for the current generation and its
    /// message contains every needle; returns the message.
    async fn wait_not_ready(&self, reason: &str, needles: &[&str]) -> Result<String, Failure> {
        let bot = self.bot();
        let message = wait::until(
            &format!("Ready=False/{reason} naming {needles:?}"),
            CONVERGE_TIMEOUT,
            || async {
                let object = bot.bot().await.map_err(|error| error.to_string())?;
                let status = object.data.get("status").cloned().unwrap_or(Value::Null);
                let message = condition(&status, "Ready")
                    .and_then(|ready| ready.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let current = status.get("observedGeneration").and_then(Value::as_i64)
                    == object.metadata.generation;
                if current
                    && condition_state(&status, "Ready") == ("False".to_owned(), reason.to_owned())
                    && needles.iter().all(|needle| message.contains(needle))
                {
                    Ok(message)
                } else {
                    Err(format!("status {status}\n{}", self.log()))
                }
            },
        )
        .await?;
        Ok(message)
    }

    /// Waits for a Warning Event about the SaintBot with `reason` naming `needle`.
    async fn wait_warning(&self, reason: &str, needle: &str) -> TestResult {
        let events = Api::<Event>::namespaced(self.admin.clone(), &self.namespace);
        wait::until(
            &format!("a Warning Event {reason} about the SaintBot naming {needle}"),
            CONVERGE_TIMEOUT,
            || async {
                let list = events
                    .list(&ListParams::default())
                    .await
                    .map_err(|error| error.to_string())?;
                let found = list.items.iter().any(|event| {
                    event.reason.as_deref() == Some(reason)
                        && event.type_.as_deref() == Some("Warning")
                        && event.involved_object.name.as_deref() == Some(BOT)
                        && event
                            .message
                            .as_deref()
                            .is_some_and(|note| note.contains(needle))
                });
                if found {
                    Ok(())
                } else {
                    Err(format!(
                        "events: {:?}",
                        list.items
                            .iter()
                            .map(|event| (event.reason.clone(), event.message.clone()))
                            .collect::<Vec<_>>()
                    ))
                }
            },
        )
        .await?;
        Ok(())
    }

    async fn finish(self) -> TestResult {
        let log = self.operator.process.log();
        let deleted = namespace::delete(&self.admin, &self.namespace).await;
        let forbidden: Vec<&str> = log
            .lines()
            .filter(|line| {
                line.contains("forbidden") && line.contains(" cannot ") && line.contains("resource")
            })
            .collect();
        if !forbidden.is_empty() {
            return Err(Failure::message(format!(
                "the chart's RBAC lacks verbs the operator uses:\n{}",
                forbidden.join("\n")
            )));
        }
        deleted?;
        Ok(())
    }
}

/// Field managers of an object, other than the operator.
fn other_managers(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Vec<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter_map(|entry| entry.manager.clone())
        .filter(|manager| manager != "saint-operator" && manager != "kube-controller-manager")
        .collect()
}

fn metric(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|line| line.starts_with(name))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn hand_edits_to_fences_and_the_pod_template_are_undone_within_seconds() -> TestResult {
    let stage = Stage::start("drift").await?;
    stage
        .apply_example(&[
            "secrets.yaml",
            "roles.yaml",
            "contacts.yaml",
            "saintbot.yaml",
        ])
        .await?;
    stage.bot().wait_converged(|| stage.log()).await?;
    let policies = Api::<NetworkPolicy>::namespaced(stage.admin.clone(), &stage.namespace);
    let deployments = Api::<Deployment>::namespaced(stage.admin.clone(), &stage.namespace);
    let bindings = Api::<RoleBinding>::namespaced(stage.admin.clone(), &stage.namespace);
    let sandbox_policy = format!("{BOT}-sandbox");
    let binding = format!("{BOT}-agent");
    let before = deployments.get(BOT).await?;
    let containers_before: Vec<String> = before
        .spec
        .as_ref()
        .and_then(|spec| spec.template.spec.as_ref())
        .map(|pod| pod.containers.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();

    // What a person with edit rights might do by hand: open the sandbox's egress, add a
    // sidecar to the bot's pod, grant the agent's rights to another account.
    let edit = |manager: &str| PatchParams {
        field_manager: Some(manager.to_owned()),
        ..PatchParams::default()
    };
    let started = Instant::now();
    policies
        .patch(
            &sandbox_policy,
            &edit("kubectl-edit"),
            &Patch::Merge(json!({"spec": {"egress": [{}]}})),
        )
        .await?;
    deployments
        .patch(
            BOT,
            &edit("sidecar-injector"),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "spy", "image": "registry.example/spy:1",
                 "securityContext": {"allowPrivilegeEscalation": false, "runAsNonRoot": true,
                   "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}}
            ]}}}})),
        )
        .await?;
    bindings
        .patch(
            &binding,
            &edit("kubectl-patch"),
            &Patch::Merge(json!({"subjects": [
                {"kind": "ServiceAccount", "name": format!("{BOT}-agent"), "namespace": stage.namespace},
                {"kind": "ServiceAccount", "name": "default", "namespace": stage.namespace}
            ]})),
        )
        .await?;
    // Each edit took (the API server stored it) before the operator undid it.
    let policy = policies.get(&sandbox_policy).await?;
    let edited_or_restored = policy
        .spec
        .as_ref()
        .and_then(|spec| spec.egress.as_ref())
        .is_some_and(|egress| !egress.is_empty())
        || other_managers(&policy.metadata).is_empty();
    assert!(edited_or_restored, "{policy:?}");

    let restored = wait::until(
        "the sandbox policy, the pod template and the binding restored whole",
        CONVERGE_TIMEOUT,
        || async {
            let policy = policies
                .get(&sandbox_policy)
                .await
                .map_err(|error| error.to_string())?;
            let egress = policy
                .spec
                .as_ref()
                .and_then(|spec| spec.egress.clone())
                .unwrap_or_default();
            let deployment = deployments
                .get(BOT)
                .await
                .map_err(|error| error.to_string())?;
            let containers: Vec<String> = deployment
                .spec
                .as_ref()
                .and_then(|spec| spec.template.spec.as_ref())
                .map(|pod| pod.containers.iter().map(|c| c.name.clone()).collect())
                .unwrap_or_default();
            let binding = bindings
                .get(&binding)
                .await
                .map_err(|error| error.to_string())?;
            let subjects: Vec<String> = binding
                .subjects
                .iter()
                .flatten()
                .map(|subject| subject.name.clone())
                .collect();
            // Restored means whole: content back, and no other owner left (the last step
            // of a repair drops the API server's placeholder owner).
            if egress.is_empty()
                && containers == containers_before
                && subjects == [format!("{BOT}-agent")]
                && other_managers(&policy.metadata).is_empty()
                && other_managers(&deployment.metadata).is_empty()
                && other_managers(&binding.metadata).is_empty()
            {
                Ok((
                    started.elapsed(),
                    other_managers(&policy.metadata),
                    other_managers(&deployment.metadata),
                ))
            } else {
                Err(format!(
                    "egress {egress:?}, containers {containers:?}, subjects {subjects:?}, \
                     other managers {:?} {:?} {:?}\n{}",
                    other_managers(&policy.metadata),
                    other_managers(&deployment.metadata),
                    other_managers(&binding.metadata),
                    stage.log()
                ))
            }
        },
    )
    .await?;
    let (elapsed, policy_managers, deployment_managers) = restored;
    eprintln!(
        "drift restored {:.1} s after the first hand edit",
        elapsed.as_secs_f64()
    );
    assert!(
        policy_managers.is_empty() && deployment_managers.is_empty(),
        "no foreign field manager is left to own a field: {policy_managers:?} {deployment_managers:?}"
    );
    let metrics = stage.operator.metrics().await.map_err(Failure::message)?;
    for kind in ["NetworkPolicy", "Deployment", "RoleBinding"] {
        let repaired = metric(
            &metrics,
            &format!("saint_operator_drift_repairs_total{{kind=\"{kind}\"}}"),
        );
        assert!(repaired >= 1.0, "{kind} repaired: {metrics}");
    }
    // Restored, the children stay put: a further reconcile of the bot (woken by a label
    // on the SaintBot) repairs nothing more.
    let repairs = metric(&metrics, "saint_operator_drift_repairs_total");
    let finished = metric(&metrics, "saint_operator_reconcile_duration_seconds_count");
    stage
        .bot()
        .bots()
        .patch(
            BOT,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"poke": "1"}}})),
        )
        .await?;
    let later = wait::until("one more finished reconcile", CONVERGE_TIMEOUT, || async {
        let now = stage.operator.metrics().await?;
        if metric(&now, "saint_operator_reconcile_duration_seconds_count") > finished {
            Ok(now)
        } else {
            Err(format!("{finished} reconciles finished so far"))
        }
    })
    .await?;
    assert_eq!(
        metric(&later, "saint_operator_drift_repairs_total"),
        repairs,
        "no repair loop after the restore"
    );
    stage.finish().await
}

#[tokio::test]
async fn edits_disguised_as_the_operator_or_with_their_trace_erased_are_undone_too() -> TestResult {
    let stage = Stage::start("disguise").await?;
    stage
        .apply_example(&[
            "secrets.yaml",
            "roles.yaml",
            "contacts.yaml",
            "saintbot.yaml",
        ])
        .await?;
    stage.bot().wait_converged(|| stage.log()).await?;
    let policies = Api::<NetworkPolicy>::namespaced(stage.admin.clone(), &stage.namespace);
    let deployments = Api::<Deployment>::namespaced(stage.admin.clone(), &stage.namespace);
    let config_maps = Api::<ConfigMap>::namespaced(stage.admin.clone(), &stage.namespace);
    let sandbox_policy = format!("{BOT}-sandbox");
    let config = format!("{BOT}-config");
    let containers_of = |deployment: &Deployment| -> Vec<String> {
        deployment
            .spec
            .as_ref()
            .and_then(|spec| spec.template.spec.as_ref())
            .map(|pod| pod.containers.iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default()
    };
    let containers_before = containers_of(&deployments.get(BOT).await?);

    // Written under the operator's own field manager name.
    policies
        .patch(
            &sandbox_policy,
            &PatchParams {
                field_manager: Some("saint-operator".to_owned()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"spec": {"egress": [{}]}})),
        )
        .await?;
    // Written with the managed fields erased in the same request: no owner at all.
    let erase = PatchParams {
        field_manager: Some("sneaky".to_owned()),
        ..PatchParams::default()
    };
    deployments
        .patch(
            BOT,
            &erase,
            &Patch::Strategic(json!({
                "metadata": {"managedFields": [{}]},
                "spec": {"template": {"spec": {"containers": [
                    {"name": "spy", "image": "registry.example/spy:1",
                     "securityContext": {"allowPrivilegeEscalation": false, "runAsNonRoot": true,
                       "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}}
                ]}}}
            })),
        )
        .await?;
    config_maps
        .patch(
            &config,
            &erase,
            &Patch::Merge(json!({
                "metadata": {"managedFields": [{}]},
                "data": {"extra.json": "{}"}
            })),
        )
        .await?;

    wait::until(
        "the disguised and untraced edits undone",
        CONVERGE_TIMEOUT,
        || async {
            let policy = policies
                .get(&sandbox_policy)
                .await
                .map_err(|error| error.to_string())?;
            let egress = policy
                .spec
                .as_ref()
                .and_then(|spec| spec.egress.clone())
                .unwrap_or_default();
            let containers = containers_of(
                &deployments
                    .get(BOT)
                    .await
                    .map_err(|error| error.to_string())?,
            );
            let keys: Vec<String> = config_maps
                .get(&config)
                .await
                .map_err(|error| error.to_string())?
                .data
                .unwrap_or_default()
                .into_keys()
                .collect();
            if egress.is_empty()
                && containers == containers_before
                && !keys.contains(&"extra.json".to_owned())
            {
                Ok(())
            } else {
                Err(format!(
                    "egress {egress:?}, containers {containers:?}, config keys {keys:?}\n{}",
                    stage.log()
                ))
            }
        },
    )
    .await?;
    stage.finish().await
}

#[tokio::test]
async fn a_child_the_api_server_refuses_sets_apply_failed_naming_it_until_the_cause_goes()
-> TestResult {
    let stage = Stage::start("refused").await?;
    // A quota that admits no PersistentVolumeClaim, made before the bot.
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "no-claims"},
        "spec": {"hard": {"persistentvolumeclaims": "0"}},
    }))?;
    let quotas = Api::<ResourceQuota>::namespaced(stage.admin.clone(), &stage.namespace);
    quotas.create(&PostParams::default(), &quota).await?;
    // What the quota controller (not run here) would record; admission judges by it.
    quotas
        .patch_status(
            "no-claims",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "hard": {"persistentvolumeclaims": "0"},
                "used": {"persistentvolumeclaims": "0"},
            }})),
        )
        .await?;
    stage
        .apply_example(&[
            "secrets.yaml",
            "roles.yaml",
            "contacts.yaml",
            "saintbot.yaml",
        ])
        .await?;
    let claim = format!("{BOT}-workspace");
    let message = stage
        .wait_not_ready(
            "ApplyFailed",
            &[
                "the API server refused PersistentVolumeClaim",
                &claim,
                "quota",
            ],
        )
        .await?;
    eprintln!("ApplyFailed: {message}");
    stage.wait_warning("ApplyFailed", &claim).await?;

    // The cause goes; the operator's retry (with backoff) renders the bot.
    quotas.delete("no-claims", &Default::default()).await?;
    stage.bot().wait_converged(|| stage.log()).await?;
    let status = stage
        .bot()
        .bot()
        .await?
        .data
        .get("status")
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(
        condition_state(&status, "Ready"),
        ("False".to_owned(), "PodNotReady".to_owned()),
        "no kubelet here: the pod is admitted, never run; {status}"
    );
    stage.finish().await
}

#[tokio::test]
async fn a_missing_secret_is_named_with_what_needs_it_until_it_exists() -> TestResult {
    let stage = Stage::start("secretless").await?;
    stage
        .apply_example(&["roles.yaml", "contacts.yaml", "saintbot.yaml"])
        .await?;
    let message = stage
        .wait_not_ready(
            "SecretMissing",
            &[
                "Secret \"acme-assistant-llm\"",
                "container agent",
                &stage.namespace,
            ],
        )
        .await?;
    eprintln!("SecretMissing: {message}");
    stage
        .wait_warning("SecretMissing", "acme-assistant-llm")
        .await?;

    // The Secrets arrive (a GitOps tool applying them after the bot); Secrets are not
    // watched, so the operator's retry finds them.
    stage.apply_example(&["secrets.yaml"]).await?;
    wait::until(
        "Ready=False/PodNotReady once the Secrets exist",
        CONVERGE_TIMEOUT,
        || async {
            let object = stage.bot().bot().await.map_err(|error| error.to_string())?;
            let status = object.data.get("status").cloned().unwrap_or(Value::Null);
            if condition_state(&status, "Ready") == ("False".to_owned(), "PodNotReady".to_owned()) {
                Ok(())
            } else {
                Err(format!("status {status}\n{}", stage.log()))
            }
        },
    )
    .await?;
    stage.finish().await
}
