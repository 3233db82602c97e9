//! The operator on a real control plane: the chart installed with `helm
//! install`, the operator running as a separate process with a token of the
//! chart's ServiceAccount (so the chart's RBAC is what it has), and the
//! example company bot applied into a namespace enforcing Pod Security
//! "restricted". Every assertion reads the API server.

use std::{collections::BTreeSet, time::Duration};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::{
    batch::v1::Job,
    coordination::v1::Lease,
    core::v1::{Event, Pod, Secret},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{
    Api, Client,
    api::{
        DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
        WatchParams,
    },
    core::{ApiResource, GroupVersionKind},
};
use saint_e2e::{
    Environment,
    chart::{self, ChartInstall, RunningOperator},
    company_bot::{self, BOT, CONVERGE_TIMEOUT, CompanyBot, condition_state},
    environment::client_from_kubeconfig,
    examples, manifests, namespace, service_account, wait,
};
use saint_sandbox::{
    ScopeKey, View, Viewer,
    kubernetes::{JobParameters, build_job},
};
use saint_tools::guard::{caller_view, role_paths::RolePaths};
use serde_json::{Value, json};

use saint_e2e::{Failure, TestResult};

/// A chart install, one operator process and the example bot.
struct Scenario {
    environment: Environment,
    admin: Client,
    install: ChartInstall,
    operator: RunningOperator,
    bot: CompanyBot,
}

impl Scenario {
    /// `helm install`, start the operator as the chart's ServiceAccount, apply the example.
    async fn start(release: &str) -> Result<Self, Failure> {
        let environment = Environment::from_env()?;
        let admin = environment.admin_client().await?;
        let install = chart::install(&environment, &admin, release, &[]).await?;
        let operator = install.start_operator(&environment, &format!("{release}-0"))?;
        let bot = CompanyBot::apply(&environment, &admin, &format!("{release}-bot")).await?;
        Ok(Self {
            environment,
            admin,
            install,
            operator,
            bot,
        })
    }

    fn operator_log(&self) -> String {
        format!(
            "operator log (last lines):\n{}",
            self.operator.process.log_tail(40)
        )
    }

    async fn converged(&self) -> Result<Value, wait::WaitError> {
        self.bot.wait_converged(|| self.operator_log()).await
    }

    /// Fails if the operator logged an RBAC refusal (the chart lacks a verb),
    /// then removes the bot's namespace so later scenarios' operators do not
    /// keep reconciling it.
    async fn finish(self) -> TestResult {
        let log = self.operator.process.log();
        let namespace_deleted = namespace::delete(&self.admin, &self.bot.namespace).await;
        no_forbidden(&log)?;
        namespace_deleted?;
        Ok(())
    }
}

/// Fails with the API server's words if an operator log shows an RBAC refusal.
fn no_forbidden(log: &str) -> TestResult {
    let forbidden = forbidden_lines(log);
    if forbidden.is_empty() {
        Ok(())
    } else {
        Err(Failure::message(format!(
            "the chart's RBAC lacks verbs the operator uses:\n{}",
            forbidden.join("\n")
        )))
    }
}

/// RBAC refusals the operator logged, in the API server's words (the error
/// field of a JSON log line, or the whole line of a text log). Only the
/// authorizer's "User … cannot <verb> resource …" counts: other 403s, such as
/// writes into a namespace being deleted by an earlier scenario, are not RBAC.
fn forbidden_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter(|line| {
            line.contains("forbidden") && line.contains(" cannot ") && line.contains("resource")
        })
        .map(|line| {
            serde_json::from_str::<Value>(line)
                .ok()
                .and_then(|entry| {
                    let fields = entry.get("fields")?;
                    let error = fields.get("error").or_else(|| fields.get("message"))?;
                    error.as_str().map(str::to_owned)
                })
                .unwrap_or_else(|| line.to_owned())
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Every child kind the operator makes for a bot, with the name it must have
/// (`None`: at least one object of the kind, any name).
fn child_kinds() -> Vec<(ApiResource, Option<String>)> {
    let resource = |group: &str, version: &str, kind: &str, plural: &str| {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
    };
    vec![
        (
            resource("", "v1", "ConfigMap", "configmaps"),
            Some(format!("{BOT}-config")),
        ),
        (
            resource("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
            Some(format!("{BOT}-workspace")),
        ),
        (
            resource("", "v1", "ServiceAccount", "serviceaccounts"),
            Some(format!("{BOT}-agent")),
        ),
        (
            resource("", "v1", "Service", "services"),
            Some(BOT.to_owned()),
        ),
        (
            resource("apps", "v1", "Deployment", "deployments"),
            Some(BOT.to_owned()),
        ),
        (
            resource(
                "rbac.authorization.k8s.io",
                "v1",
                "RoleBinding",
                "rolebindings",
            ),
            Some(format!("{BOT}-agent")),
        ),
        (
            resource(
                "networking.k8s.io",
                "v1",
                "NetworkPolicy",
                "networkpolicies",
            ),
            None,
        ),
        // The example asks for a webhook Ingress and has a WhatsApp channel.
        (
            resource("networking.k8s.io", "v1", "Ingress", "ingresses"),
            Some(format!("{BOT}-webhooks")),
        ),
    ]
}

/// Objects of each child kind carrying the bot's label.
async fn labelled_children(
    client: &Client,
    namespace: &str,
) -> Result<Vec<(String, DynamicObject)>, kube::Error> {
    let mut children = Vec::new();
    for (resource, _) in child_kinds() {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        for object in api
            .list(&ListParams::default().labels(&format!("saint.work/bot={BOT}")))
            .await?
            .items
        {
            children.push((resource.kind.clone(), object));
        }
    }
    Ok(children)
}

#[tokio::test]
async fn example_bot_gets_every_child_with_owner_references_and_an_honest_status() -> TestResult {
    let scenario = Scenario::start("children").await?;
    let status = scenario.converged().await?;

    // No kubelet: the config is rendered, the pod can never become ready, and
    // the status says exactly that for the generation it saw.
    let bot = scenario.bot.bot().await?;
    assert_eq!(
        status.get("observedGeneration").and_then(Value::as_i64),
        bot.metadata.generation
    );
    assert_eq!(
        condition_state(&status, "Ready"),
        ("False".to_owned(), "PodNotReady".to_owned()),
        "status: {status}"
    );
    let ready = saint_e2e::company_bot::condition(&status, "Ready")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        ready.get("observedGeneration").and_then(Value::as_i64),
        bot.metadata.generation
    );
    assert_eq!(
        status.get("contacts").and_then(Value::as_i64),
        Some(3),
        "status: {status}"
    );
    assert_eq!(
        status.get("roles").and_then(Value::as_i64),
        Some(5),
        "status: {status}"
    );

    // Every child exists, carries the bot label and a controller owner
    // reference to this SaintBot (so the garbage collector can remove it).
    let uid = bot.metadata.uid.clone().unwrap_or_default();
    let children = labelled_children(&scenario.admin, &scenario.bot.namespace).await?;
    let mut problems = Vec::new();
    for (resource, name) in child_kinds() {
        let found: Vec<&DynamicObject> = children
            .iter()
            .filter(|(kind, _)| *kind == resource.kind)
            .map(|(_, object)| object)
            .collect();
        match &name {
            Some(name)
                if !found
                    .iter()
                    .any(|object| object.metadata.name.as_deref() == Some(name)) =>
            {
                problems.push(format!("no {} named {name}", resource.kind));
            }
            None if found.is_empty() => problems.push(format!("no {}", resource.kind)),
            _ => {}
        }
    }
    for (kind, object) in &children {
        let owned = object
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|owner| {
                owner.uid == uid && owner.kind == "SaintBot" && owner.controller == Some(true)
            });
        if !owned {
            problems.push(format!(
                "{kind} {:?} lacks a controller owner reference to SaintBot {BOT}",
                object.metadata.name
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{}\n{}",
        problems.join("\n"),
        scenario.operator_log()
    );

    // The rendered config: identity links generated from the Contacts,
    // normalised, and no Secret value anywhere.
    let (text, config) = scenario.bot.rendered_config().await?;
    let links = &config.identity_links;
    let expect = [
        ("ana", "whatsapp:+385991234567"),
        ("ana", "email:ana@company.hr"),
        ("marko", "telegram:222222222"),
        ("marko", "whatsapp:+385991234568"),
        ("ivan", "email:ivan@company.hr"),
    ];
    for (person, identity) in expect {
        assert!(
            links
                .get(person)
                .is_some_and(|identities| identities.iter().any(|item| item == identity)),
            "identityLinks lacks {person}: {identity}; identityLinks = {links:?}"
        );
    }
    assert!(
        !text.contains("REPLACE-ME"),
        "a Secret value leaked into the rendered config"
    );

    // Pod Security "restricted" admits the bot pod: the ReplicaSet controller
    // created it (it never runs without a kubelet).
    wait::until(
        "the bot pod admitted in the restricted namespace",
        CONVERGE_TIMEOUT,
        || async {
            let pods = scenario
                .bot
                .pods()
                .await
                .map_err(|error| error.to_string())?;
            if pods.is_empty() {
                Err(replica_set_failures(&scenario.admin, &scenario.bot.namespace).await)
            } else {
                Ok(())
            }
        },
    )
    .await?;
    // The chart's own operator pod is admitted in its restricted namespace too.
    wait::until(
        "the chart's operator pod admitted",
        CONVERGE_TIMEOUT,
        || async {
            let pods = Api::<Pod>::namespaced(scenario.admin.clone(), &scenario.install.namespace)
                .list(&ListParams::default())
                .await
                .map_err(|error| error.to_string())?;
            if pods.items.is_empty() {
                Err(replica_set_failures(&scenario.admin, &scenario.install.namespace).await)
            } else {
                Ok(())
            }
        },
    )
    .await?;

    scenario.finish().await
}

/// The ReplicaSets' failure conditions (Pod Security refusals land there).
async fn replica_set_failures(client: &Client, namespace: &str) -> String {
    let sets = Api::<k8s_openapi::api::apps::v1::ReplicaSet>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await;
    match sets {
        Ok(sets) => format!(
            "no pods yet; ReplicaSet conditions: {:?}",
            sets.items
                .iter()
                .map(|set| (
                    set.metadata.name.clone(),
                    set.status
                        .as_ref()
                        .and_then(|status| status.conditions.clone())
                ))
                .collect::<Vec<_>>()
        ),
        Err(error) => error.to_string(),
    }
}

async fn merge_patch(
    api: &Api<DynamicObject>,
    name: &str,
    patch: Value,
) -> Result<(), kube::Error> {
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

async fn wait_for_identity(
    scenario: &Scenario,
    person: &str,
    identity: &str,
    present: bool,
) -> Result<(), wait::WaitError> {
    wait::until(
        &format!(
            "identityLinks[{person}] {} {identity}",
            if present { "containing" } else { "without" }
        ),
        CONVERGE_TIMEOUT,
        || async {
            let (_, config) = scenario
                .bot
                .rendered_config()
                .await
                .map_err(|error| error.to_string())?;
            let has = config
                .identity_links
                .get(person)
                .is_some_and(|identities| identities.iter().any(|item| item == identity));
            if has == present {
                Ok(())
            } else {
                Err(format!(
                    "identityLinks = {:?}\n{}",
                    config.identity_links,
                    scenario.operator_log()
                ))
            }
        },
    )
    .await
}

/// Waits until the bot's ReplicaSets show a `pod-template-hash` outside
/// `seen` (the Deployment controller rolled a new pod template); returns the
/// new hash. Old ReplicaSets may be pruned, so only novelty counts.
async fn wait_for_new_template_hash(
    scenario: &Scenario,
    seen: &BTreeSet<String>,
) -> Result<String, wait::WaitError> {
    wait::until(
        &format!("a pod-template-hash other than {seen:?}"),
        CONVERGE_TIMEOUT,
        || async {
            let hashes = scenario
                .bot
                .pod_template_hashes()
                .await
                .map_err(|error| error.to_string())?;
            hashes
                .iter()
                .find(|hash| !seen.contains(*hash))
                .cloned()
                .ok_or_else(|| format!("pod-template-hash values {hashes:?}"))
        },
    )
    .await
}

#[tokio::test]
async fn contact_edit_rerenders_the_config_without_a_restart_while_model_and_channel_changes_roll_the_pod()
-> TestResult {
    let scenario = Scenario::start("rerender").await?;
    scenario.converged().await?;
    let first_hash = wait_for_new_template_hash(&scenario, &BTreeSet::new()).await?;
    let mut seen = BTreeSet::from([first_hash.clone()]);
    let before = scenario.bot.deployment().await?;

    // A phone number changes: new identity link, same pod template.
    merge_patch(
        &scenario.bot.contacts(),
        "ana",
        json!({"spec": {"identifiers": {"phone": "+385991110000"}}}),
    )
    .await?;
    wait_for_identity(&scenario, "ana", "whatsapp:+385991110000", true).await?;
    wait_for_identity(&scenario, "ana", "whatsapp:+385991234567", false).await?;
    scenario.converged().await?;
    let after = scenario.bot.deployment().await?;
    assert_eq!(
        after.metadata.generation, before.metadata.generation,
        "a Contact edit changed the bot Deployment"
    );
    assert_eq!(
        serde_json::to_value(after.spec.as_ref().map(|spec| &spec.template))?,
        serde_json::to_value(before.spec.as_ref().map(|spec| &spec.template))?,
        "a Contact edit changed the pod template"
    );
    assert_eq!(
        scenario.bot.pod_template_hashes().await?,
        vec![first_hash],
        "a Contact edit rolled the pod"
    );

    // The model changes: the pod must restart (a new ReplicaSet).
    let mut bot = examples::find(&scenario.environment, "saintbot.yaml", "SaintBot", BOT)?;
    bot.data["spec"]["model"]["name"] = json!("claude-opus-4-1");
    bot.data["spec"]["webhookIngress"]["host"] =
        json!(company_bot::webhook_host(&scenario.bot.namespace));
    manifests::apply(&scenario.admin, &bot, &scenario.bot.namespace).await?;
    scenario.converged().await?;
    seen.insert(wait_for_new_template_hash(&scenario, &seen).await?);

    // A channel changes: another restart.
    bot.data["spec"]["channels"][0]["settings"]["port"] = json!("8081");
    manifests::apply(&scenario.admin, &bot, &scenario.bot.namespace).await?;
    scenario.converged().await?;
    wait_for_new_template_hash(&scenario, &seen).await?;
    scenario.finish().await
}

#[tokio::test]
async fn the_webhook_ingress_exposes_only_webhook_paths_and_goes_when_the_field_goes() -> TestResult
{
    let scenario = Scenario::start("webhooks").await?;
    scenario.converged().await?;
    let name = format!("{BOT}-webhooks");
    let ingresses: Api<k8s_openapi::api::networking::v1::Ingress> =
        Api::namespaced(scenario.admin.clone(), &scenario.bot.namespace);
    let ingress = serde_json::to_value(ingresses.get(&name).await?)?;
    let rule = &ingress["spec"]["rules"][0];
    assert_eq!(
        rule["host"],
        company_bot::webhook_host(&scenario.bot.namespace),
        "{ingress}"
    );
    let paths: Vec<(&str, &str)> = rule["http"]["paths"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|path| {
            (
                path["path"].as_str().unwrap_or_default(),
                path["pathType"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        paths,
        vec![("/channels/whatsapp/webhook", "Exact")],
        "only the WhatsApp webhook is public: {ingress}"
    );
    assert_eq!(
        ingress["spec"]["tls"][0]["secretName"], "acme-assistant-tls",
        "{ingress}"
    );

    // The field goes: the operator deletes the Ingress (garbage collection would not,
    // the bot still exists).
    let mut bot = examples::find(&scenario.environment, "saintbot.yaml", "SaintBot", BOT)?;
    if let Some(spec) = bot.data["spec"].as_object_mut() {
        spec.remove("webhookIngress");
    }
    manifests::apply(&scenario.admin, &bot, &scenario.bot.namespace).await?;
    wait::until(
        "the webhook Ingress is deleted",
        CONVERGE_TIMEOUT,
        || async {
            match ingresses.get_opt(&name).await {
                Ok(None) => Ok(()),
                Ok(Some(_)) => Err(format!("{name} still exists")),
                Err(error) => Err(error.to_string()),
            }
        },
    )
    .await?;
    scenario.finish().await
}

/// Waits until the SaintBot's `ChannelsServed` condition has `state`; returns the status.
/// `Ready`'s reason and message of `bot`, once the reason is `reason` and the message
/// names every needle.
async fn wait_for_bot_ready_reason(
    bot: &CompanyBot,
    reason: &str,
    needles: &[&str],
    describe: impl Fn() -> String,
) -> Result<String, wait::WaitError> {
    wait::until(
        &format!(
            "Ready=False/{reason} naming {needles:?} in {}",
            bot.namespace
        ),
        CONVERGE_TIMEOUT,
        || async {
            let object = bot.bot().await.map_err(|error| error.to_string())?;
            let status = object.data.get("status").cloned().unwrap_or(Value::Null);
            let message = saint_e2e::company_bot::condition(&status, "Ready")
                .and_then(|condition| condition.get("message"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            if condition_state(&status, "Ready").1 == reason
                && needles.iter().all(|needle| message.contains(needle))
            {
                Ok(message)
            } else {
                Err(format!("status {status}\n{}", describe()))
            }
        },
    )
    .await
}

/// Tenancy: a second tenant's bot asking for a host and path another bot already
/// routes (in another namespace) is refused — `HostClaimed` naming the owner, a
/// Warning Event, no second Ingress — and takes the host when the owner goes; an
/// Ingress annotation the chart's `webhookIngress.allowedAnnotations` does not list is
/// refused naming both; a TLS Secret that does not exist is `SecretMissing`.
#[tokio::test]
async fn a_webhook_host_another_tenant_routes_is_refused_until_that_bot_goes() -> TestResult {
    let scenario = Scenario::start("tenancy").await?;
    scenario.converged().await?;
    let ingress_name = format!("{BOT}-webhooks");
    let owner_ingresses: Api<k8s_openapi::api::networking::v1::Ingress> =
        Api::namespaced(scenario.admin.clone(), &scenario.bot.namespace);
    owner_ingresses.get(&ingress_name).await?;

    // The same example in a second namespace, then asking for the owner's host: same
    // host, same WhatsApp path.
    let rival = CompanyBot::apply(&scenario.environment, &scenario.admin, "tenancy-rival").await?;
    rival.wait_converged(|| scenario.operator_log()).await?;
    let host = company_bot::webhook_host(&scenario.bot.namespace);
    merge_patch(
        &rival.bots(),
        BOT,
        json!({"spec": {"webhookIngress": {"host": host}}}),
    )
    .await?;
    let owner = format!("{}/{BOT}", scenario.bot.namespace);
    let message = wait_for_bot_ready_reason(
        &rival,
        "HostClaimed",
        &[
            &format!("host {host:?} path \"/channels/whatsapp/webhook\""),
            &format!("SaintBot {owner}"),
        ],
        || scenario.operator_log(),
    )
    .await?;
    eprintln!("HostClaimed: {message}");
    let events = Api::<Event>::namespaced(scenario.admin.clone(), &rival.namespace);
    wait::until(
        "a Warning Event HostClaimed on the rival bot",
        CONVERGE_TIMEOUT,
        || async {
            let list = events
                .list(&ListParams::default())
                .await
                .map_err(|error| error.to_string())?;
            list.items
                .iter()
                .any(|event| {
                    event.reason.as_deref() == Some("HostClaimed")
                        && event.type_.as_deref() == Some("Warning")
                        && event.involved_object.name.as_deref() == Some(BOT)
                        && event
                            .message
                            .as_deref()
                            .is_some_and(|note| note.contains(&owner))
                })
                .then_some(())
                .ok_or_else(|| {
                    format!(
                        "events: {:?}",
                        list.items
                            .iter()
                            .map(|event| (event.reason.clone(), event.message.clone()))
                            .collect::<Vec<_>>()
                    )
                })
        },
    )
    .await?;
    // No second Ingress: the rival's own (for its former host) is deleted, the rest of
    // it stays rendered.
    let rival_ingresses: Api<k8s_openapi::api::networking::v1::Ingress> =
        Api::namespaced(scenario.admin.clone(), &rival.namespace);
    wait::until(
        "the rival bot has no webhook Ingress",
        CONVERGE_TIMEOUT,
        || async {
            match rival_ingresses.get_opt(&ingress_name).await {
                Ok(None) => Ok(()),
                Ok(Some(ingress)) => Err(format!("{ingress_name}: {:?}", ingress.spec)),
                Err(error) => Err(error.to_string()),
            }
        },
    )
    .await?;
    let rival_status = rival.bot().await?.data["status"].clone();
    assert_eq!(
        condition_state(&rival_status, "ConfigRendered").0,
        "True",
        "only the Ingress is withheld: {rival_status}"
    );

    // The owner names a TLS Secret that does not exist: SecretMissing, naming it.
    let owner_bots = scenario.bot.bots();
    merge_patch(
        &owner_bots,
        BOT,
        json!({"spec": {"webhookIngress": {"tlsSecretName": "acme-assistant-tls-absent"}}}),
    )
    .await?;
    wait_for_ready_reason(
        &scenario,
        "SecretMissing",
        &[
            "acme-assistant-tls-absent",
            "spec.webhookIngress.tlsSecretName",
        ],
    )
    .await?;

    // An annotation outside the chart's allowlist is refused, naming it and the value.
    merge_patch(
        &owner_bots,
        BOT,
        json!({"spec": {"webhookIngress": {"annotations": {
            "nginx.ingress.kubernetes.io/server-snippet": "return 200;"}}}}),
    )
    .await?;
    wait_for_ready_reason(
        &scenario,
        "InvalidSpec",
        &[
            "nginx.ingress.kubernetes.io/server-snippet",
            "webhookIngress.allowedAnnotations",
        ],
    )
    .await?;

    // The owner goes: the rival is woken and routes the host now.
    owner_bots.delete(BOT, &DeleteParams::default()).await?;
    wait::until(
        "the rival bot's webhook Ingress routes the host once the owner is deleted",
        CONVERGE_TIMEOUT,
        || async {
            match rival_ingresses.get_opt(&ingress_name).await {
                Ok(Some(ingress)) => {
                    let routed = ingress
                        .spec
                        .and_then(|spec| spec.rules)
                        .and_then(|rules| rules.into_iter().next())
                        .and_then(|rule| rule.host);
                    if routed.as_deref() == Some(host.as_str()) {
                        Ok(())
                    } else {
                        Err(format!("{ingress_name} routes {routed:?}"))
                    }
                }
                Ok(None) => Err(format!(
                    "no {ingress_name} yet\n{}",
                    scenario.operator_log()
                )),
                Err(error) => Err(error.to_string()),
            }
        },
    )
    .await?;
    rival.wait_converged(|| scenario.operator_log()).await?;
    namespace::delete(&scenario.admin, &rival.namespace).await?;
    scenario.finish().await
}

async fn wait_for_channels_served(
    scenario: &Scenario,
    state: (&str, &str),
) -> Result<Value, Failure> {
    Ok(wait::until(
        &format!("ChannelsServed={}/{}", state.0, state.1),
        CONVERGE_TIMEOUT,
        || async {
            let bot = scenario
                .bot
                .bot()
                .await
                .map_err(|error| error.to_string())?;
            let status = bot.data.get("status").cloned().unwrap_or(Value::Null);
            if condition_state(&status, "ChannelsServed")
                == (state.0.to_owned(), state.1.to_owned())
            {
                Ok(status)
            } else {
                Err(format!("status {status}"))
            }
        },
    )
    .await?)
}

#[tokio::test]
async fn every_channel_of_the_example_bot_is_served_and_the_condition_says_so() -> TestResult {
    // The example declares one channel of every kind (http, whatsapp, email, telegram,
    // slack, discord, matrix); the agent serves them all, so the bot must say so and
    // no ChannelNotServed Warning may appear. (A kind without a reader is reported;
    // the operator's unit tests cover that path.)
    let scenario = Scenario::start("served").await?;
    scenario.converged().await?;
    let bot = examples::find(&scenario.environment, "saintbot.yaml", "SaintBot", BOT)?;
    let kinds: Vec<&str> = bot.data["spec"]["channels"]
        .as_array()
        .map(|channels| channels.iter().filter_map(|c| c["kind"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        kinds,
        [
            "http", "whatsapp", "email", "telegram", "slack", "discord", "matrix"
        ],
        "the example bot's channel kinds"
    );
    wait_for_channels_served(&scenario, ("True", "AllChannelsServed")).await?;
    let events = Api::<Event>::namespaced(scenario.admin.clone(), &scenario.bot.namespace)
        .list(&ListParams::default())
        .await?;
    let unserved: Vec<_> = events
        .items
        .iter()
        .filter(|event| event.reason.as_deref() == Some("ChannelNotServed"))
        .map(|event| event.message.clone())
        .collect();
    assert!(unserved.is_empty(), "ChannelNotServed events: {unserved:?}");
    scenario.finish().await
}

/// A skill ConfigMap the example does not have.
const MORE_SKILLS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: acme-assistant-more-skills
data:
  SKILL.md: |
    ---
    name: google-workspace
    description: Mail, calendar and Drive through gog.
    ---
    Run gog.
"#;

/// Waits until the SaintBot's `Ready` condition has `reason` and a message
/// containing every one of `needles`; returns the message.
async fn wait_for_ready_reason(
    scenario: &Scenario,
    reason: &str,
    needles: &[&str],
) -> Result<String, wait::WaitError> {
    wait::until(
        &format!("Ready=False/{reason} naming {needles:?}"),
        CONVERGE_TIMEOUT,
        || async {
            let bot = scenario
                .bot
                .bot()
                .await
                .map_err(|error| error.to_string())?;
            let status = bot.data.get("status").cloned().unwrap_or(Value::Null);
            let message = saint_e2e::company_bot::condition(&status, "Ready")
                .and_then(|condition| condition.get("message"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            if condition_state(&status, "Ready") == ("False".to_owned(), reason.to_owned())
                && needles.iter().all(|needle| message.contains(needle))
            {
                Ok(message)
            } else {
                Err(format!("status {status}\n{}", scenario.operator_log()))
            }
        },
    )
    .await
}

/// Waits for a Warning Event about the SaintBot with `reason` whose note contains `needle`.
async fn wait_for_warning(scenario: &Scenario, reason: &str, needle: &str) -> TestResult {
    let events = Api::<Event>::namespaced(scenario.admin.clone(), &scenario.bot.namespace);
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

#[tokio::test]
async fn heartbeat_schedule_and_skills_render_and_what_only_the_operator_can_check_is_named()
-> TestResult {
    let scenario = Scenario::start("proactive").await?;
    scenario.converged().await?;

    // The example's heartbeat, schedule and skills reach the config the agent reads,
    // and the skills ConfigMap is projected into the agent container only.
    let (_, config) = scenario.bot.rendered_config().await?;
    let heartbeat = config
        .heartbeat
        .clone()
        .expect("the example has a heartbeat");
    assert_eq!(
        (heartbeat.every_seconds, heartbeat.role.as_str()),
        (1800, "heartbeat")
    );
    assert_eq!(config.schedule.timezone, "Europe/Zagreb");
    assert_eq!(config.skills.directories, [saint_config::SKILLS_MOUNT_PATH]);
    let deployment = serde_json::to_value(scenario.bot.deployment().await?)?;
    let pod = &deployment["spec"]["template"]["spec"];
    let skills = pod["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|volume| volume["name"] == "skills")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        skills["projected"]["sources"][0]["configMap"]["items"][0],
        json!({"key": "google-workspace.md", "path": "google-workspace/SKILL.md"}),
        "pod: {pod}"
    );

    // A time zone the API server accepts (it has no tz database) but no zone
    // database knows: the operator refuses it, naming the field, on the status
    // and in a Warning Event.
    merge_patch(
        &scenario.bot.bots(),
        BOT,
        json!({"spec": {"schedule": {"timeZone": "Europe/Atlantis"}}}),
    )
    .await?;
    wait_for_ready_reason(
        &scenario,
        "InvalidSpec",
        &["spec.schedule.timeZone", "Europe/Atlantis"],
    )
    .await?;
    wait_for_warning(&scenario, "InvalidSpec", "spec.schedule.timeZone").await?;
    merge_patch(
        &scenario.bot.bots(),
        BOT,
        json!({"spec": {"schedule": {"timeZone": "Europe/Zagreb"}}}),
    )
    .await?;
    scenario.converged().await?;

    // A skill naming a ConfigMap that does not exist yet: ConfigMapNotFound
    // naming the field; once the ConfigMap is created the operator's retry
    // (nothing watches ConfigMaps it does not own) renders the bot again.
    merge_patch(
        &scenario.bot.bots(),
        BOT,
        json!({"spec": {"skills": [
            {"name": "google-workspace", "configMapRef": {"name": "acme-assistant-more-skills"}},
        ]}}),
    )
    .await?;
    wait_for_ready_reason(
        &scenario,
        "ConfigMapNotFound",
        &["spec.skills[0].configMapRef", "acme-assistant-more-skills"],
    )
    .await?;
    wait_for_warning(
        &scenario,
        "ConfigMapNotFound",
        "spec.skills[0].configMapRef",
    )
    .await?;
    manifests::apply_all(&scenario.admin, MORE_SKILLS, &scenario.bot.namespace).await?;
    scenario.converged().await?;
    let deployment = serde_json::to_value(scenario.bot.deployment().await?)?;
    assert!(
        deployment
            .to_string()
            .contains("acme-assistant-more-skills"),
        "the new skill ConfigMap is projected: {deployment}"
    );
    scenario.finish().await
}

#[tokio::test]
async fn an_identifier_claimed_by_two_contacts_surfaces_a_condition_and_an_event_until_fixed()
-> TestResult {
    let scenario = Scenario::start("conflict").await?;
    scenario.converged().await?;
    let twin = r#"
apiVersion: saint.work/v1alpha1
kind: Contact
metadata:
  name: ana-twin
  labels: {saint.work/bot: acme-assistant}
spec:
  displayName: Ana's twin
  role: employee
  identifiers: {phone: "+385991234567"}
  bots: [acme-assistant]
"#;
    manifests::apply_all(&scenario.admin, twin, &scenario.bot.namespace).await?;

    let status = wait::until(
        "IdentitiesLinked=False/IdentifierConflict on the SaintBot",
        CONVERGE_TIMEOUT,
        || async {
            let bot = scenario
                .bot
                .bot()
                .await
                .map_err(|error| error.to_string())?;
            let status = bot.data.get("status").cloned().unwrap_or(Value::Null);
            if condition_state(&status, "IdentitiesLinked")
                == ("False".to_owned(), "IdentifierConflict".to_owned())
            {
                Ok(status)
            } else {
                Err(format!("status {status}\n{}", scenario.operator_log()))
            }
        },
    )
    .await?;
    let message = saint_e2e::company_bot::condition(&status, "IdentitiesLinked")
        .and_then(|condition| condition.get("message"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("+385991234567"),
        "condition message: {message}"
    );

    // Both Contacts report the clash; neither gets the identifier.
    for contact in ["ana", "ana-twin"] {
        wait::until(
            &format!("Contact {contact} reporting the conflict"),
            CONVERGE_TIMEOUT,
            || async {
                let object = scenario
                    .bot
                    .contacts()
                    .get(contact)
                    .await
                    .map_err(|error| error.to_string())?;
                let status = object.data.get("status").cloned().unwrap_or(Value::Null);
                let count = status
                    .get("conflictCount")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                if count >= 1 && condition_state(&status, "Ready").1 == "IdentifierConflict" {
                    Ok(())
                } else {
                    Err(format!("status {status}"))
                }
            },
        )
        .await?;
    }
    wait_for_identity(&scenario, "ana", "whatsapp:+385991234567", false).await?;
    let (_, config) = scenario.bot.rendered_config().await?;
    assert!(
        config
            .identity_links
            .get("ana-twin")
            .is_none_or(|identities| !identities
                .iter()
                .any(|item| item == "whatsapp:+385991234567")),
        "the contested number was linked to ana-twin: {:?}",
        config.identity_links
    );

    // A Warning Event about the SaintBot names the reason.
    let events = Api::<Event>::namespaced(scenario.admin.clone(), &scenario.bot.namespace);
    wait::until(
        "an IdentifierConflict Event about the SaintBot",
        CONVERGE_TIMEOUT,
        || async {
            let list = events
                .list(&ListParams::default())
                .await
                .map_err(|error| error.to_string())?;
            let found = list.items.iter().any(|event| {
                event.reason.as_deref() == Some("IdentifierConflict")
                    && event.involved_object.kind.as_deref() == Some("SaintBot")
                    && event.involved_object.name.as_deref() == Some(BOT)
            });
            if found {
                Ok(())
            } else {
                Err(format!(
                    "events: {:?}",
                    list.items
                        .iter()
                        .map(|event| (event.reason.clone(), event.involved_object.name.clone()))
                        .collect::<Vec<_>>()
                ))
            }
        },
    )
    .await?;

    // Fixing the twin's number clears the condition and both Contacts.
    merge_patch(
        &scenario.bot.contacts(),
        "ana-twin",
        json!({"spec": {"identifiers": {"phone": "+385991239999"}}}),
    )
    .await?;
    wait::until(
        "IdentitiesLinked=True after the fix",
        CONVERGE_TIMEOUT,
        || async {
            let bot = scenario
                .bot
                .bot()
                .await
                .map_err(|error| error.to_string())?;
            let status = bot.data.get("status").cloned().unwrap_or(Value::Null);
            if condition_state(&status, "IdentitiesLinked").0 == "True"
                && status.get("conflicts").and_then(Value::as_i64) == Some(0)
            {
                Ok(())
            } else {
                Err(format!("status {status}"))
            }
        },
    )
    .await?;
    for contact in ["ana", "ana-twin"] {
        wait::until(
            &format!("Contact {contact} clear of conflicts"),
            CONVERGE_TIMEOUT,
            || async {
                let object = scenario
                    .bot
                    .contacts()
                    .get(contact)
                    .await
                    .map_err(|error| error.to_string())?;
                let status = object.data.get("status").cloned().unwrap_or(Value::Null);
                if status.get("conflictCount").and_then(Value::as_i64) == Some(0)
                    && condition_state(&status, "Ready").0 == "True"
                {
                    Ok(())
                } else {
                    Err(format!("status {status}"))
                }
            },
        )
        .await?;
    }
    wait_for_identity(&scenario, "ana", "whatsapp:+385991234567", true).await?;
    scenario.finish().await
}

/// A sandbox Job built from the rendered template by the agent's own builder
/// (`saint_sandbox::kubernetes::build_job`), as the agent would create it, with
/// `view` at `/agent`.
fn sandbox_job(
    config: &saint_config::BotConfig,
    template: &Value,
    owner: &OwnerReference,
    suffix: &str,
    view: &View,
) -> Result<Job, Failure> {
    let scope = ScopeKey::for_caller(
        config.sandbox.scope,
        "http:e2e-session",
        &Viewer {
            role: "e2e",
            person: Some(suffix),
        },
    );
    let parameters = JobParameters {
        bot: BOT,
        scope: &scope,
        view,
        suffix,
        runner_token: "e2e-runner-token",
        seed: &[],
        runner_idle_timeout_seconds: 600,
        owner: Some(owner),
    };
    build_job(template, &parameters).map_err(Failure::from)
}

/// What a bot's agent creates sandbox Jobs with: the rendered config and its Job
/// template, a client acting as the agent's own ServiceAccount, and the SaintBot as
/// the Jobs' owner.
struct AgentSide {
    config: saint_config::BotConfig,
    template: Value,
    agent: kube::Client,
    owner: OwnerReference,
}

async fn agent_side(scenario: &Scenario) -> Result<AgentSide, Failure> {
    scenario.converged().await?;
    let (_, config) = scenario.bot.rendered_config().await?;
    let template = config
        .sandbox
        .job_template
        .clone()
        .ok_or_else(|| Failure::message("the rendered config has no sandbox.jobTemplate"))?;
    let agent_kubeconfig = service_account::kubeconfig(
        &scenario.environment,
        &scenario.admin,
        &scenario.bot.namespace,
        &format!("{BOT}-agent"),
    )
    .await?;
    let agent = client_from_kubeconfig(&agent_kubeconfig).await?;
    let bot_object = scenario.bot.bot().await?;
    let owner = OwnerReference {
        api_version: "saint.work/v1alpha1".to_owned(),
        kind: "SaintBot".to_owned(),
        name: BOT.to_owned(),
        uid: bot_object.metadata.uid.clone().unwrap_or_default(),
        ..OwnerReference::default()
    };
    Ok(AgentSide {
        config,
        template,
        agent,
        owner,
    })
}

/// A workspace laid out like the example company's: bootstrap files, shared, private,
/// daily and per-person memory, data, skills and the runtime state.
fn company_workspace() -> Result<tempfile::TempDir, Failure> {
    let workspace = tempfile::tempdir()?;
    let files = [
        "SOUL.md",
        "IDENTITY.md",
        "AGENTS.md",
        "COMPANY.md",
        "TOOLS.md",
        "memory/shared/facts.md",
        "memory/shared/deep/more.md",
        "memory/private/finance.md",
        "memory/daily/2026-11-23.md",
        "memory/users/ana/secret.md",
        "memory/users/ivan/notes.md",
        "memory/users/marko/todo.md",
        "data/report.csv",
        "skills/github/SKILL.md",
        ".saint/memory/index.sqlite",
        ".saint/run/porter/proxy.sock",
        "sessions/transcripts.sqlite3",
        "logs/usage.jsonl",
        "config/bot-config.json",
    ];
    for file in files {
        let path = workspace.path().join(file);
        std::fs::create_dir_all(path.parent().expect("a parent"))?;
        std::fs::write(path, file)?;
    }
    Ok(workspace)
}

/// Every file below `root`, workspace-relative.
fn files_below(root: &std::path::Path, relative: &str, out: &mut BTreeSet<String>) {
    let path = root.join(relative);
    if path.is_file() {
        out.insert(relative.to_owned());
        return;
    }
    for entry in std::fs::read_dir(&path).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let child = if relative.is_empty() {
            name
        } else {
            format!("{relative}/{name}")
        };
        files_below(root, &child, out);
    }
}

fn role_rules(
    config: &saint_config::BotConfig,
    role: &str,
    slug: &str,
) -> Result<RolePaths, Failure> {
    let role_config = config
        .roles
        .get(role)
        .ok_or_else(|| Failure::message(format!("the rendered config has no role {role}")))?;
    RolePaths::new(role_config, &config.file_access, slug)
        .map_err(|error| Failure::message(error.to_string()))
}

fn role_view(
    config: &saint_config::BotConfig,
    workspace: &std::path::Path,
    role: &str,
    slug: &str,
) -> Result<View, Failure> {
    let rules = role_rules(config, role, slug)?;
    caller_view::compute(workspace, &rules).map_err(|error| Failure::message(error.to_string()))
}

/// For each role of the example company (and a stranger), the Job the agent builds is
/// admitted, and walking what its workspace mounts show at `/agent` gives exactly the
/// files that role's `read` tool allows: nothing forbidden visible, nothing permitted
/// missing, never runtime state.
#[tokio::test]
async fn each_roles_sandbox_job_mounts_exactly_what_the_role_may_read() -> TestResult {
    let scenario = Scenario::start("sandbox-view").await?;
    let AgentSide {
        config,
        template,
        agent,
        owner,
    } = agent_side(&scenario).await?;
    let jobs = Api::<Job>::namespaced(agent, &scenario.bot.namespace);
    let workspace = company_workspace()?;
    let mut all_files = BTreeSet::new();
    files_below(workspace.path(), "", &mut all_files);

    let mut callers: Vec<(String, String)> = config
        .contacts
        .iter()
        .map(|contact| (contact.role.clone(), contact.slug.to_string()))
        .collect();
    callers.push((config.default_role.clone(), "stranger".to_owned()));
    let roles: BTreeSet<&str> = callers.iter().map(|(role, _)| role.as_str()).collect();
    for expected in ["owner", "manager", "employee", "external"] {
        if !roles.contains(expected) {
            return Err(Failure::message(format!(
                "the example company has no caller with role {expected}: {callers:?}"
            )));
        }
    }
    let mut problems = Vec::new();
    for (index, (role, slug)) in callers.iter().enumerate() {
        let rules = role_rules(&config, role, slug)?;
        let caller_view = role_view(&config, workspace.path(), role, slug)?;
        let job = sandbox_job(
            &config,
            &template,
            &owner,
            &format!("view{index}"),
            &caller_view,
        )?;
        // What the mounts show: each workspace mount at /agent/<p> with subPath <p>.
        let mut visible = BTreeSet::new();
        let pod = job
            .spec
            .as_ref()
            .and_then(|spec| spec.template.spec.as_ref())
            .ok_or_else(|| Failure::message("the built Job has no pod spec"))?;
        for mount in pod
            .containers
            .iter()
            .flat_map(|container| container.volume_mounts.iter().flatten())
            .filter(|mount| mount.name == "agent-workspace")
        {
            let sub_path = mount.sub_path.clone().unwrap_or_default();
            if let Some(inside) = mount.mount_path.strip_prefix("/agent/") {
                if inside != sub_path || mount.read_only != Some(true) {
                    problems.push(format!("{role}/{slug}: odd view mount {mount:?}"));
                }
                files_below(workspace.path(), &sub_path, &mut visible);
            } else if mount.mount_path == "/agent" {
                problems.push(format!(
                    "{role}/{slug}: a mount at /agent itself: {mount:?}"
                ));
            }
        }
        let readable: BTreeSet<String> = all_files
            .iter()
            .filter(|file| rules.check_read(file).is_ok())
            .cloned()
            .collect();
        let shown_not_readable: Vec<_> = visible.difference(&readable).collect();
        let readable_not_shown: Vec<_> = readable.difference(&visible).collect();
        if !shown_not_readable.is_empty() || !readable_not_shown.is_empty() {
            problems.push(format!(
                "{role}/{slug}: shown but refused by read: {shown_not_readable:?}; \
                 readable but not shown: {readable_not_shown:?}"
            ));
        }
        for private in [".saint/", "sessions/", "logs/", "config/"] {
            if visible.iter().any(|file| file.starts_with(private)) {
                problems.push(format!("{role}/{slug}: runtime state {private} is visible"));
            }
        }
        println!(
            "{role}/{slug}: /agent shows {caller_view} ({} files)",
            visible.len()
        );
        if let Err(error) = jobs.create(&PostParams::default(), &job).await {
            problems.push(format!(
                "{role}/{slug}: the Job with the caller's view was refused: {}",
                saint_e2e::api_message(&error)
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    scenario.finish().await
}

/// A channel token the platform refuses reaches `kubectl describe sbot`: the agent,
/// acting as its own ServiceAccount under the operator's Role, puts a Warning Event on
/// the SaintBot whose uid the operator passed in the Deployment.
#[tokio::test]
async fn a_refused_channel_credential_becomes_a_warning_event_on_the_saintbot() -> TestResult {
    let scenario = Scenario::start("events").await?;
    let AgentSide { agent, owner, .. } = agent_side(&scenario).await?;
    let deployment = scenario.bot.deployment().await?;
    let uid = deployment
        .spec
        .and_then(|spec| spec.template.spec)
        .and_then(|pod| {
            pod.containers
                .into_iter()
                .find(|container| container.name == "agent")
        })
        .and_then(|agent| agent.env)
        .and_then(|env| {
            env.into_iter()
                .find(|var| var.name == saint_config::BOT_UID_ENV)
        })
        .and_then(|var| var.value)
        .ok_or_else(|| Failure::message("the agent container has no SAINT_BOT_UID"))?;
    if uid != owner.uid {
        return Err(Failure::message(format!(
            "SAINT_BOT_UID is {uid}, the SaintBot's uid is {}",
            owner.uid
        )));
    }
    let events =
        saint_agent::channel::events::ChannelEvents::new(agent, BOT, &scenario.bot.namespace, &uid);
    events
        .credentials_refused(
            "whatsapp",
            "whatsapp: Invalid OAuth access token (HTTP 401, code 190)",
        )
        .await
        .map_err(|error| {
            Failure::message(format!(
                "the agent's account could not publish the Event: {}",
                saint_e2e::api_message(&error)
            ))
        })?;
    // What `kubectl describe sbot` lists: core Events whose involvedObject is the bot.
    wait::until("the Warning Event on the SaintBot", CONVERGE_TIMEOUT, || async {
        let listed = Api::<Event>::namespaced(scenario.admin.clone(), &scenario.bot.namespace)
            .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
            .await
            .map_err(|error| error.to_string())?;
        let found = listed.items.iter().any(|event| {
            event.type_.as_deref() == Some("Warning")
                && event.reason.as_deref() == Some("ChannelCredentialsRefused")
                && event.involved_object.kind.as_deref() == Some("SaintBot")
                && event.message.as_deref()
                    == Some("channel whatsapp: whatsapp: Invalid OAuth access token (HTTP 401, code 190)")
        });
        if found {
            Ok(())
        } else {
            Err(format!(
                "events on the bot: {:?}",
                listed
                    .items
                    .iter()
                    .map(|event| (event.reason.clone(), event.message.clone()))
                    .collect::<Vec<_>>()
            ))
        }
    })
    .await?;
    scenario.finish().await
}

/// `ModelAvailable`'s state, reason and message once its state and reason are
/// `state` and its message names `needle`.
async fn wait_for_model_available(
    scenario: &Scenario,
    state: (&str, &str),
    needle: &str,
) -> Result<String, wait::WaitError> {
    wait::until(
        &format!("ModelAvailable={}/{} naming {needle:?}", state.0, state.1),
        CONVERGE_TIMEOUT,
        || async {
            let object = scenario
                .bot
                .bot()
                .await
                .map_err(|error| error.to_string())?;
            let status = object.data.get("status").cloned().unwrap_or(Value::Null);
            let message = company_bot::condition(&status, "ModelAvailable")
                .and_then(|condition| condition.get("message"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            if condition_state(&status, "ModelAvailable")
                == (state.0.to_owned(), state.1.to_owned())
                && message.contains(needle)
            {
                Ok(message)
            } else {
                Err(format!("status {status}\n{}", scenario.operator_log()))
            }
        },
    )
    .await
}

/// A model chain failing on every entry reaches the SaintBot: the agent, as its own
/// ServiceAccount, publishes `ModelChainFailing` naming its pod; the operator, watching
/// the agents' Events with the chart's RBAC, turns `ModelAvailable` False with the
/// agent's words while that pod's agent runs, True again on `ModelChainRecovered`.
#[tokio::test]
async fn a_model_chain_failing_on_every_entry_turns_model_available_false_until_it_recovers()
-> TestResult {
    let scenario = Scenario::start("chain").await?;
    let AgentSide { agent, owner, .. } = agent_side(&scenario).await?;
    wait_for_model_available(&scenario, ("True", "NoChainFailure"), "has not reported").await?;
    // No kubelet here: the bot pod is stored, never run. Its agent container is said
    // to run, as a kubelet would say it.
    let pods = Api::<Pod>::namespaced(scenario.admin.clone(), &scenario.bot.namespace);
    let selector = format!("app.kubernetes.io/instance={BOT},app.kubernetes.io/component=agent");
    let pod = wait::until("the bot pod", CONVERGE_TIMEOUT, || async {
        pods.list(&ListParams::default().labels(&selector))
            .await
            .map_err(|error| error.to_string())?
            .items
            .into_iter()
            .find_map(|pod| pod.metadata.name)
            .ok_or_else(|| "no bot pod yet".to_owned())
    })
    .await?;
    pods.patch_status(
        &pod,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"containerStatuses": [{"name": "agent",
            "image": "saint-agent", "imageID": "", "ready": true, "restartCount": 0,
            "state": {"running": {"startedAt": "2020-01-01T00:00:00Z"}}}]}})),
    )
    .await?;
    let events = saint_agent::channel::events::ChannelEvents::reporting_as(
        agent,
        BOT,
        &scenario.bot.namespace,
        &owner.uid,
        Some(pod.clone()),
    );
    let note = "every model of the failover chain failed a call: \
                primary claude-sonnet-4-5 (unauthorized), fallback-1 gpt-4.1 (overloaded)";
    saint_agent::runtime::ChainReport::Failing(note.to_owned())
        .publish(&events)
        .await
        .map_err(|error| Failure::message(saint_e2e::api_message(&error)))?;
    let message = wait_for_model_available(&scenario, ("False", "ChainFailing"), note).await?;
    assert!(message.contains(&pod), "{message}");
    // Ready stays the pod's business.
    let status = scenario.bot.bot().await?.data["status"].clone();
    assert_ne!(condition_state(&status, "Ready").1, "ChainFailing");

    saint_agent::runtime::ChainReport::Recovered("fallback-1 gpt-4.1 answers again".to_owned())
        .publish(&events)
        .await
        .map_err(|error| Failure::message(saint_e2e::api_message(&error)))?;
    wait_for_model_available(
        &scenario,
        ("True", "NoChainFailure"),
        "fallback-1 gpt-4.1 answers again",
    )
    .await?;
    scenario.finish().await
}

#[tokio::test]
async fn sandbox_jobs_from_the_agent_account_are_admitted_only_as_the_rendered_template()
-> TestResult {
    let scenario = Scenario::start("sandbox").await?;
    // Act as the agent: a token of the bot's own ServiceAccount.
    let AgentSide {
        config,
        template,
        agent,
        owner,
    } = agent_side(&scenario).await?;
    let jobs = Api::<Job>::namespaced(agent.clone(), &scenario.bot.namespace);

    // The template as rendered: admitted by RBAC, the admission policy and Pod Security.
    let workspace = company_workspace()?;
    let employee = config
        .contacts
        .iter()
        .find(|contact| contact.role == "employee")
        .ok_or_else(|| Failure::message("the example company has no employee"))?;
    let employee_view = role_view(
        &config,
        workspace.path(),
        &employee.role,
        employee.slug.as_ref(),
    )?;
    let job = sandbox_job(&config, &template, &owner, "e2eok", &employee_view)?;
    let job_name = job.metadata.name.clone().unwrap_or_default();
    jobs.create(&PostParams::default(), &job)
        .await
        .map_err(|error| {
            Failure::message(format!(
                "the rendered sandbox Job was refused: {}",
                saint_e2e::api_message(&error)
            ))
        })?;
    wait::until(
        "the sandbox Job's pod admitted under Pod Security restricted",
        CONVERGE_TIMEOUT,
        || async {
            let pods = Api::<Pod>::namespaced(scenario.admin.clone(), &scenario.bot.namespace)
                .list(&ListParams::default().labels(&format!("job-name={job_name}")))
                .await
                .map_err(|error| error.to_string())?;
            if !pods.items.is_empty() {
                return Ok(());
            }
            let events = Api::<Event>::namespaced(scenario.admin.clone(), &scenario.bot.namespace)
                .list(&ListParams::default())
                .await
                .map_err(|error| error.to_string())?;
            Err(format!(
                    "no pod; Job events: {:?}",
                    events
                        .items
                        .iter()
                        .filter(|event| event.involved_object.name.as_deref()
                            == Some(job_name.as_str()))
                        .map(|event| (event.reason.clone(), event.message.clone()))
                        .collect::<Vec<_>>()
                ))
        },
    )
    .await?;

    // One deviation each: refused by the admission policy, in its own words.
    let mut with_secret = serde_json::to_value(sandbox_job(
        &config,
        &template,
        &owner,
        "e2esecret",
        &employee_view,
    )?)?;
    let volumes = with_secret["spec"]["template"]["spec"]["volumes"]
        .as_array_mut()
        .ok_or_else(|| Failure::message("the sandbox template has no volumes list"))?;
    volumes.push(json!({"name": "stolen", "secret": {"secretName": "acme-assistant-llm"}}));
    let mut with_image = serde_json::to_value(sandbox_job(
        &config,
        &template,
        &owner,
        "e2eimage",
        &employee_view,
    )?)?;
    with_image["spec"]["template"]["spec"]["containers"][0]["image"] =
        json!("docker.io/library/busybox:latest");
    // The old layout: the whole workspace, read-only, at /agent.
    let mut whole = serde_json::to_value(sandbox_job(
        &config,
        &template,
        &owner,
        "e2ewhole",
        &employee_view,
    )?)?;
    whole["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        .as_array_mut()
        .ok_or_else(|| Failure::message("the sandbox container has no volumeMounts"))?
        .push(json!({"name": "agent-workspace", "mountPath": "/agent", "readOnly": true}));
    // A view mount of runtime state: the sessions database.
    let mut sessions = serde_json::to_value(sandbox_job(
        &config,
        &template,
        &owner,
        "e2esessions",
        &employee_view,
    )?)?;
    sessions["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        .as_array_mut()
        .ok_or_else(|| Failure::message("the sandbox container has no volumeMounts"))?
        .push(json!({"name": "agent-workspace", "mountPath": "/agent/sessions", "subPath": "sessions", "readOnly": true}));
    let deviations = [
        ("a Secret volume", with_secret, "no-secret-volumes"),
        ("another image", with_image, "sandbox-image"),
        ("the whole workspace at /agent", whole, "workspace-view"),
        (
            "the sessions directory at /agent/sessions",
            sessions,
            "workspace-view",
        ),
    ];
    let mut problems = Vec::new();
    for (what, job, rule) in deviations {
        let job: Job = serde_json::from_value(job)?;
        match jobs.create(&PostParams::default(), &job).await {
            Ok(_) => problems.push(format!("a sandbox Job with {what} was admitted")),
            Err(error) => {
                let message = saint_e2e::api_message(&error);
                println!("refused ({what}): {message}");
                if !message.contains(rule) {
                    problems.push(format!(
                        "a sandbox Job with {what} was refused without naming [{rule}]: {message}"
                    ));
                }
            }
        }
    }
    // The agent's account never reads Secrets.
    match Api::<Secret>::namespaced(agent, &scenario.bot.namespace)
        .get("acme-assistant-llm")
        .await
    {
        Ok(_) => problems.push("the agent's ServiceAccount read a Secret".to_owned()),
        Err(error) => {
            let message = saint_e2e::api_message(&error);
            if !message.contains("forbidden") {
                problems.push(format!(
                    "reading a Secret as the agent failed oddly: {message}"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    scenario.finish().await
}

#[tokio::test]
async fn deleting_the_saintbot_garbage_collects_every_child() -> TestResult {
    let scenario = Scenario::start("deletion").await?;
    scenario.converged().await?;
    wait::until("the bot pod", CONVERGE_TIMEOUT, || async {
        let pods = scenario
            .bot
            .pods()
            .await
            .map_err(|error| error.to_string())?;
        if pods.is_empty() {
            Err("no pods".to_owned())
        } else {
            Ok(())
        }
    })
    .await?;
    let before = labelled_children(&scenario.admin, &scenario.bot.namespace).await?;
    assert!(
        before.len() >= child_kinds().len(),
        "children before deletion: {}",
        before.len()
    );

    scenario
        .bot
        .bots()
        .delete(BOT, &DeleteParams::background())
        .await?;
    wait::until(
        "every child of the SaintBot garbage-collected",
        CONVERGE_TIMEOUT,
        || async {
            let mut left: Vec<String> = labelled_children(&scenario.admin, &scenario.bot.namespace)
                .await
                .map_err(|error| error.to_string())?
                .into_iter()
                .map(|(kind, object)| {
                    format!("{kind}/{}", object.metadata.name.unwrap_or_default())
                })
                .collect();
            for pod in scenario
                .bot
                .pods()
                .await
                .map_err(|error| error.to_string())?
            {
                left.push(format!("Pod/{}", pod.metadata.name.unwrap_or_default()));
            }
            for hash in scenario
                .bot
                .pod_template_hashes()
                .await
                .map_err(|error| error.to_string())?
            {
                left.push(format!("ReplicaSet with pod-template-hash {hash}"));
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("still present: {left:?}"))
            }
        },
    )
    .await?;
    scenario.finish().await
}

#[tokio::test]
async fn an_operator_killed_mid_reconcile_converges_after_restart() -> TestResult {
    let environment = Environment::from_env()?;
    let admin = environment.admin_client().await?;
    let install = chart::install(&environment, &admin, "restart", &[]).await?;
    let bot = CompanyBot::apply(&environment, &admin, "restart-bot").await?;
    // Watch before starting, so the kill lands the moment the first child is
    // written — while the rest of the reconcile is still in flight.
    let config_maps =
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(admin.clone(), &bot.namespace);
    let mut events = config_maps
        .watch(&WatchParams::default(), "0")
        .await?
        .boxed();
    let mut first = install.start_operator(&environment, "restart-0")?;
    let first_child = tokio::time::timeout(CONVERGE_TIMEOUT, async {
        while let Some(event) = events.try_next().await.map_err(|error| error.to_string())? {
            if let WatchEvent::Added(config_map) = event
                && config_map.metadata.name.as_deref() == Some(&format!("{BOT}-config"))
            {
                return Ok(());
            }
        }
        Err("the ConfigMap watch ended".to_owned())
    })
    .await;
    first.process.kill();
    if let Err(problem) = first_child
        .map_err(|_| "timed out".to_owned())
        .and_then(|result| result)
    {
        return Err(Failure::message(format!(
            "the operator never wrote the rendered ConfigMap ({problem}):\n{}",
            first.process.log_tail(40)
        )));
    }
    let children_at_kill = labelled_children(&admin, &bot.namespace).await?.len();
    let status_at_kill = bot.bot().await?.data.get("status").cloned();
    println!(
        "killed the operator with {children_at_kill} children written; status then: {status_at_kill:?}"
    );
    assert!(
        status_at_kill.is_none() || children_at_kill < child_kinds().len(),
        "the reconcile had already finished when the operator was killed; the scenario proves nothing"
    );

    // The same pod identity comes back (as a restarted container would).
    let second = install.start_operator(&environment, "restart-0")?;
    let status = bot.wait_converged(|| second.process.log_tail(40)).await?;
    let children = labelled_children(&admin, &bot.namespace).await?;
    let kinds: BTreeSet<String> = children.iter().map(|(kind, _)| kind.clone()).collect();
    let expected: BTreeSet<String> = child_kinds()
        .into_iter()
        .map(|(resource, _)| resource.kind)
        .collect();
    assert_eq!(kinds, expected, "child kinds after the restart");
    let (text, _) = bot.rendered_config().await?;
    let config_map = config_maps.get(&format!("{BOT}-config")).await?;
    let annotated = config_map
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get("saint.work/config-hash"))
        .cloned();
    assert_eq!(
        status
            .get("configHash")
            .and_then(Value::as_str)
            .map(str::to_owned),
        annotated,
        "status.configHash and the ConfigMap disagree"
    );

    // Converged means stable: another restart changes nothing.
    let deployment_before = bot.deployment().await?;
    no_forbidden(&first.process.log())?;
    no_forbidden(&second.process.log())?;
    drop(second);
    let third = install.start_operator(&environment, "restart-0")?;
    bot.wait_converged(|| third.process.log_tail(40)).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (text_after, _) = bot.rendered_config().await?;
    assert_eq!(
        text_after, text,
        "the rendered config changed on a plain restart"
    );
    assert_eq!(
        bot.deployment().await?.metadata.generation,
        deployment_before.metadata.generation,
        "the Deployment changed on a plain restart"
    );
    no_forbidden(&third.process.log())?;
    namespace::delete(&admin, &bot.namespace).await?;
    Ok(())
}

/// Sum of the `reconciles_total` samples in Prometheus text (0 when absent).
fn reconciles(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            name.ends_with("reconciles_total")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn lease_holder(admin: &Client, namespace: &str) -> Result<String, String> {
    let lease = Api::<Lease>::namespaced(admin.clone(), namespace)
        .get("saint-operator")
        .await
        .map_err(|error| saint_e2e::api_message(&error))?;
    lease
        .spec
        .and_then(|spec| spec.holder_identity)
        .filter(|holder| !holder.is_empty())
        .ok_or_else(|| "the Lease has no holder".to_owned())
}

#[tokio::test]
async fn of_two_operator_replicas_only_the_leader_reconciles() -> TestResult {
    let environment = Environment::from_env()?;
    let admin = environment.admin_client().await?;
    let install = chart::install(&environment, &admin, "leader", &["replicaCount=2"]).await?;
    let mut replicas = [
        install.start_operator(&environment, "leader-a")?,
        install.start_operator(&environment, "leader-b")?,
    ];
    let holder = wait::until("a Lease holder", CONVERGE_TIMEOUT, || async {
        lease_holder(&admin, &install.namespace).await
    })
    .await?;
    let bot = CompanyBot::apply(&environment, &admin, "leader-bot").await?;
    bot.wait_converged(|| {
        replicas
            .iter()
            .map(|replica| format!("{}:\n{}", replica.identity, replica.process.log_tail(20)))
            .collect::<Vec<_>>()
            .join("\n")
    })
    .await?;

    let leader_index = replicas
        .iter()
        .position(|replica| replica.identity == holder)
        .ok_or_else(|| Failure::message(format!("the Lease holder {holder} is neither replica")))?;
    let follower_index = 1 - leader_index;
    let leader_metrics = replicas[leader_index]
        .metrics()
        .await
        .map_err(Failure::message)?;
    let follower_metrics = replicas[follower_index]
        .metrics()
        .await
        .map_err(Failure::message)?;
    assert!(
        reconciles(&leader_metrics) > 0.0,
        "the leader {holder} reports no reconciles:\n{leader_metrics}"
    );
    assert_eq!(
        reconciles(&follower_metrics),
        0.0,
        "the follower {} reconciled while not holding the Lease:\n{follower_metrics}",
        replicas[follower_index].identity
    );

    // The leader dies: the follower takes the Lease and reconciles a change.
    let follower_identity = replicas[follower_index].identity.clone();
    replicas[leader_index].process.kill();
    merge_patch(
        &bot.contacts(),
        "marko",
        json!({"spec": {"identifiers": {"phone": "+385991112222"}}}),
    )
    .await?;
    wait::until(
        "the follower holding the Lease",
        Duration::from_secs(90),
        || async {
            let holder = lease_holder(&admin, &install.namespace).await?;
            if holder == follower_identity {
                Ok(())
            } else {
                Err(format!("holder {holder}"))
            }
        },
    )
    .await?;
    wait::until(
        "the new leader re-rendering marko's phone",
        CONVERGE_TIMEOUT,
        || async {
            let (_, config) = bot
                .rendered_config()
                .await
                .map_err(|error| error.to_string())?;
            let linked = config
                .identity_links
                .get("marko")
                .is_some_and(|identities| {
                    identities
                        .iter()
                        .any(|item| item == "whatsapp:+385991112222")
                });
            if linked {
                Ok(())
            } else {
                Err(format!(
                    "identityLinks = {:?}\n{}",
                    config.identity_links,
                    replicas[follower_index].process.log_tail(20)
                ))
            }
        },
    )
    .await?;
    for replica in &replicas {
        no_forbidden(&replica.process.log())?;
    }
    namespace::delete(&admin, &bot.namespace).await?;
    Ok(())
}
