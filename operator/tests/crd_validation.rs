//! The CEL rules in the generated CRDs, evaluated client-side with kube's CEL validator
//! against the same schema the API server gets: good manifests pass, bad ones fail with a
//! message naming the field. (The real API server checks them again in `e2e/`.)

use kube::core::cel::validate_cel;
use saint_operator::crd::{Contact, Role, SaintBot};

fn errors<T: kube::CustomResourceExt + serde::Serialize>(object: &T) -> Vec<String> {
    match validate_cel(object) {
        Ok(()) => Vec::new(),
        Err(errors) => errors.iter().map(|error| error.message.clone()).collect(),
    }
}

fn contact(spec: serde_json::Value) -> Contact {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "saint.work/v1alpha1",
        "kind": "Contact",
        "metadata": {"name": "acme-ana", "namespace": "acme"},
        "spec": spec,
    }))
    .expect("contact parses")
}

fn role(name: &str, spec: serde_json::Value) -> Role {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "saint.work/v1alpha1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": "acme"},
        "spec": spec,
    }))
    .expect("role parses")
}

fn bot(spec: serde_json::Value) -> SaintBot {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "saint.work/v1alpha1",
        "kind": "SaintBot",
        "metadata": {"name": "my-bot", "namespace": "acme"},
        "spec": spec,
    }))
    .expect("bot parses")
}

#[test]
fn a_well_formed_contact_passes() {
    let good = contact(serde_json::json!({
        "displayName": "Ana", "role": "owner",
        "identifiers": {"phone": "+385991234567", "email": "ana@acme.hr", "telegram": "111", "slack": "U024BE7LH", "discord": "ana#1234"},
        "bots": ["my-bot"],
    }));
    assert_eq!(errors(&good), Vec::<String>::new());
}

#[test]
fn a_phone_that_is_not_e164_is_refused_naming_the_field() {
    let bad = contact(
        serde_json::json!({"displayName": "Ana", "role": "owner", "identifiers": {"phone": "099 123 4567"}}),
    );
    let messages = errors(&bad);
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(
        messages[0].starts_with("identifiers.phone must be E.164"),
        "{messages:?}"
    );
}

#[test]
fn a_bad_email_and_a_bad_role_name_are_both_refused() {
    let bad = contact(
        serde_json::json!({"displayName": "Ana", "role": "Owner!", "identifiers": {"email": "ana-at-acme"}}),
    );
    let messages = errors(&bad).join("\n");
    assert!(
        messages.contains("identifiers.email must be an email address"),
        "{messages}"
    );
    assert!(
        messages.contains("role must be a DNS-1123 label"),
        "{messages}"
    );
}

#[test]
fn role_tools_must_be_known_tools_groups_or_globs() {
    let good = role(
        "employee",
        serde_json::json!({"tools": {"allow": ["exec", "group:web", "sessions_*"], "deny": ["group:runtime"]}}),
    );
    assert_eq!(errors(&good), Vec::<String>::new());
    let bad = role(
        "employee",
        serde_json::json!({"tools": {"allow": ["shell"], "deny": ["group:nope"]}}),
    );
    let messages = errors(&bad).join("\n");
    assert!(
        messages.contains("tools.allow entries must be known tools"),
        "{messages}"
    );
    assert!(
        messages.contains("tools.deny entries must be known tools"),
        "{messages}"
    );
}

#[test]
fn a_negative_budget_and_a_bad_role_name_are_refused() {
    let bad = role(
        "Bad_Name",
        serde_json::json!({"budget": {"usd": -1.0, "period": "month"}}),
    );
    let messages = errors(&bad).join("\n");
    assert!(messages.contains("budget.usd must be ≥ 0"), "{messages}");
    assert!(
        messages.contains("metadata.name of a Role must be a DNS-1123 label"),
        "{messages}"
    );
}

#[test]
fn unknown_bootstrap_files_and_lonely_wildcard_skills_are_checked() {
    let bad = role(
        "owner",
        serde_json::json!({"bootstrap": ["SOUL.md", "SECRETS.md"], "skills": ["*", "scheduling"]}),
    );
    let messages = errors(&bad).join("\n");
    assert!(
        messages.contains("bootstrap entries must be one of"),
        "{messages}"
    );
    assert!(
        messages.contains("skills: '*' (all skills) must be the only entry"),
        "{messages}"
    );
}

