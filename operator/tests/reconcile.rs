//! Reconcile against an API stand-in (`tower_test::mock`): named scenarios prove the
//! exact requests — reads, server-side applies in order, status patches, Events — that
//! one reconcile of the example bot issues. The real API server comes in `e2e/`.

mod support;

use std::sync::Arc;

use http::{Method, Request, Response};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Client, client::Body, runtime::events::Recorder};
use saint_operator::{
    crd::{Contact, SaintBot},
    metrics::Metrics,
    saintbot_controller::{
        Context, ReconcileError,
        build::{build_children, config_map::config_hash},
        reconcile,
    },
};
use serde_json::{Value, json};
use support::{load, settings, validated};
use tower_test::mock::{self, Handle};

type ApiHandle = Handle<Request<Body>, Response<Body>>;

/// One expected request and how the stand-in answers it.
struct Expect {
    method: Method,
    path: String,
    /// Given the request body (JSON or null), returns the response body.
    respond: Box<dyn FnOnce(Value) -> Value + Send>,
}

fn expect(
    method: Method,
    path: &str,
    respond: impl FnOnce(Value) -> Value + Send + 'static,
) -> Expect {
    Expect {
        method,
        path: path.to_string(),
        respond: Box::new(respond),
    }
}

/// Scenarios, named after what they prove.
enum Scenario {
    /// First reconcile of the example bot: reads, ten applies in order, status, Contact
    /// statuses, Events for PodNotReady and ConfigRendered.
    FirstReconcileAppliesEveryChild,
    /// Two Contacts claim one phone: the bot reports IdentifierConflict and both Contacts
    /// get a conflict status; a Warning Event is published.
    ConflictingContactsAreReported,
    /// The default role is missing: nothing is applied, status says RoleNotFound.
    MissingDefaultRoleWaits,
    /// The API server refuses the first apply: reconcile stops there, no status is
    /// written, and one Warning Event named after the error variant is published.
    ApplyFailureStopsAndWarns,
}

fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": "saint.work/v1alpha1", "kind": kind, "metadata": {"resourceVersion": "1"}, "items": items})
}

