//! Reconcile against an API stand-in (`tower_test::mock`): named scenarios prove the
//! exact requests — reads, server-side applies in order, repairs, status patches, Events
//! — that one reconcile of the example bot issues, with the operator's caches filled as
//! a watch would have filled them. Contacts and Roles are never read from the API server,
//! and a child the cache shows as current is never written. The real API server comes
//! in `e2e/`.

mod support;

use std::{collections::BTreeMap, sync::Arc};

use http::Method;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::{
    api::networking::v1::Ingress,
    apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry},
};
use kube::{Client, runtime::controller::Action};
use saint_operator::events::Publisher;
use saint_operator::{
    cache::{
        self, Sources,
        chain_reports::ChainReports,
        child_state::{
            content::Content,
            freshness::{self, DESIRED_HASH_ANNOTATION, desired_hash},
        },
        children::ChildStore,
    },
    crd::{Contact, SaintBot},
    metrics::Metrics,
    saintbot_controller::{
        Context, RESYNC_INTERVAL, ReconcileError, backoff,
        build::{Children, build_children, config_map::config_hash},
        error_policy, model_chain, reconcile,
        secrets::secret_uses,
        update_status::{Outcome, bot_status},
    },
};
use serde_json::{Value, json};
use support::{
    load, no_children, settings, sources,
    stand_in::{
        Expect, condition, expect, object_event_expectation, status_expectation, to_value,
        with_stand_in,
    },
    validated,
};

/// Scenarios, named after what they prove.
enum Scenario {
    /// First reconcile of the example bot: reads, ten applies in order, status, Events
    /// for PodNotReady and ConfigRendered. (Contact and Role statuses are the references
    /// controller's: `tests/references.rs`.)
    FirstReconcileAppliesEveryChild,
    /// Two Contacts claim one phone: the bot reports IdentifierConflict and a Warning
    /// Event is published (the Contacts' own status: `tests/references.rs`).
    ConflictingContactsAreReported,
    /// The default role is missing: nothing is applied, status says RoleNotFound.
    MissingDefaultRoleWaits,
    /// A skill's ConfigMap does not exist (yet): nothing is applied, status says
    /// ConfigMapNotFound naming the field, and the error is retried with backoff (no
    /// watch would wake the bot when the ConfigMap arrives).
    MissingSkillConfigMapIsRetried,
    /// The API server refuses the first apply: reconcile stops there, no status is
    /// written, and one Warning Event named after the error variant is published.
    ApplyFailureStopsAndWarns,
    /// The same refusal on the retry, with the first round's status stored: the same
    /// reads and apply, no status write and no second Event.
    ApplyFailureRetriedQuietly,
    /// Every child in the cache as built, nobody else's fields, the pod ready, the status
    /// stored: only the ConfigMap reads, no write at all.
    UnchangedReadyBotWritesNothing,
    /// Someone added an egress rule to the sandbox NetworkPolicy by hand: that policy is
    /// replaced whole (managed fields reset, at the cached resourceVersion) and applied
    /// again; every other child is current and untouched.
    DriftedPolicyIsReplaced,
    /// A Secret the pod needs does not exist: children applied, status
    /// SecretMissing naming it and what needs it, retried with backoff.
    MissingSecretIsReported,
    /// A Secret the pod needs exists without a key it names: status SecretMissing
    /// naming the key and what needs it (and `Stalled`), retried with backoff.
    MissingSecretKeyIsReported,
    /// Every child current, but the Deployment says its ReplicaSet cannot create the pod
    /// (a LimitRange refuses it): no write but status, whose `Ready` and `Stalled` quote
    /// the refusal.
    RefusedPodIsReported,
    /// `spec.webhookIngress` removed: after the children, the bot's labelled Ingresses
    /// are listed and only the one it controls is deleted, with its uid as precondition.
    RemovedWebhookIngressIsDeleted,
}

/// The fixture bot's uid (tests/fixtures/acme.yaml).
const BOT_UID: &str = "0b5e7a8c-1111-4222-8333-944455556666";

fn ingress(name: &str, controller_uid: &str, uid: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {
            "name": name, "namespace": "acme", "uid": uid,
            "labels": {"app.kubernetes.io/instance": "my-bot", "app.kubernetes.io/component": "webhooks"},
            "ownerReferences": [{
                "apiVersion": "saint.work/v1alpha1", "kind": "SaintBot", "name": "my-bot",
                "uid": controller_uid, "controller": true,
            }],
        },
        "spec": {},
    })
}

/// `built` as the operator writes it: stamped with the hash of what the builder made.
fn stamped<K: serde::Serialize>(built: &K) -> Value {
    let mut stamped = to_value(built);
    stamped["metadata"]["annotations"][DESIRED_HASH_ANNOTATION] = json!(desired_hash(built));
    stamped
}

fn apply_expectation<K: serde::Serialize>(
    path: &str,
    built: &K,
    extra_status: Option<Value>,
) -> Expect {
    let expected = stamped(built);
    expect(Method::PATCH, path, move |body| {
        pretty_assertions::assert_eq!(body, expected, "applied object differs from the builder's");
        let mut stored = body;
        if let Some(status) = extra_status {
            stored["status"] = status;
        }
        stored
    })
}

