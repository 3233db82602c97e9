//! The references controller on a real control plane: the chart installed with
//! `helm install`, the operator running as the chart's ServiceAccount, and a
//! namespace holding a Role and a Contact but no SaintBot. Both get their status
//! from the operator all the same. Every assertion reads the API server.

use k8s_openapi::api::core::v1::Event;
use kube::{
    Api,
    api::{DynamicObject, ListParams},
    core::{ApiResource, GroupVersionKind},
};
use saint_e2e::{
    Environment, Failure, TestResult, chart,
    company_bot::{CONVERGE_TIMEOUT, condition, condition_state, contact_resource},
    manifests, namespace, wait,
};
use serde_json::Value;

const PEOPLE: &str = r#"
apiVersion: saint.work/v1alpha1
kind: Role
metadata:
  name: clerk
spec:
  description: Files and nothing else
  tools:
    allow: [read]
---
apiVersion: saint.work/v1alpha1
kind: Contact
metadata:
  name: vesna
spec:
  displayName: Vesna
  role: visitor
  identifiers: {email: vesna@acme.example}
"#;

const VISITOR: &str = r#"
apiVersion: saint.work/v1alpha1
kind: Role
metadata:
  name: visitor
spec:
  tools:
    allow: [web_search]
"#;

fn role_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("saint.work", "v1alpha1", "Role"),
        "roles",
    )
}

/// Waits until `api`'s object `name` has a `Ready` condition that `accept`s;
/// returns the whole status.
async fn wait_ready(
    api: &Api<DynamicObject>,
    what: &str,
    name: &str,
    accept: impl Fn(&Value) -> bool,
    log: impl Fn() -> String,
) -> Result<Value, wait::WaitError> {
    wait::until(what, CONVERGE_TIMEOUT, || async {
        let object = api.get(name).await.map_err(|error| error.to_string())?;
        let status = object.data.get("status").cloned().unwrap_or(Value::Null);
        if accept(&status) {
            Ok(status)
        } else {
            Err(format!("status {status}\noperator log:\n{}", log()))
        }
    })
    .await
}

#[tokio::test]
async fn a_role_and_a_contact_in_a_namespace_without_any_saintbot_get_their_status() -> TestResult {
    let environment = Environment::from_env()?;
    let admin = environment.admin_client().await?;
    let install = chart::install(&environment, &admin, "refs", &[]).await?;
    let operator = install.start_operator(&environment, "refs-0")?;
    let people = namespace::create(&admin, "refs-people", false).await?;
    manifests::apply_all(&admin, PEOPLE, &people).await?;
    let log = || operator.process.log_tail(20);

    let roles = Api::<DynamicObject>::namespaced_with(admin.clone(), &people, &role_resource());
    let contacts =
        Api::<DynamicObject>::namespaced_with(admin.clone(), &people, &contact_resource());
    let role_status = wait_ready(
        &roles,
        "Role clerk Ready=True/Valid",
        "clerk",
        |status| condition_state(status, "Ready") == ("True".into(), "Valid".into()),
        log,
    )
    .await?;
    assert_eq!(
        role_status
            .get("observedGeneration")
            .and_then(Value::as_i64),
        Some(1),
        "status: {role_status}"
    );

    let contact_status = wait_ready(
        &contacts,
        "Contact vesna Ready=False/RoleNotFound",
        "vesna",
        |status| condition_state(status, "Ready") == ("False".into(), "RoleNotFound".into()),
        log,
    )
    .await?;
    let message = condition(&contact_status, "Ready")
        .and_then(|ready| ready.get("message"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("\"visitor\""),
        "the message names the missing role: {message}"
    );

    // The problem is also a Warning Event about the Contact.
    let events = Api::<Event>::namespaced(admin.clone(), &people);
    wait::until(
        "a RoleNotFound Warning about Contact vesna",
        CONVERGE_TIMEOUT,
        || async {
            let list = events
                .list(&ListParams::default())
                .await
                .map_err(|error| error.to_string())?;
            let found = list.items.iter().any(|event| {
                event.reason.as_deref() == Some("RoleNotFound")
                    && event.type_.as_deref() == Some("Warning")
                    && event.involved_object.kind.as_deref() == Some("Contact")
                    && event.involved_object.name.as_deref() == Some("vesna")
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

    // Creating the role wakes the Contact naming it: healthy, though no bot uses it.
    manifests::apply_all(&admin, VISITOR, &people).await?;
    wait_ready(
        &contacts,
        "Contact vesna Ready=True/Unused once Role visitor exists",
        "vesna",
        |status| condition_state(status, "Ready") == ("True".into(), "Unused".into()),
        log,
    )
    .await?;

    let operator_log = operator.process.log();
    let namespace_deleted = namespace::delete(&admin, &people).await;
    let forbidden: Vec<&str> = operator_log
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
    namespace_deleted?;
    Ok(())
}
