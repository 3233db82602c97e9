//! The references controller on a real control plane: the chart installed with
//! `helm install`, the operator running as the chart's ServiceAccount.
//! - A namespace holding a Role and a Contact but no SaintBot: both get their
//!   status from the operator all the same.
//! - A bot selecting a Role whose tool pattern matches no tool: that Role gets
//!   its own condition and Event, the bot keeps rendering its config without
//!   it (the Contact holding it left out), and every other Contact keeps working.
//!
//! Every assertion reads the API server.

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::{
    Api,
    api::{DynamicObject, ListParams},
    core::{ApiResource, GroupVersionKind},
};
use saint_config::BotConfig;
use saint_e2e::{
    Environment, Failure, TestResult, chart,
    company_bot::{
        CONVERGE_TIMEOUT, condition, condition_state, contact_resource, saintbot_resource,
    },
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

/// Waits for a Warning Event with `reason` about the object `kind`/`name`.
async fn wait_warning(
    events: &Api<Event>,
    reason: &str,
    kind: &str,
    name: &str,
) -> Result<(), wait::WaitError> {
    wait::until(
        &format!("a {reason} Warning about {kind} {name}"),
        CONVERGE_TIMEOUT,
        || async {
            let list = events
                .list(&ListParams::default())
                .await
                .map_err(|error| error.to_string())?;
            let found = list.items.iter().any(|event| {
                event.reason.as_deref() == Some(reason)
                    && event.type_.as_deref() == Some("Warning")
                    && event.involved_object.kind.as_deref() == Some(kind)
                    && event.involved_object.name.as_deref() == Some(name)
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
    .await
}

/// The `message` of condition `type_`, empty when absent.
fn condition_message(status: &Value, type_: &str) -> String {
    condition(status, type_)
        .and_then(|found| found.get("message"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Fails with the operator's log lines where the API server refused it for RBAC.
fn no_rbac_refusals(operator_log: &str) -> TestResult {
    let forbidden: Vec<&str> = operator_log
        .lines()
        .filter(|line| {
            line.contains("forbidden") && line.contains(" cannot ") && line.contains("resource")
        })
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
    wait_warning(&events, "RoleNotFound", "Contact", "vesna").await?;

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
    no_rbac_refusals(&operator_log)?;
    namespace_deleted?;
    Ok(())
}

/// A bot selecting every Role of its namespace: `visitor` (its default), `clerk`
/// (held by Vesna) and `teleporter`, whose only tool pattern matches no tool
/// (held by Mirko). The CRD admits the pattern (it is a glob over tool names);
/// only the operator can tell that it matches nothing.
const TWO_ROLES: &str = r#"
apiVersion: saint.work/v1alpha1
kind: Role
metadata:
  name: visitor
spec:
  tools:
    allow: [read]
---
apiVersion: saint.work/v1alpha1
kind: Role
metadata:
  name: clerk
spec:
  tools:
    allow: [read, write]
---
apiVersion: saint.work/v1alpha1
kind: Role
metadata:
  name: teleporter
spec:
  tools:
    allow: ["teleport*"]
---
apiVersion: saint.work/v1alpha1
kind: Contact
metadata:
  name: vesna
spec:
  displayName: Vesna
  role: clerk
  identifiers: {email: vesna@acme.example}
---
apiVersion: saint.work/v1alpha1
kind: Contact
metadata:
  name: mirko
spec:
  displayName: Mirko
  role: teleporter
  identifiers: {email: mirko@acme.example}
---
apiVersion: saint.work/v1alpha1
kind: SaintBot
metadata:
  name: roles-bot
spec:
  model: {provider: anthropic, name: claude-sonnet-4-5}
  defaultRole: visitor
"#;

/// A Contact created after the bot converged: its arrival must reach the config.
const ZORA: &str = r#"
apiVersion: saint.work/v1alpha1
kind: Contact
metadata:
  name: zora
spec:
  displayName: Zora
  role: clerk
  identifiers: {email: zora@acme.example}
"#;

/// The teleporter Role fixed: its pattern now matches the web tools.
const TELEPORTER_FIXED: &str = r#"
apiVersion: saint.work/v1alpha1
kind: Role
metadata:
  name: teleporter
spec:
  tools:
    allow: ["web_*"]
"#;

/// The rendered config of `bot`, read from its ConfigMap.
async fn rendered_config(configs: &Api<ConfigMap>, bot: &str) -> Result<BotConfig, String> {
    let config_map = configs
        .get(&format!("{bot}-config"))
        .await
        .map_err(|error| error.to_string())?;
    let text = config_map
        .data
        .and_then(|mut data| data.remove("bot-config.json"))
        .ok_or("no bot-config.json key")?;
    BotConfig::from_json(&text).map_err(|error| error.to_string())
}

/// Roles and contact slugs of a rendered config, sorted.
fn roles_and_contacts(config: &BotConfig) -> (Vec<String>, Vec<String>) {
    let roles = config.roles.keys().cloned().collect();
    let mut contacts: Vec<String> = config
        .contacts
        .iter()
        .map(|contact| contact.slug.as_str().to_owned())
        .collect();
    contacts.sort();
    (roles, contacts)
}

/// Waits until the rendered config holds exactly `roles` and `contacts`.
async fn wait_rendered(
    configs: &Api<ConfigMap>,
    roles: &[&str],
    contacts: &[&str],
    log: impl Fn() -> String,
) -> Result<BotConfig, wait::WaitError> {
    let wanted = (
        roles
            .iter()
            .map(|role| role.to_string())
            .collect::<Vec<_>>(),
        contacts
            .iter()
            .map(|slug| slug.to_string())
            .collect::<Vec<_>>(),
    );
    wait::until(
        &format!("roles-bot's config with roles {roles:?} and contacts {contacts:?}"),
        CONVERGE_TIMEOUT,
        || async {
            let config = rendered_config(configs, "roles-bot").await?;
            let found = roles_and_contacts(&config);
            if found == wanted {
                Ok(config)
            } else {
                Err(format!(
                    "roles and contacts {found:?}\noperator log:\n{}",
                    log()
                ))
            }
        },
    )
    .await
}

#[tokio::test]
async fn a_role_whose_tool_pattern_matches_no_tool_is_reported_and_stops_no_bot() -> TestResult {
    let environment = Environment::from_env()?;
    let admin = environment.admin_client().await?;
    let install = chart::install(&environment, &admin, "roles", &[]).await?;
    let operator = install.start_operator(&environment, "roles-0")?;
    let namespace = namespace::create(&admin, "refs-roles", false).await?;
    manifests::apply_all(&admin, TWO_ROLES, &namespace).await?;
    let log = || operator.process.log_tail(20);

    let roles = Api::<DynamicObject>::namespaced_with(admin.clone(), &namespace, &role_resource());
    let contacts =
        Api::<DynamicObject>::namespaced_with(admin.clone(), &namespace, &contact_resource());
    let bots =
        Api::<DynamicObject>::namespaced_with(admin.clone(), &namespace, &saintbot_resource());
    let configs = Api::<ConfigMap>::namespaced(admin.clone(), &namespace);
    let events = Api::<Event>::namespaced(admin.clone(), &namespace);

    // The Role gets its own condition naming the field and the pattern, and a Warning.
    let role_status = wait_ready(
        &roles,
        "Role teleporter Ready=False/InvalidSpec",
        "teleporter",
        |status| condition_state(status, "Ready") == ("False".into(), "InvalidSpec".into()),
        log,
    )
    .await?;
    let message = condition_message(&role_status, "Ready");
    assert!(
        message.contains("spec.tools.allow") && message.contains("\"teleport*\""),
        "the Role's message names the field and the pattern: {message}"
    );
    wait_warning(&events, "InvalidSpec", "Role", "teleporter").await?;

    // The bot renders without that Role and without Mirko, who holds it; Vesna's
    // role is fine, so she is in the config.
    wait_rendered(&configs, &["clerk", "visitor"], &["vesna"], log).await?;
    let bot_status = wait_ready(
        &bots,
        "roles-bot status for its generation, Ready=False/PodNotReady (no kubelet)",
        "roles-bot",
        |status| {
            status.get("observedGeneration").and_then(Value::as_i64) == Some(1)
                && condition_state(status, "Ready") == ("False".into(), "PodNotReady".into())
                && condition_state(status, "ConfigRendered").0 == "True"
        },
        log,
    )
    .await?;
    // Left out, not silently: the bot's status names the Contact and the Role.
    let linked = condition_message(&bot_status, "IdentitiesLinked");
    assert_eq!(
        condition_state(&bot_status, "IdentitiesLinked").0,
        "False",
        "status: {bot_status}"
    );
    assert!(
        linked.contains("mirko") && linked.contains("teleporter"),
        "the bot's status names the left-out Contact and its Role: {linked}"
    );
    let mirko = wait_ready(
        &contacts,
        "Contact mirko Ready=False/RoleNotFound",
        "mirko",
        |status| condition_state(status, "Ready") == ("False".into(), "RoleNotFound".into()),
        log,
    )
    .await?;
    let message = condition_message(&mirko, "Ready");
    assert!(
        message.contains("\"teleporter\", which is invalid") && message.contains("teleport*"),
        "Mirko's status says why he is left out: {message}"
    );

    // Config updates go on: a new Contact reaches the config.
    manifests::apply_all(&admin, ZORA, &namespace).await?;
    wait_rendered(&configs, &["clerk", "visitor"], &["vesna", "zora"], log).await?;

    // Fixing the Role brings it and Mirko back.
    manifests::apply_all(&admin, TELEPORTER_FIXED, &namespace).await?;
    wait_ready(
        &roles,
        "Role teleporter Ready=True/Valid once fixed",
        "teleporter",
        |status| condition_state(status, "Ready") == ("True".into(), "Valid".into()),
        log,
    )
    .await?;
    wait_rendered(
        &configs,
        &["clerk", "teleporter", "visitor"],
        &["mirko", "vesna", "zora"],
        log,
    )
    .await?;
    wait_ready(
        &contacts,
        "Contact mirko Ready=True/Linked once his Role is fixed",
        "mirko",
        |status| condition_state(status, "Ready") == ("True".into(), "Linked".into()),
        log,
    )
    .await?;

    let operator_log = operator.process.log();
    let namespace_deleted = namespace::delete(&admin, &namespace).await;
    no_rbac_refusals(&operator_log)?;
    namespace_deleted?;
    Ok(())
}