fn event_expectation(reason: &'static str, type_: &'static str) -> Expect {
    object_event_expectation("my-bot", reason, type_)
}

fn children_of(bot: &SaintBot, contacts: &[Contact]) -> Children {
    let (_, mut dereferenced) = load("acme.yaml");
    dereferenced.contacts = contacts.to_vec();
    let validated =
        saint_operator::saintbot_controller::validate::validate(bot, &dereferenced, &settings())
            .unwrap();
    build_children(&validated)
}

/// The GET of each Secret the pod needs; `missing` ones are answered 404, the others
/// with every key the pod names (but `missing_keys`).
fn secret_reads(children: &Children, missing: &[&str]) -> Vec<Expect> {
    secret_reads_without(children, missing, &[])
}

fn secret_reads_without(
    children: &Children,
    missing: &[&str],
    missing_keys: &[&str],
) -> Vec<Expect> {
    let mut reads: Vec<Expect> = secret_uses(&children.deployment)
        .into_iter()
        .map(|secret| {
            let name = secret.name;
            let data: serde_json::Map<String, Value> = secret
                .keys
                .iter()
                .filter(|(key, _)| !missing_keys.contains(&key.as_str()))
                .map(|(key, _)| (key.clone(), json!("c2VjcmV0")))
                .collect();
            let answer = if missing.contains(&name.as_str()) {
                not_found("secrets", &name)
            } else {
                json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": name, "namespace": "acme"}, "data": data})
            };
            expect(
                Method::GET,
                &format!("/api/v1/namespaces/acme/secrets/{name}"),
                move |_| answer,
            )
        })
        .collect();
    // Then the webhook Ingress's certificate, by metadata.
    reads.extend(tls_secret_name(children).map(|name| {
        let answer = if missing.contains(&name.as_str()) {
            not_found("secrets", &name)
        } else {
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                "metadata": {"name": name, "namespace": "acme"}})
        };
        expect(
            Method::GET,
            &format!("/api/v1/namespaces/acme/secrets/{name}"),
            move |_| answer,
        )
    }));
    reads
}

/// `spec.tls[0].secretName` of the webhook Ingress, when it names one.
fn tls_secret_name(children: &Children) -> Option<String> {
    children
        .webhook_ingress
        .as_ref()?
        .spec
        .as_ref()?
        .tls
        .as_ref()?
        .first()?
        .secret_name
        .clone()
}

/// The list of the bot's agent pods (none yet), read when its pod is not ready.
fn pod_list() -> Expect {
    expect(
        Method::GET,
        "/api/v1/namespaces/acme/pods",
        |_| json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": []}),
    )
}

fn not_found(resource: &str, name: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": format!("{resource} \"{name}\" not found"), "reason": "NotFound", "code": 404})
}

fn child_applies(bot: &SaintBot, contacts: &[Contact], deployment_status: Value) -> Vec<Expect> {
    let children = children_of(bot, contacts);
    let namespace = "/namespaces/acme";
    let mut applies = vec![
        apply_expectation(
            &format!("/api/v1{namespace}/serviceaccounts/my-bot-agent"),
            &children.service_account,
            None,
        ),
        apply_expectation(
            &format!("/apis/rbac.authorization.k8s.io/v1{namespace}/rolebindings/my-bot-agent"),
            &children.role_binding,
            None,
        ),
        apply_expectation(
            &format!("/api/v1{namespace}/configmaps/my-bot-persona"),
            &children.persona_config_map,
            None,
        ),
        apply_expectation(
            &format!("/api/v1{namespace}/configmaps/my-bot-config"),
            &children.config_map,
            None,
        ),
        apply_expectation(
            &format!("/api/v1{namespace}/persistentvolumeclaims/my-bot-workspace"),
            &children.workspace_claim,
            None,
        ),
        apply_expectation(
            &format!("/api/v1{namespace}/services/my-bot"),
            &children.service,
            None,
        ),
        apply_expectation(
            &format!("/apis/networking.k8s.io/v1{namespace}/networkpolicies/my-bot-sandbox"),
            &children.sandbox_network_policy,
            None,
        ),
        apply_expectation(
            &format!("/apis/networking.k8s.io/v1{namespace}/networkpolicies/my-bot-agent"),
            &children.agent_network_policy,
            None,
        ),
        apply_expectation(
            &format!("/apis/apps/v1{namespace}/deployments/my-bot"),
            &children.deployment,
            Some(deployment_status),
        ),
    ];
    match &children.webhook_ingress {
        Some(webhooks) => applies.push(apply_expectation(
            &format!("/apis/networking.k8s.io/v1{namespace}/ingresses/my-bot-webhooks"),
            webhooks,
            None,
        )),
        None => {
            // Found in the cache (see `cached_ingresses`), not listed.
            applies.push(expect(
                Method::DELETE,
                &format!("/apis/networking.k8s.io/v1{namespace}/ingresses/my-bot-webhooks"),
                |body| {
                    assert_eq!(body["preconditions"]["uid"], "ingress-1", "{body}");
                    ingress("my-bot-webhooks", BOT_UID, "ingress-1")
                },
            ));
        }
    }
    applies
}