#[test]
fn secret_key_references_need_name_and_key() {
    let bad = bot(serde_json::json!({
        "model": {"provider": "anthropic", "name": "claude-sonnet-4-5", "apiKeySecretRef": {"name": "llm", "key": ""}},
        "channels": [{"name": "wa", "kind": "whatsapp", "secrets": {"accessToken": {"name": "", "key": "token"}}}],
    }));
    let messages = errors(&bad).join("\n");
    assert!(
        messages.contains("model.apiKeySecretRef must name both a Secret"),
        "{messages}"
    );
    assert!(
        messages.contains("channels[].secrets values must name both a Secret"),
        "{messages}"
    );
}

#[test]
fn duplicate_channel_names_and_relative_cli_paths_are_refused() {
    let bad = bot(serde_json::json!({
        "model": {"provider": "openai", "name": "m"},
        "channels": [{"name": "api", "kind": "http"}, {"name": "api", "kind": "http"}],
        "porter": {"clis": [{"name": "gh", "bin": "gh"}]},
    }));
    let messages = errors(&bad).join("\n");
    assert!(
        messages.contains("channels[].name must be unique"),
        "{messages}"
    );
    assert!(
        messages.contains("porter.clis[].bin must be an absolute path"),
        "{messages}"
    );
}

#[test]
fn crds_have_status_subresource_short_names_and_list_map_conditions() {
    use kube::CustomResourceExt;
    let bot_crd = serde_json::to_value(SaintBot::crd()).unwrap();
    assert_eq!(
        bot_crd["spec"]["names"]["shortNames"],
        serde_json::json!(["sbot"])
    );
    assert_eq!(
        bot_crd["spec"]["versions"][0]["subresources"]["status"],
        serde_json::json!({})
    );
    let conditions = &bot_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
        ["properties"]["conditions"];
    assert_eq!(conditions["x-kubernetes-list-type"], "map");
    assert_eq!(
        conditions["x-kubernetes-list-map-keys"],
        serde_json::json!(["type"])
    );
    let role_crd = serde_json::to_value(Role::crd()).unwrap();
    let short_names = role_crd["spec"]["names"]["shortNames"].as_array().unwrap();
    assert!(
        !short_names.iter().any(|name| name == "role"),
        "must not collide with RBAC role"
    );
    assert_eq!(
        serde_json::to_value(Contact::crd()).unwrap()["spec"]["names"]["shortNames"],
        serde_json::json!(["ct"])
    );
}

#[test]
fn an_injected_cli_without_hosts_is_refused_and_one_with_hosts_passes() {
    let cli = |extra: serde_json::Value| {
        let mut cli = serde_json::json!({"name": "gh", "bin": "/usr/bin/gh"});
        cli.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        bot(serde_json::json!({
            "model": {"provider": "openai", "name": "m"},
            "porter": {"clis": [cli]},
        }))
    };
    let without_hosts = errors(&cli(serde_json::json!({"inject": true}))).join("\n");
    assert!(
        without_hosts.contains("inject: true needs hosts"),
        "{without_hosts}"
    );
    let requests_in_env_mode = errors(&cli(serde_json::json!({
        "inject": false, "hosts": ["api.github.com"],
        "requests": {"employee": [{"methods": ["GET"], "paths": ["/repos/**"]}]},
    })))
    .join("\n");
    assert!(
        requests_in_env_mode.contains("requests applies to injected CLIs"),
        "{requests_in_env_mode}"
    );
    let bad_host = errors(&cli(
        serde_json::json!({"hosts": ["https://api.github.com/"]}),
    ))
    .join("\n");
    assert!(
        bad_host.contains("hosts[] must be host names"),
        "{bad_host}"
    );
    let good = cli(serde_json::json!({
        "hosts": ["api.github.com", "github.com", "ghe.acme.hr:8443"],
        "requests": {
            "employee": [{"methods": ["POST"], "paths": ["/graphql"], "graphql": {"queries": true}}],
            "owner": [{"methods": ["*"], "paths": ["/**"]}],
        },
    }));
    assert_eq!(errors(&good), Vec::<String>::new());
}
