//! The references controller against an API stand-in (`tower_test::mock`): named
//! scenarios prove the exact requests — status patches and Events, never a read: the
//! namespace's objects come from the operator's caches — with which one reconcile of a
//! Contact or Role writes its status, bots or no bots. The real API
//! server comes in `e2e/tests/references.rs`.

mod support;

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Client, runtime::controller::Action};
use saint_operator::{
    cache::Sources,
    crd::{Contact, Role, SaintBot},
    events::Publisher,
    references_controller::{Context, reconcile_contact, reconcile_role},
};
use serde_json::{Value, json};
use support::{
    load, sources,
    stand_in::{
        Expect, condition, object_event_expectation, status_expectation, to_value, with_stand_in,
    },
};

const NOW: &str = "2026-11-22T01:00:00Z";

fn context(client: Client, sources: Sources) -> Arc<Context> {
    let recorder = Publisher::new(client.clone(), "saint-operator");
    Arc::new(Context::with_clock(
        client,
        recorder,
        sources,
        Box::new(|| Time(NOW.parse().unwrap())),
    ))
}

fn contact_status_expectation(
    contact: &Contact,
    reason: &'static str,
    conflicts: i64,
    check: impl FnOnce(&Value) + Send + 'static,
) -> Expect {
    let name = contact.metadata.name.clone().unwrap();
    status_expectation(
        &format!("/apis/saint.work/v1alpha1/namespaces/acme/contacts/{name}/status"),
        to_value(contact),
        move |status| {
            assert_eq!(
                condition(status, "Ready")["reason"],
                reason,
                "{name}: {status}"
            );
            assert_eq!(status["conflictCount"], conflicts, "{name}: {status}");
            check(status);
        },
    )
}

fn object<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

fn ana_twin() -> Contact {
    object(json!({
        "apiVersion": "saint.work/v1alpha1", "kind": "Contact",
        "metadata": {"name": "acme-twin", "namespace": "acme"},
        "spec": {"displayName": "Twin", "role": "employee", "identifiers": {"phone": "+385 99 123 4567"}},
    }))
}

/// Reconciles each of `contacts` once, in order, against the stand-in, with caches
/// holding `bots`, `contacts` and `roles`. A Contact reconcile reads nothing from the API
/// server: every request in `steps` is a write.
async fn reconcile_each(
    contacts: Vec<Contact>,
    (bots, roles): (&[SaintBot], &[Role]),
    steps: Vec<Expect>,
) -> Vec<String> {
    let sources = sources(bots, &contacts, roles);
    let (results, seen) = with_stand_in(steps, |client| async move {
        let context = context(client, sources);
        let mut results = Vec::new();
        for contact in contacts {
            results.push(reconcile_contact(Arc::new(contact), context.clone()).await);
        }
        results
    })
    .await;
    for result in results {
        assert_eq!(
            result.expect("contact reconcile succeeds"),
            Action::await_change()
        );
    }
    seen
}

#[tokio::test]
async fn a_role_in_a_namespace_without_any_saintbot_gets_its_status() {
    let role: Role = object(json!({
        "apiVersion": "saint.work/v1alpha1", "kind": "Role",
        "metadata": {"name": "acme-clerk", "namespace": "acme", "generation": 2},
        "spec": {"tools": {"allow": ["read"]}},
    }));
    // No reads: a Role is judged alone, so no SaintBot is needed (or listed).
    let steps = vec![status_expectation(
        "/apis/saint.work/v1alpha1/namespaces/acme/roles/acme-clerk/status",
        to_value(&role),
        |status| {
            let ready = condition(status, "Ready");
            assert_eq!(ready["status"], "True", "{status}");
            assert_eq!(ready["reason"], "Valid", "{status}");
            assert_eq!(ready["lastTransitionTime"], NOW, "{status}");
            assert_eq!(status["observedGeneration"], 2, "{status}");
        },
    )];
    let (result, _) = with_stand_in(steps, |client| {
        reconcile_role(Arc::new(role), context(client, sources(&[], &[], &[])))
    })
    .await;
    assert_eq!(
        result.expect("role reconcile succeeds"),
        Action::await_change()
    );
}