/// The reads of one reconcile: the ConfigMaps the bot names — persona first, then each
/// skill's — answered from `config_maps` (a name absent there is answered 404). Contacts
/// and Roles come from the caches.
fn reads(config_maps: &BTreeMap<String, Value>) -> Vec<Expect> {
    let mut steps = Vec::new();
    for name in ["acme-persona", "acme-skills", "acme-skill-google"] {
        let answer = config_maps
            .get(name)
            .cloned()
            .unwrap_or_else(|| not_found("configmaps", name));
        steps.push(expect(
            Method::GET,
            &format!("/api/v1/namespaces/acme/configmaps/{name}"),
            move |_| answer,
        ));
    }
    steps
}

fn ana_twin() -> Contact {
    serde_json::from_value(json!({
        "apiVersion": "saint.work/v1alpha1", "kind": "Contact",
        "metadata": {"name": "acme-twin", "namespace": "acme"},
        "spec": {"displayName": "Twin", "role": "employee", "identifiers": {"phone": "+385 99 123 4567"}},
    }))
    .unwrap()
}

/// What the operator's caches hold when a scenario starts.
struct Cached {
    sources: Sources,
    children: cache::Children,
}

impl Cached {
    /// The namespace's Contacts and Roles, and no child yet.
    fn first_time(contacts: &[Contact]) -> Self {
        let (_, dereferenced) = load("acme.yaml");
        Self {
            sources: sources(&[], contacts, &dereferenced.roles),
            children: no_children(),
        }
    }
}

/// A child as the API server stores it after the operator wrote `built`.
fn stored<K: Content + serde::Serialize>(built: &K) -> K {
    let mut stored = built.clone();
    let metadata = stored.meta_mut();
    freshness::stamp(metadata, &desired_hash(built));
    metadata.resource_version = Some("7".into());
    metadata.uid = Some(format!("uid-{}", metadata.name.clone().unwrap()));
    stored
}

/// A child as the API server holds it after the operator wrote `built` (and nobody
/// else touched it).
fn written<K: Content + serde::Serialize>(built: &K) -> K {
    stored(built)
}

/// Child caches holding every child of `children` as the operator wrote it, the
/// Deployment with `deployment_status`.
fn children_written(children: &Children, deployment_status: Value) -> cache::Children {
    let mut deployment = stored(&children.deployment);
    deployment.metadata.generation = Some(1);
    deployment.status = Some(serde_json::from_value(deployment_status).unwrap());

    cache::Children {
        service_accounts: ChildStore::holding(&[written(&children.service_account)]),
        role_bindings: ChildStore::holding(&[written(&children.role_binding)]),
        config_maps: ChildStore::holding(&[
            written(&children.persona_config_map),
            written(&children.config_map),
        ]),
        claims: ChildStore::holding(&[written(&children.workspace_claim)]),
        services: ChildStore::holding(&[written(&children.service)]),
        network_policies: ChildStore::holding(&[
            written(&children.sandbox_network_policy),
            written(&children.agent_network_policy),
        ]),
        ingresses: ChildStore::holding(
            &children
                .webhook_ingress
                .iter()
                .map(written)
                .collect::<Vec<_>>(),
        ),
        deployments: ChildStore::holding(&[deployment]),
        chain_reports: ChainReports::holding(&[]),
    }
}

