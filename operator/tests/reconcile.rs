//! Reconcile against an API stand-in (`tower_test::mock`): named scenarios prove the
//! exact requests — reads, server-side applies in order, status patches, Events — that
//! one reconcile of the example bot issues. The real API server comes in `e2e/`.

mod support;

use std::{collections::BTreeMap, sync::Arc};

use http::Method;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Client, runtime::controller::Action, runtime::events::Recorder};
use saint_operator::{
    crd::{Contact, SaintBot},
    metrics::Metrics,
    saintbot_controller::{
        Context, RESYNC_INTERVAL, ReconcileError, backoff,
        build::{build_children, config_map::config_hash},
        error_policy, reconcile,
    },
};
use serde_json::{Value, json};
use support::{
    load, settings,
    stand_in::{
        Expect, condition, expect, list, object_event_expectation, status_expectation, to_value,
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
    /// The same refusal on the retry: the same reads and apply, and no second Event.
    ApplyFailureRetriedQuietly,
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

fn apply_expectation(path: &str, expected: Value, extra_status: Option<Value>) -> Expect {
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

fn child_applies(bot: &SaintBot, contacts: &[Contact], deployment_status: Value) -> Vec<Expect> {
    let (_, mut dereferenced) = load("acme.yaml");
    dereferenced.contacts = contacts.to_vec();
    let validated =
        saint_operator::saintbot_controller::validate::validate(bot, &dereferenced, &settings())
            .unwrap();
    let children = build_children(&validated);
    let namespace = "/namespaces/acme";
    let mut applies = vec![
        apply_expectation(
            &format!("/api/v1{namespace}/serviceaccounts/my-bot-agent"),
            to_value(&children.service_account),
            None,
        ),
        apply_expectation(
            &format!("/apis/rbac.authorization.k8s.io/v1{namespace}/rolebindings/my-bot-agent"),
            to_value(&children.role_binding),
            None,
        ),
        apply_expectation(
            &format!("/api/v1{namespace}/configmaps/my-bot-persona"),
            to_value(&children.persona_config_map),
            None,
        ),
        apply_expectation(
            &format!("/api/v1{namespace}/configmaps/my-bot-config"),
            to_value(&children.config_map),
            None,
        ),
        apply_expectation(
            &format!("/api/v1{namespace}/persistentvolumeclaims/my-bot-workspace"),
            to_value(&children.workspace_claim),
            None,
        ),
        apply_expectation(
            &format!("/api/v1{namespace}/services/my-bot"),
            to_value(&children.service),
            None,
        ),
        apply_expectation(
            &format!("/apis/networking.k8s.io/v1{namespace}/networkpolicies/my-bot-sandbox"),
            to_value(&children.sandbox_network_policy),
            None,
        ),
        apply_expectation(
            &format!("/apis/networking.k8s.io/v1{namespace}/networkpolicies/my-bot-agent"),
            to_value(&children.agent_network_policy),
            None,
        ),
        apply_expectation(
            &format!("/apis/apps/v1{namespace}/deployments/my-bot"),
            to_value(&children.deployment),
            Some(deployment_status),
        ),
    ];
    match &children.webhook_ingress {
        Some(webhooks) => applies.push(apply_expectation(
            &format!("/apis/networking.k8s.io/v1{namespace}/ingresses/my-bot-webhooks"),
            to_value(webhooks),
            None,
        )),
        None => {
            applies.push(expect(
                Method::GET,
                &format!("/apis/networking.k8s.io/v1{namespace}/ingresses"),
                |_| {
                    list(
                        "IngressList",
                        vec![
                            ingress("my-bot-webhooks", BOT_UID, "ingress-1"),
                            // Same labels, another controller: never touched.
                            ingress("someone-elses", "another-uid", "ingress-2"),
                        ],
                    )
                },
            ));
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

/// The reads of one reconcile: Contacts, Roles, then the ConfigMaps the bot names —
/// persona first, then each skill's — answered from `config_maps` (a name absent there
/// is answered 404).
fn reads(
    contacts: &[Contact],
    roles: Vec<Value>,
    config_maps: &BTreeMap<String, Value>,
) -> Vec<Expect> {
    let contacts: Vec<Value> = contacts.iter().map(to_value).collect();
    let mut steps = vec![
        expect(
            Method::GET,
            "/apis/saint.work/v1alpha1/namespaces/acme/contacts",
            move |_| list("ContactList", contacts),
        ),
        expect(
            Method::GET,
            "/apis/saint.work/v1alpha1/namespaces/acme/roles",
            move |_| list("RoleList", roles),
        ),
    ];
    for name in ["acme-persona", "acme-skills", "acme-skill-google"] {
        let answer = config_maps.get(name).cloned().unwrap_or_else(|| {
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": format!("configmaps \"{name}\" not found"), "reason": "NotFound", "code": 404})
        });
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

/// Builds the expectations of a scenario and the bot it reconciles.
fn scenario(which: &Scenario) -> (SaintBot, Vec<Expect>) {
    let (mut bot, dereferenced) = load("acme.yaml");
    let roles: Vec<Value> = dereferenced.roles.iter().map(to_value).collect();
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
            let mut steps = reads(&dereferenced.contacts, roles, &persona);
            steps.extend(child_applies(&bot, &dereferenced.contacts, not_ready));
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
            (bot, steps)
        }
        Scenario::ConflictingContactsAreReported => {
            let mut contacts = dereferenced.contacts.clone();
            contacts.push(ana_twin());
            let mut steps = reads(&contacts, roles, &persona);
            steps.extend(child_applies(&bot, &contacts, not_ready));
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
            (bot, steps)
        }
        Scenario::RemovedWebhookIngressIsDeleted => {
            bot.spec.webhook_ingress = None;
            let mut steps = reads(&dereferenced.contacts, roles, &persona);
            steps.extend(child_applies(&bot, &dereferenced.contacts, not_ready));
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
            (bot, steps)
        }
        Scenario::ApplyFailureStopsAndWarns | Scenario::ApplyFailureRetriedQuietly => {
            let mut steps = reads(&dereferenced.contacts, roles, &persona);
            steps.push(expect(
                Method::PATCH,
                "/api/v1/namespaces/acme/serviceaccounts/my-bot-agent",
                |_| json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500}),
            ));
            if matches!(which, Scenario::ApplyFailureStopsAndWarns) {
                steps.push(event_expectation("Apply", "Warning"));
            }
            (bot, steps)
        }
        Scenario::MissingSkillConfigMapIsRetried => {
            let mut config_maps = persona.clone();
            config_maps.remove("acme-skill-google");
            let mut steps = reads(&dereferenced.contacts, roles, &config_maps);
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
            (bot, steps)
        }
        Scenario::MissingDefaultRoleWaits => {
            bot.spec.default_role = "visitor".to_string();
            let mut steps = reads(&dereferenced.contacts, roles, &persona);
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
            (bot, steps)
        }
    }
}

/// A context on `client` with the operator's test settings and a pinned clock.
fn context(client: Client) -> Arc<Context> {
    let recorder = Recorder::new(client.clone(), "saint-operator".into());
    let fixed_now = Box::new(|| Time("2026-11-22T01:00:00Z".parse().unwrap()));
    Arc::new(Context::with_clock(
        client,
        recorder,
        settings(),
        Arc::new(Metrics::default()),
        fixed_now,
    ))
}

async fn run(which: Scenario) -> Result<Action, ReconcileError> {
    let (bot, steps) = scenario(&which);
    let (result, _) =
        with_stand_in(steps, |client| reconcile(Arc::new(bot), context(client))).await;
    result
}

#[tokio::test]
async fn first_reconcile_of_the_example_bot_applies_every_child_and_patches_status() {
    let action = run(Scenario::FirstReconcileAppliesEveryChild)
        .await
        .expect("reconcile succeeds");
    assert_eq!(action, Action::requeue(RESYNC_INTERVAL));
}

#[tokio::test]
async fn a_removed_webhook_ingress_is_deleted_and_only_the_bots_own() {
    run(Scenario::RemovedWebhookIngressIsDeleted)
        .await
        .expect("reconcile succeeds");
}

#[tokio::test]
async fn a_phone_claimed_by_two_contacts_is_reported_on_the_bot_and_both_contacts() {
    run(Scenario::ConflictingContactsAreReported)
        .await
        .expect("reconcile succeeds despite conflicts");
}

#[tokio::test]
async fn a_missing_default_role_applies_nothing_and_reports_role_not_found() {
    let error = run(Scenario::MissingDefaultRoleWaits)
        .await
        .expect_err("reconcile reports the invalid spec");
    assert!(matches!(error, ReconcileError::InvalidSpec(_)), "{error}");
}

#[tokio::test]
async fn a_missing_skill_config_map_applies_nothing_reports_it_and_is_retried() {
    let (bot, steps) = scenario(&Scenario::MissingSkillConfigMapIsRetried);
    let bot = Arc::new(bot);
    let ((error, action), _) = with_stand_in(steps, |client| async move {
        let context = context(client);
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
async fn a_failed_apply_stops_the_reconcile_and_warns_once() {
    // Two rounds as the controller runs them: reconcile, then `error_policy` with its
    // error; the stand-in expects the Warning in the first round only.
    let (bot, mut steps) = scenario(&Scenario::ApplyFailureStopsAndWarns);
    steps.extend(scenario(&Scenario::ApplyFailureRetriedQuietly).1);
    let bot = Arc::new(bot);
    let ((errors, actions, metrics), seen) = with_stand_in(steps, |client| async move {
        let context = context(client);
        let (mut errors, mut actions) = (Vec::new(), Vec::new());
        for _ in 0..2 {
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