#[tokio::test]
async fn an_invalid_role_is_not_ready_and_warns_once() {
    let mut role: Role = object(json!({
        "apiVersion": "saint.work/v1alpha1", "kind": "Role",
        "metadata": {"name": "acme-clerk", "namespace": "acme"},
        "spec": {"tools": {"allow": ["teleport*"]}},
    }));
    let steps = vec![
        status_expectation(
            "/apis/saint.work/v1alpha1/namespaces/acme/roles/acme-clerk/status",
            to_value(&role),
            |status| {
                let ready = condition(status, "Ready");
                assert_eq!(ready["status"], "False", "{status}");
                assert_eq!(ready["reason"], "InvalidSpec", "{status}");
                assert!(
                    ready["message"]
                        .as_str()
                        .unwrap()
                        .contains("spec.tools.allow"),
                    "{status}"
                );
            },
        ),
        object_event_expectation("acme-clerk", "InvalidSpec", "Warning"),
    ];
    let first = role.clone();
    with_stand_in(steps, |client| async move {
        reconcile_role(Arc::new(first), context(client, sources(&[], &[], &[])))
            .await
            .expect("role reconcile succeeds")
    })
    .await;
    // Reconciled again with that status stored: nothing to write, nothing to say.
    role.status = Some(
        saint_operator::references_controller::role_status::role_status(
            &role,
            &Time(NOW.parse().unwrap()),
        ),
    );
    let (_, seen) = with_stand_in(Vec::new(), |client| async move {
        reconcile_role(Arc::new(role), context(client, sources(&[], &[], &[])))
            .await
            .expect("role reconcile succeeds")
    })
    .await;
    assert!(seen.is_empty(), "{seen:?}");
}

#[tokio::test]
async fn a_contact_naming_an_unknown_role_is_not_ready_with_the_role_named_and_warns_once() {
    let mut contact: Contact = object(json!({
        "apiVersion": "saint.work/v1alpha1", "kind": "Contact",
        "metadata": {"name": "acme-ana", "namespace": "acme", "generation": 1},
        "spec": {"displayName": "Ana", "role": "visitor", "identifiers": {"email": "ana@acme.example"}},
    }));
    let mut steps = vec![contact_status_expectation(
        &contact,
        "RoleNotFound",
        0,
        |status| {
            let ready = condition(status, "Ready");
            assert_eq!(ready["status"], "False", "{status}");
            assert!(
                ready["message"].as_str().unwrap().contains("\"visitor\""),
                "the message names the role: {status}"
            );
            assert_eq!(status["observedGeneration"], 1, "{status}");
        },
    )];
    steps.push(object_event_expectation(
        "acme-ana",
        "RoleNotFound",
        "Warning",
    ));
    reconcile_each(vec![contact.clone()], (&[], &[]), steps).await;

    // The next reconcile sees that status stored: no request at all, no second Warning.
    let stored = saint_operator::references_controller::contact_status::contact_statuses(
        &[],
        std::slice::from_ref(&contact),
        &[],
        &Time(NOW.parse().unwrap()),
    );
    contact.status = Some(stored["acme-ana"].clone());
    let seen = reconcile_each(vec![contact], (&[], &[]), Vec::new()).await;
    assert!(seen.is_empty(), "{seen:?}");
}

#[tokio::test]
async fn the_example_contacts_are_linked() {
    let (bot, dereferenced) = load("acme.yaml");
    let contacts = dereferenced.contacts.clone();
    let mut steps = Vec::new();
    for contact in &contacts {
        steps.push(contact_status_expectation(contact, "Linked", 0, |_| {}));
    }
    reconcile_each(
        contacts,
        (std::slice::from_ref(&bot), &dereferenced.roles),
        steps,
    )
    .await;
}

#[tokio::test]
async fn every_example_role_is_valid() {
    let (_, dereferenced) = load("acme.yaml");
    let roles = dereferenced.roles.clone();
    let steps: Vec<Expect> = roles
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
        .collect();
    let cached = sources(&[], &[], &roles);
    with_stand_in(steps, |client| async move {
        let context = context(client, cached);
        for role in roles {
            reconcile_role(Arc::new(role), context.clone())
                .await
                .expect("role reconcile succeeds");
        }
    })
    .await;
}

#[tokio::test]
async fn a_phone_claimed_by_two_contacts_of_one_bot_is_reported_on_both_contacts() {
    let (bot, dereferenced) = load("acme.yaml");
    let mut contacts = dereferenced.contacts.clone();
    contacts.push(ana_twin());
    let mut steps = Vec::new();
    for contact in &contacts {
        let name = contact.metadata.name.clone().unwrap();
        if name == "acme-ana" || name == "acme-twin" {
            let (this, other) = if name == "acme-ana" {
                ("acme-ana", "acme-twin")
            } else {
                ("acme-twin", "acme-ana")
            };
            steps.push(contact_status_expectation(
                contact,
                "IdentifierConflict",
                1,
                move |status| {
                    assert_eq!(
                        status["conflicts"][0]["contacts"],
                        json!([other]),
                        "{status}"
                    );
                },
            ));
            steps.push(object_event_expectation(
                this,
                "IdentifierConflict",
                "Warning",
            ));
        } else {
            steps.push(contact_status_expectation(contact, "Linked", 0, |_| {}));
        }
    }
    reconcile_each(
        contacts,
        (std::slice::from_ref(&bot), &dereferenced.roles),
        steps,
    )
    .await;
}