/// Builds the expectations of a scenario, the bot it reconciles and the caches.
fn scenario(which: &Scenario) -> (SaintBot, Cached, Vec<Expect>) {
    let (mut bot, dereferenced) = load("acme.yaml");
    let persona: BTreeMap<String, Value> = dereferenced
        .config_maps
        .iter()
        .map(|(name, config_map)| (name.clone(), to_value(config_map)))
        .collect();
    let not_ready =
        json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 0});
    match which {
        Scenario::FirstReconcileAppliesEveryChild => {
            let hash = config_hash(&validated("acme.yaml"));
            let mut steps = reads(&persona);
            steps.extend(child_applies(&bot, &dereferenced.contacts, not_ready));
            steps.extend(secret_reads(
                &children_of(&bot, &dereferenced.contacts),
                &[],
            ));
            steps.push(pod_list());
            steps.push(status_expectation(
                "/apis/saint.work/v1alpha1/namespaces/acme/saintbots/my-bot/status",
                to_value(&bot),
                move |status| {
                    assert_eq!(status["observedGeneration"], 3);
                    assert_eq!(status["contacts"], 3);
                    assert_eq!(status["roles"], 4);
                    assert_eq!(status["conflicts"], 0);
                    assert_eq!(status["configHash"], hash);
                    assert_eq!(condition(status, "Ready")["status"], "False");
                    assert_eq!(condition(status, "Ready")["reason"], "PodNotReady");
                    // kstatus: InProgress, with Ready's reason; never Stalled.
                    let reconciling = condition(status, "Reconciling");
                    assert_eq!(reconciling["status"], "True");
                    assert_eq!(reconciling["reason"], "PodNotReady");
                    assert_eq!(reconciling["observedGeneration"], 3);
                    assert!(
                        status["conditions"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .all(|condition| condition["type"] != "Stalled"),
                        "{status}"
                    );
                    assert_eq!(condition(status, "ConfigRendered")["status"], "True");
                    assert_eq!(condition(status, "IdentitiesLinked")["reason"], "AllLinked");
                    assert_eq!(
                        condition(status, "Ready")["lastTransitionTime"],
                        "2026-11-22T01:00:00Z"
                    );
                },
            ));
            steps.push(event_expectation("PodNotReady", "Normal"));
            steps.push(event_expectation("ConfigRendered", "Normal"));
            (bot, Cached::first_time(&dereferenced.contacts), steps)
        }
        Scenario::ConflictingContactsAreReported => {
            let mut contacts = dereferenced.contacts.clone();
            contacts.push(ana_twin());
            let mut steps = reads(&persona);
            steps.extend(child_applies(&bot, &contacts, not_ready));
            steps.extend(secret_reads(&children_of(&bot, &contacts), &[]));
            steps.push(pod_list());
            steps.push(status_expectation(
                "/apis/saint.work/v1alpha1/namespaces/acme/saintbots/my-bot/status",
                to_value(&bot),
                |status| {
                    assert_eq!(status["contacts"], 4);
                    assert_eq!(status["conflicts"], 1);
                    let linked = condition(status, "IdentitiesLinked");
                    assert_eq!(linked["status"], "False");
                    assert_eq!(linked["reason"], "IdentifierConflict");
                    assert!(
                        linked["message"]
                            .as_str()
                            .unwrap()
                            .contains("whatsapp:+385991234567"),
                        "{linked}"
                    );
                },
            ));
            steps.push(event_expectation("PodNotReady", "Normal"));
            steps.push(event_expectation("IdentifierConflict", "Warning"));
            steps.push(event_expectation("ConfigRendered", "Normal"));
            (bot, Cached::first_time(&contacts), steps)
        }
        Scenario::RemovedWebhookIngressIsDeleted => {
            bot.spec.webhook_ingress = None;
            let mut steps = reads(&persona);
            steps.extend(child_applies(&bot, &dereferenced.contacts, not_ready));
            steps.extend(secret_reads(
                &children_of(&bot, &dereferenced.contacts),
                &[],
            ));
            steps.push(pod_list());
            steps.push(status_expectation(
                "/apis/saint.work/v1alpha1/namespaces/acme/saintbots/my-bot/status",
                to_value(&bot),
                |status| {
                    assert_eq!(
                        condition(status, "ChannelsServed")["reason"],
                        "AllChannelsServed"
                    );
                },
            ));
            steps.push(event_expectation("PodNotReady", "Normal"));
            steps.push(event_expectation("ConfigRendered", "Normal"));
            let mut cached = Cached::first_time(&dereferenced.contacts);
            cached.children.ingresses = ChildStore::holding(
                &[
                    ingress("my-bot-webhooks", BOT_UID, "ingress-1"),
                    // Same labels, another controller: never touched.
                    ingress("someone-elses", "another-uid", "ingress-2"),
                ]
                .map(|ingress| serde_json::from_value::<Ingress>(ingress).unwrap()),
            );
            (bot, cached, steps)
        }
        Scenario::ApplyFailureStopsAndWarns | Scenario::ApplyFailureRetriedQuietly => {
            let mut steps = reads(&persona);
            steps.push(expect(
                Method::PATCH,
                "/api/v1/namespaces/acme/serviceaccounts/my-bot-agent",
                |_| json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500}),
            ));
            if matches!(which, Scenario::ApplyFailureStopsAndWarns) {
                steps.push(status_expectation(
                    "/apis/saint.work/v1alpha1/namespaces/acme/saintbots/my-bot/status",
                    to_value(&bot),
                    |status| {
                        let ready = condition(status, "Ready");
                        assert_eq!(ready["status"], "False");
                        assert_eq!(ready["reason"], "ApplyFailed");
                        assert_eq!(
                            ready["message"],
                            "the API server refused ServiceAccount \"my-bot-agent\": \
                             etcdserver: request timed out"
                        );
                        assert_eq!(status["observedGeneration"], 3);
                    },
                ));
                steps.push(event_expectation("ApplyFailed", "Warning"));
            } else {
                bot.status = Some(bot_status(
                    &bot,
                    &Outcome::ApplyFailed {
                        message: "the API server refused ServiceAccount \"my-bot-agent\": \
                                  etcdserver: request timed out"
                            .into(),
                    },
                    &Time(NOW.parse().unwrap()),
                ));
            }
            (bot, Cached::first_time(&dereferenced.contacts), steps)
        }
        Scenario::UnchangedReadyBotWritesNothing => {
            let children = children_of(&bot, &dereferenced.contacts);
            let ready = json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1});
            let cached = Cached {
                sources: sources(&[], &dereferenced.contacts, &dereferenced.roles),
                children: children_written(&children, ready),
            };
            let validated = validated("acme.yaml");
            let deployment = children.deployment.metadata.name.as_deref().unwrap();
            let pod_ready = cached
                .children
                .deployments
                .get("acme", deployment)
                .unwrap()
                .pod_ready;
            assert!(pod_ready, "the scenario's Deployment has a ready pod");
            bot.status = Some(bot_status(
                &bot,
                &Outcome::Applied {
                    bot: &validated,
                    config_hash: config_hash(&validated),
                    pod_ready,
                    missing_secrets: None,
                    pod_problem: None,
                    // No report from the agent.
                    model_available: model_chain::model_available(
                        None,
                        bot.metadata.uid.as_deref().unwrap_or_default(),
                        None,
                        NOW.parse().unwrap(),
                    ),
                },
                &Time(NOW.parse().unwrap()),
            ));
            (bot, cached, reads(&persona))
        }
        Scenario::DriftedPolicyIsReplaced => {
            let children = children_of(&bot, &dereferenced.contacts);
            let mut cached = Cached {
                sources: sources(&[], &dereferenced.contacts, &dereferenced.roles),
                children: children_written(&children, not_ready),
            };
            let mut drifted = written(&children.sandbox_network_policy);
            drifted.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
                manager: Some("kubectl-edit".into()),
                operation: Some("Update".into()),
                fields_v1: Some(FieldsV1(json!({"f:spec": {"f:egress": {}}}))),
                ..ManagedFieldsEntry::default()
            }]);
            cached.children.network_policies =
                ChildStore::holding(&[drifted, written(&children.agent_network_policy)]);
            let path = "/apis/networking.k8s.io/v1/namespaces/acme/networkpolicies/my-bot-sandbox";
            let desired = stamped(&children.sandbox_network_policy);
            let mut steps = reads(&persona);
            steps.push(expect(Method::PUT, path, move |body| {
                assert_eq!(body["metadata"]["resourceVersion"], "7", "{body}");
                assert_eq!(body["metadata"]["managedFields"], json!([{}]), "{body}");
                assert_eq!(body["spec"], desired["spec"], "the policy as built, whole");
                assert!(
                    body["spec"]
                        .get("egress")
                        .is_none_or(|egress| egress != &json!([{}]))
                );
                body
            }));
            steps.push(apply_expectation(
                path,
                &children.sandbox_network_policy,
                None,
            ));
            steps.extend(secret_reads(&children, &[]));
            steps.push(pod_list());
            steps.push(status_expectation(
                "/apis/saint.work/v1alpha1/namespaces/acme/saintbots/my-bot/status",
                to_value(&bot),
                |status| assert_eq!(condition(status, "Ready")["reason"], "PodNotReady"),
            ));
            steps.push(event_expectation("PodNotReady", "Normal"));
            steps.push(event_expectation("ConfigRendered", "Normal"));
            (bot, cached, steps)
        }
        Scenario::MissingSecretIsReported => {
            let children = children_of(&bot, &dereferenced.contacts);
            let mut steps = reads(&persona);
            steps.extend(child_applies(&bot, &dereferenced.contacts, not_ready));
            steps.extend(secret_reads(&children, &["acme-github"]));
            steps.push(status_expectation(
                "/apis/saint.work/v1alpha1/namespaces/acme/saintbots/my-bot/status",
                to_value(&bot),
                |status| {
                    let ready = condition(status, "Ready");
                    assert_eq!(ready["status"], "False");
                    assert_eq!(ready["reason"], "SecretMissing");
                    let message = ready["message"].as_str().unwrap();
                    assert!(
                        message.contains("Secret \"acme-github\"")
                            && message.contains("(for projected volume porter-secrets)")
                            && message.contains("namespace acme"),
                        "{message}"
                    );
                    // The other Secrets exist and are not named.
                    assert!(!message.contains("acme-channels"), "{message}");
                    // kstatus: Failed, with the reason and message.
                    let stalled = condition(status, "Stalled");
                    assert_eq!(stalled["status"], "True");
                    assert_eq!(stalled["reason"], "SecretMissing");
                    assert_eq!(stalled["message"], ready["message"]);
                },
            ));
            steps.push(event_expectation("SecretMissing", "Warning"));
            steps.push(event_expectation("ConfigRendered", "Normal"));
            (bot, Cached::first_time(&dereferenced.contacts), steps)
        }
        Scenario::MissingSecretKeyIsReported => {
            let children = children_of(&bot, &dereferenced.contacts);
            let uses = secret_uses(&children.deployment);
            let (secret, (key, _)) = uses
                .iter()
                .find_map(|secret| Some((secret.name.clone(), secret.keys.first()?.clone())))
                .expect("the example bot names a Secret key");
            let mut steps = reads(&persona);
            steps.extend(child_applies(&bot, &dereferenced.contacts, not_ready));
            steps.extend(secret_reads_without(&children, &[], &[key.as_str()]));
            steps.push(status_expectation(
                "/apis/saint.work/v1alpha1/namespaces/acme/saintbots/my-bot/status",
                to_value(&bot),
                move |status| {
                    let ready = condition(status, "Ready");
                    assert_eq!(ready["reason"], "SecretMissing");
                    let message = ready["message"].as_str().unwrap();
                    assert!(
                        message.contains(&format!(
                            "Secret {secret:?} in namespace acme has no key {key:?}"
                        )),
                        "{message}"
                    );
                    assert_eq!(condition(status, "Stalled")["reason"], "SecretMissing");
                },
            ));
            steps.push(event_expectation("SecretMissing", "Warning"));
            steps.push(event_expectation("ConfigRendered", "Normal"));
            (bot, Cached::first_time(&dereferenced.contacts), steps)
        }
        Scenario::RefusedPodIsReported => {
            let children = children_of(&bot, &dereferenced.contacts);
            let refused = json!({"observedGeneration": 1, "replicas": 0, "conditions": [
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated"},
                {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                    "message": "pods \"my-bot-5d8\" is forbidden: maximum memory usage per Container is 1Mi, but limit is 512Mi"},
            ]});
            let cached = Cached {
                sources: sources(&[], &dereferenced.contacts, &dereferenced.roles),
                children: children_written(&children, refused),
            };
            let mut steps = reads(&persona);
            steps.extend(secret_reads(&children, &[]));
            steps.push(status_expectation(
                "/apis/saint.work/v1alpha1/namespaces/acme/saintbots/my-bot/status",
                to_value(&bot),
                |status| {
                    let ready = condition(status, "Ready");
                    assert_eq!(
                        (&ready["status"], &ready["reason"]),
                        (&json!("False"), &json!("ReplicaFailure"))
                    );
                    assert_eq!(
                        ready["message"],
                        "the bot pod cannot be created: FailedCreate: pods \"my-bot-5d8\" is \
                         forbidden: maximum memory usage per Container is 1Mi, but limit is 512Mi"
                    );
                    let stalled = condition(status, "Stalled");
                    assert_eq!(stalled["reason"], "ReplicaFailure");
                    assert_eq!(stalled["message"], ready["message"]);
                },
            ));
            steps.push(event_expectation("ReplicaFailure", "Warning"));
            steps.push(event_expectation("ConfigRendered", "Normal"));
            (bot, cached, steps)
        }
        Scenario::MissingSkillConfigMapIsRetried => {
            let mut config_maps = persona.clone();
            config_maps.remove("acme-skill-google");
            let mut steps = reads(&config_maps);
            steps.push(status_expectation(
                "/apis/saint.work/v1alpha1/namespaces/acme/saintbots/my-bot/status",
                to_value(&bot),
                |status| {
                    let ready = condition(status, "Ready");
                    assert_eq!(ready["status"], "False");
                    assert_eq!(ready["reason"], "ConfigMapNotFound");
                    let message = ready["message"].as_str().unwrap();
                    assert!(
                        message.contains("spec.skills[1].configMapRef")
                            && message.contains("acme-skill-google"),
                        "{message}"
                    );
                    assert_eq!(condition(status, "ConfigRendered")["status"], "False");
                },
            ));
            steps.push(event_expectation("ConfigMapNotFound", "Warning"));
            (bot, Cached::first_time(&dereferenced.contacts), steps)
        }
        Scenario::MissingDefaultRoleWaits => {
            bot.spec.default_role = "visitor".to_string();
            let mut steps = reads(&persona);
            steps.push(status_expectation(
                "/apis/saint.work/v1alpha1/namespaces/acme/saintbots/my-bot/status",
                to_value(&bot),
                |status| {
                    assert_eq!(condition(status, "Ready")["reason"], "RoleNotFound");
                    assert!(
                        condition(status, "Ready")["message"]
                            .as_str()
                            .unwrap()
                            .contains("spec.defaultRole")
                    );
                    assert_eq!(condition(status, "ConfigRendered")["status"], "False");
                },
            ));
            steps.push(event_expectation("RoleNotFound", "Warning"));
            (bot, Cached::first_time(&dereferenced.contacts), steps)
        }
    }
}