fn to_value<T: serde::Serialize>(object: &T) -> Value {
    serde_json::to_value(object).unwrap()
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

/// A status patch; the stand-in answers with `stored` carrying the patched status, as
/// the API server answers with the whole object.
fn status_expectation(
    path: &str,
    stored: Value,
    check: impl FnOnce(&Value) + Send + 'static,
) -> Expect {
    expect(Method::PATCH, path, move |body| {
        check(&body["status"]);
        let mut stored = stored;
        stored["status"] = body["status"].clone();
        stored
    })
}

fn event_expectation(reason: &'static str, type_: &'static str) -> Expect {
    object_event_expectation("my-bot", reason, type_)
}

fn object_event_expectation(
    object: &'static str,
    reason: &'static str,
    type_: &'static str,
) -> Expect {
    expect(
        Method::POST,
        "/apis/events.k8s.io/v1/namespaces/acme/events",
        move |body| {
            assert_eq!(body["reason"], reason, "{body}");
            assert_eq!(body["type"], type_, "{body}");
            assert_eq!(body["regarding"]["name"], object, "{body}");
            body
        },
    )
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|condition| condition["type"] == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {status}"))
}

fn child_applies(bot: &SaintBot, contacts: &[Contact], deployment_status: Value) -> Vec<Expect> {
    let (_, mut dereferenced) = load("acme.yaml");
    dereferenced.contacts = contacts.to_vec();
    let validated =
        saint_operator::saintbot_controller::validate::validate(bot, &dereferenced, &settings())
            .unwrap();
    let children = build_children(&validated);
    let namespace = "/namespaces/acme";
    vec![
        apply_expectation(
            &format!("/api/v1{namespace}/serviceaccounts/my-bot-agent"),
            to_value(&children.service_account),
            None,
        ),
        apply_expectation(
            &format!("/apis/rbac.authorization.k8s.io/v1{namespace}/roles/my-bot-agent"),
            to_value(&children.role),
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
    ]
}

fn reads(bot: &SaintBot, contacts: &[Contact], roles: Vec<Value>, persona: Value) -> Vec<Expect> {
    let contacts: Vec<Value> = contacts.iter().map(to_value).collect();
    let bots = vec![to_value(bot)];
    vec![
        expect(
            Method::GET,
            "/apis/saint.work/v1alpha1/namespaces/acme/saintbots",
            move |_| list("SaintBotList", bots),
        ),
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
        expect(
            Method::GET,
            "/api/v1/namespaces/acme/configmaps/acme-persona",
            move |_| persona,
        ),
    ]
}

fn contact_status_expectation(
    contacts: &[Contact],
    name: &'static str,
    reason: &'static str,
    conflicts: i64,
) -> Expect {
    let stored = to_value(
        contacts
            .iter()
            .find(|contact| contact.metadata.name.as_deref() == Some(name))
            .unwrap(),
    );
    status_expectation(
        &format!("/apis/saint.work/v1alpha1/namespaces/acme/contacts/{name}/status"),
        stored,
        move |status| {
            assert_eq!(
                condition(status, "Ready")["reason"],
                reason,
                "{name}: {status}"
            );
            assert_eq!(status["conflictCount"], conflicts, "{name}: {status}");
        },
    )
}

/// Every Role of the fixture is valid: each gets `Ready=True/Valid`, in file order.
fn role_status_expectations(roles: &[saint_operator::crd::Role]) -> Vec<Expect> {
    roles
        .iter()
        .map(|role| {
            let name = role.metadata.name.clone().unwrap();
            let path = format!("/apis/saint.work/v1alpha1/namespaces/acme/roles/{name}/status");
            status_expectation(&path, to_value(role), move |status| {
                assert_eq!(
                    condition(status, "Ready")["reason"],
                    "Valid",
                    "{name}: {status}"
                );
                assert_eq!(
                    status["observedGeneration"],
                    Value::Null,
                    "{name}: {status}"
                );
            })
        })
        .collect()
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
    let persona = to_value(dereferenced.persona_config_map.as_ref().unwrap());
    let not_ready =
        json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 0});
    match which {
        Scenario::FirstReconcileAppliesEveryChild => {
            let hash = config_hash(&validated("acme.yaml"));
            let mut steps = reads(&bot, &dereferenced.contacts, roles, persona);
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
            for name in ["acme-ana", "acme-marko", "acme-ivan"] {
                steps.push(contact_status_expectation(
                    &dereferenced.contacts,
                    name,
                    "Linked",
                    0,
                ));
            }
            steps.extend(role_status_expectations(&dereferenced.roles));
            steps.push(event_expectation("PodNotReady", "Normal"));
            steps.push(event_expectation("ConfigRendered", "Normal"));
            (bot, steps)
        }
        Scenario::ConflictingContactsAreReported => {
            let mut contacts = dereferenced.contacts.clone();
            contacts.push(ana_twin());
            let mut steps = reads(&bot, &contacts, roles, persona);
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
            steps.push(contact_status_expectation(
                &contacts,
                "acme-ana",
                "IdentifierConflict",
                1,
            ));
            steps.push(object_event_expectation(
                "acme-ana",
                "IdentifierConflict",
                "Warning",
            ));
            steps.push(contact_status_expectation(
                &contacts,
                "acme-marko",
                "Linked",
                0,
            ));
            steps.push(contact_status_expectation(
                &contacts,
                "acme-ivan",
                "Linked",
                0,
            ));
            steps.push(contact_status_expectation(
                &contacts,
                "acme-twin",
                "IdentifierConflict",
                1,
            ));
            steps.push(object_event_expectation(
                "acme-twin",
                "IdentifierConflict",
                "Warning",
            ));
            steps.extend(role_status_expectations(&dereferenced.roles));
            steps.push(event_expectation("PodNotReady", "Normal"));
            steps.push(event_expectation("IdentifierConflict", "Warning"));
            steps.push(event_expectation("ConfigRendered", "Normal"));
            (bot, steps)
        }
        Scenario::ApplyFailureStopsAndWarns => {
            let mut steps = reads(&bot, &dereferenced.contacts, roles, persona);
            steps.push(expect(
                Method::PATCH,
                "/api/v1/namespaces/acme/serviceaccounts/my-bot-agent",
                |_| json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500}),
            ));
            steps.push(event_expectation("Apply", "Warning"));
            (bot, steps)
        }
        Scenario::MissingDefaultRoleWaits => {
            bot.spec.default_role = "visitor".to_string();
            let mut steps = reads(&bot, &dereferenced.contacts, roles, persona);
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
            for name in ["acme-ana", "acme-marko", "acme-ivan"] {
                steps.push(contact_status_expectation(
                    &dereferenced.contacts,
                    name,
                    "Linked",
                    0,
                ));
            }
            steps.extend(role_status_expectations(&dereferenced.roles));
            steps.push(event_expectation("RoleNotFound", "Warning"));
            (bot, steps)
        }
    }
}