const NOW: &str = "2026-11-22T01:00:00Z";

/// A context on `client` with the operator's test settings, `cached` and a pinned clock.
fn context(client: Client, cached: Cached) -> Arc<Context> {
    let recorder = Publisher::new(client.clone(), "saint-operator");
    let fixed_now = Box::new(|| Time(NOW.parse().unwrap()));
    Arc::new(Context::with_clock(
        client,
        recorder,
        settings(),
        Arc::new(Metrics::default()),
        cached.sources,
        cached.children,
        fixed_now,
    ))
}

async fn run(which: Scenario) -> (Result<Action, ReconcileError>, Vec<String>) {
    let (bot, cached, steps) = scenario(&which);
    with_stand_in(steps, |client| {
        reconcile(Arc::new(bot), context(client, cached))
    })
    .await
}

#[tokio::test]
async fn first_reconcile_of_the_example_bot_applies_every_child_and_patches_status() {
    let (result, _) = run(Scenario::FirstReconcileAppliesEveryChild).await;
    assert_eq!(
        result.expect("reconcile succeeds"),
        Action::requeue(RESYNC_INTERVAL)
    );
}

#[tokio::test]
async fn a_removed_webhook_ingress_is_deleted_and_only_the_bots_own() {
    run(Scenario::RemovedWebhookIngressIsDeleted)
        .await
        .0
        .expect("reconcile succeeds");
}

#[tokio::test]
async fn a_phone_claimed_by_two_contacts_is_reported_on_the_bot_and_both_contacts() {
    run(Scenario::ConflictingContactsAreReported)
        .await
        .0
        .expect("reconcile succeeds despite conflicts");
}

#[tokio::test]
async fn a_missing_default_role_applies_nothing_and_reports_role_not_found() {
    let error = run(Scenario::MissingDefaultRoleWaits)
        .await
        .0
        .expect_err("reconcile reports the invalid spec");
    assert!(matches!(error, ReconcileError::InvalidSpec(_)), "{error}");
}

#[tokio::test]
async fn an_unchanged_ready_bot_is_reconciled_without_a_single_write() {
    let (result, seen) = run(Scenario::UnchangedReadyBotWritesNothing).await;
    assert_eq!(
        result.expect("reconcile succeeds"),
        Action::requeue(RESYNC_INTERVAL)
    );
    assert!(
        seen.iter()
            .all(|request| request.starts_with("GET /api/v1/namespaces/acme/configmaps/")),
        "only the named ConfigMaps are read: {seen:#?}"
    );
}

/// The agent's Event saying its whole model chain fails (`failing`) or answers again,
/// about the fixture's SaintBot, made by the agent of pod `my-bot-a` at `at`.
fn chain_report_event(failing: bool, at: &str) -> k8s_openapi::api::core::v1::Event {
    let reason = if failing {
        "ModelChainFailing"
    } else {
        "ModelChainRecovered"
    };
    serde_json::from_value(json!({
        "metadata": {"name": format!("my-bot.{reason}"), "namespace": "acme"},
        "involvedObject": {"apiVersion": "saint.work/v1alpha1", "kind": "SaintBot",
            "name": "my-bot", "namespace": "acme", "uid": "0b5e7a8c-1111-4222-8333-944455556666"},
        "reason": reason, "type": if failing { "Warning" } else { "Normal" },
        "message": if failing {
            "every model of the failover chain failed a call: primary claude-sonnet-4-5 (unauthorized)"
        } else {
            "primary claude-sonnet-4-5 answers again; no call has failed on every model of the chain for 60s"
        },
        "eventTime": at, "reportingComponent": "saint-agent", "reportingInstance": "my-bot-a",
    }))
    .unwrap()
}