/// Answers requests in order, failing on the first one that differs from the scenario.
async fn serve(mut handle: ApiHandle, steps: Vec<Expect>) {
    for (index, step) in steps.into_iter().enumerate() {
        let (request, send) = handle.next_request().await.unwrap_or_else(|| {
            panic!("step {index}: no request for {} {}", step.method, step.path)
        });
        assert_eq!(
            request.method(),
            step.method,
            "step {index}: {}",
            request.uri()
        );
        assert_eq!(request.uri().path(), step.path, "step {index}");
        if step.method == Method::PATCH {
            let query = request.uri().query().unwrap_or_default().to_string();
            assert!(
                query.contains("fieldManager=saint-operator") && query.contains("force=true"),
                "step {index}: {query}"
            );
        }
        let bytes = request.into_body().collect_bytes().await.unwrap();
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        let response = (step.respond)(body);
        // A `Status` object with a code is answered with that HTTP status, as the API server does.
        let code = match (&response["kind"], &response["code"]) {
            (Value::String(kind), Value::Number(code)) if kind == "Status" => {
                code.as_u64().unwrap() as u16
            }
            _ => 200,
        };
        send.send_response(
            Response::builder()
                .status(code)
                .body(Body::from(serde_json::to_vec(&response).unwrap()))
                .unwrap(),
        );
    }
}

async fn run(which: Scenario) -> Result<kube::runtime::controller::Action, ReconcileError> {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let (bot, steps) = scenario(&which);
    let server = tokio::spawn(serve(handle, steps));
    let recorder = Recorder::new(client.clone(), "saint-operator".into());
    let fixed_now = Box::new(|| Time("2026-11-22T01:00:00Z".parse().unwrap()));
    let context = Arc::new(Context::with_clock(
        client,
        recorder,
        settings(),
        Arc::new(Metrics::default()),
        fixed_now,
    ));
    let result = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        reconcile(Arc::new(bot), context),
    )
    .await
    .expect("reconcile finished in time");
    tokio::time::timeout(std::time::Duration::from_secs(10), server)
        .await
        .expect("every expected request arrived")
        .expect("the API stand-in saw exactly the expected requests");
    result
}

#[tokio::test]
async fn first_reconcile_of_the_example_bot_applies_every_child_and_patches_status() {
    let action = run(Scenario::FirstReconcileAppliesEveryChild)
        .await
        .expect("reconcile succeeds");
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(
            saint_operator::saintbot_controller::RESYNC_INTERVAL
        )
    );
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
async fn a_failed_apply_stops_the_reconcile_and_warns_once() {
    let error = run(Scenario::ApplyFailureStopsAndWarns)
        .await
        .expect_err("reconcile reports the failed apply");
    assert!(matches!(error, ReconcileError::Apply(_)), "{error}");
    assert!(
        error
            .to_string()
            .contains("failed to apply ServiceAccount \"my-bot-agent\""),
        "{error}"
    );
}