#[tokio::test]
async fn a_failing_model_chain_report_turns_model_available_false_and_its_recovery_true_again() {
    // A ready bot whose status is stored, and its agent's report that every model failed.
    let (mut bot, mut cached, mut steps) = scenario(&Scenario::UnchangedReadyBotWritesNothing);
    assert_eq!(
        condition(&to_value(bot.status.as_ref().unwrap()), "ModelAvailable")["status"],
        "True"
    );
    cached.children.chain_reports =
        ChainReports::holding(&[chain_report_event(true, "2026-11-22T00:55:00Z")]);
    // The report is the running agent's: its pod is there, the container older.
    steps.push(expect(Method::GET, "/api/v1/namespaces/acme/pods", |_| {
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"},
            "items": [{"metadata": {"name": "my-bot-a", "namespace": "acme"},
                "status": {"containerStatuses": [{"name": "agent", "image": "a", "imageID": "",
                    "ready": true, "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-11-22T00:00:00Z"}}}]}}]})
    }));
    let stored = to_value(&bot);
    steps.push(status_expectation(
        "/apis/saint.work/v1alpha1/namespaces/acme/saintbots/my-bot/status",
        stored,
        |status| {
            let available = condition(status, "ModelAvailable");
            assert_eq!(available["status"], "False");
            assert_eq!(available["reason"], "ChainFailing");
            assert_eq!(
                available["message"],
                "every model of the failover chain failed a call: primary claude-sonnet-4-5 \
                 (unauthorized) (reported by the agent of pod my-bot-a)"
            );
            // Ready stays the pod's: the bot runs, its models do not answer.
            assert_eq!(condition(status, "Ready")["status"], "True");
            assert!(
                status["conditions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|condition| condition["type"] != "Stalled")
            );
        },
    ));
    let bot_now = Arc::new(bot.clone());
    let (action, seen) = with_stand_in(steps, |client| async move {
        reconcile(bot_now, context(client, cached)).await
    })
    .await;
    assert_eq!(
        action.expect("reconcile succeeds"),
        Action::requeue(model_chain::RECHECK),
        "a failing chain is looked at again soon"
    );
    assert!(
        !seen.iter().any(|request| request.contains("/events")),
        "the agent published the Events: {seen:#?}"
    );

    // The agent reports a model answering again: True, no pod read.
    let (_, mut cached, mut steps) = scenario(&Scenario::UnchangedReadyBotWritesNothing);
    cached.children.chain_reports = ChainReports::holding(&[
        chain_report_event(true, "2026-11-22T00:55:00Z"),
        chain_report_event(false, "2026-11-22T00:58:00Z"),
    ]);
    let mut failing = bot.status.clone().unwrap();
    for condition in &mut failing.conditions {
        if condition.type_ == "ModelAvailable" {
            condition.status = "False".into();
            condition.reason = "ChainFailing".into();
        }
    }
    bot.status = Some(failing);
    steps.push(status_expectation(
        "/apis/saint.work/v1alpha1/namespaces/acme/saintbots/my-bot/status",
        to_value(&bot),
        |status| {
            let available = condition(status, "ModelAvailable");
            assert_eq!(available["status"], "True");
            assert_eq!(available["reason"], "NoChainFailure");
            assert!(
                available["message"].as_str().unwrap().starts_with(
                    "the bot's agent reports: primary claude-sonnet-4-5 answers again"
                ),
                "{available}"
            );
        },
    ));
    let (action, _) = with_stand_in(steps, |client| async move {
        reconcile(Arc::new(bot), context(client, cached)).await
    })
    .await;
    assert_eq!(
        action.expect("reconcile succeeds"),
        Action::requeue(RESYNC_INTERVAL)
    );
}

#[tokio::test]
async fn a_hand_edited_network_policy_is_replaced_whole_and_nothing_else_is_written() {
    let (result, seen) = run(Scenario::DriftedPolicyIsReplaced).await;
    result.expect("reconcile succeeds");
    let writes: Vec<&String> = seen
        .iter()
        .filter(|request| !request.starts_with("GET "))
        .filter(|request| !request.contains("/events"))
        .collect();
    assert_eq!(writes.len(), 3, "replace, apply, status: {seen:#?}");
}

#[tokio::test]
async fn a_missing_secret_is_reported_by_name_and_retried() {
    let (bot, cached, steps) = scenario(&Scenario::MissingSecretIsReported);
    let bot = Arc::new(bot);
    let (action, _) = with_stand_in(steps, |client| async move {
        reconcile(bot, context(client, cached))
            .await
            .expect("the children are applied; the status says what is missing")
    })
    .await;
    assert_eq!(
        action,
        Action::requeue(backoff(1)),
        "retried: nothing watches Secrets"
    );
}

#[tokio::test]
async fn a_missing_secret_key_is_reported_by_key_and_retried() {
    let (bot, cached, steps) = scenario(&Scenario::MissingSecretKeyIsReported);
    let bot = Arc::new(bot);
    let (action, _) = with_stand_in(steps, |client| async move {
        reconcile(bot, context(client, cached))
            .await
            .expect("the children are applied; the status names the key")
    })
    .await;
    assert_eq!(action, Action::requeue(backoff(1)));
}

#[tokio::test]
async fn a_pod_refused_by_the_namespace_is_the_bots_ready_reason_without_a_child_write() {
    let (result, seen) = run(Scenario::RefusedPodIsReported).await;
    result.expect("reconcile succeeds");
    let writes: Vec<&String> = seen
        .iter()
        .filter(|request| !request.starts_with("GET "))
        .filter(|request| !request.contains("/events"))
        .collect();
    assert_eq!(writes.len(), 1, "the status only: {seen:#?}");
}

#[tokio::test]
async fn a_missing_skill_config_map_applies_nothing_reports_it_and_is_retried() {
    let (bot, cached, steps) = scenario(&Scenario::MissingSkillConfigMapIsRetried);
    let bot = Arc::new(bot);
    let ((error, action), _) = with_stand_in(steps, |client| async move {
        let context = context(client, cached);
        let error = reconcile(bot.clone(), context.clone())
            .await
            .expect_err("reconcile reports the missing ConfigMap");
        let action = error_policy(bot.clone(), &error, context.clone());
        (error, action)
    })
    .await;
    assert!(matches!(error, ReconcileError::InvalidSpec(_)), "{error}");
    assert_eq!(
        action,
        Action::requeue(backoff(1)),
        "retried: nothing watches the ConfigMap"
    );
}

#[tokio::test]
async fn a_refused_child_sets_apply_failed_with_the_api_servers_words_and_warns_once() {
    // Two rounds as the controller runs them: reconcile, then `error_policy` with its
    // error; in the second the first round's status is stored, so nothing is written
    // and no second Warning is published.
    let (first_bot, cached, mut steps) = scenario(&Scenario::ApplyFailureStopsAndWarns);
    let (second_bot, _, second_steps) = scenario(&Scenario::ApplyFailureRetriedQuietly);
    steps.extend(second_steps);
    let ((errors, actions, metrics), seen) = with_stand_in(steps, |client| async move {
        let context = context(client, cached);
        let (mut errors, mut actions) = (Vec::new(), Vec::new());
        for bot in [first_bot, second_bot].map(Arc::new) {
            let error = reconcile(bot.clone(), context.clone())
                .await
                .expect_err("reconcile reports the failed apply");
            actions.push(error_policy(bot.clone(), &error, context.clone()));
            errors.push(error);
        }
        (errors, actions, context.metrics.encode())
    })
    .await;
    for error in &errors {
        assert!(matches!(error, ReconcileError::Apply(_)), "{error}");
        assert!(
            error
                .to_string()
                .contains("failed to apply ServiceAccount \"my-bot-agent\""),
            "{error}"
        );
    }
    let warnings = seen
        .iter()
        .filter(|request| request.contains(" /apis/events.k8s.io/"))
        .count();
    assert_eq!(warnings, 1, "one Warning for two failed rounds: {seen:#?}");
    assert_eq!(
        actions,
        vec![Action::requeue(backoff(1)), Action::requeue(backoff(2))],
        "the retry backs off"
    );
    assert!(
        metrics.contains("saint_operator_reconcile_errors_total{reason=\"Apply\"} 2"),
        "{metrics}"
    );
}
