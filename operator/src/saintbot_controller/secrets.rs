//! The Secrets a bot's pod needs, and which of them (or which of their keys) do not
//! exist. The list comes from the Deployment as built (every `secretKeyRef`,
//! `secretRef`, Secret volume and its items, and image pull Secret in its pod template),
//! so it cannot disagree with what the kubelet will resolve. A Secret is read to learn
//! its key names; its values are dropped unread, never kept or logged (the Secret's
//! `data` lives only inside [`missing`]).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::{apps::v1::Deployment, core::v1::Secret};
use kube::{Api, Client};

/// One Secret the pod needs, and what for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretUse {
    /// The Secret's name.
    pub name: String,
    /// What needs it, e.g. `env OPENAI_API_KEY of container agent (key api-key)`.
    pub uses: Vec<String>,
    /// The keys that must exist in it, each with what needs it.
    pub keys: Vec<(String, String)>,
}

/// What a pod needs and does not find.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Missing {
    /// The Secret does not exist.
    Secret(SecretUse),
    /// The Secret exists without these keys (key, what needs it).
    Keys {
        name: String,
        keys: Vec<(String, String)>,
    },
}

/// Every required (non-optional) Secret the pod template of `deployment` names, by name.
pub fn secret_uses(deployment: &Deployment) -> Vec<SecretUse> {
    let mut uses: BTreeMap<String, SecretUse> = BTreeMap::new();
    let mut add = |name: &str, optional: Option<bool>, what: String, keys: Vec<&str>| {
        if optional != Some(true) && !name.is_empty() {
            let entry = uses.entry(name.to_string()).or_insert_with(|| SecretUse {
                name: name.to_string(),
                uses: Vec::new(),
                keys: Vec::new(),
            });
            entry
                .keys
                .extend(keys.into_iter().map(|key| (key.to_string(), what.clone())));
            entry.uses.push(what);
        }
    };
    let item_keys = |items: &Option<Vec<k8s_openapi::api::core::v1::KeyToPath>>| -> Vec<String> {
        items
            .iter()
            .flatten()
            .map(|item| item.key.clone())
            .collect()
    };
    let Some(pod) = deployment
        .spec
        .as_ref()
        .and_then(|spec| spec.template.spec.as_ref())
    else {
        return Vec::new();
    };
    let containers = pod
        .init_containers
        .iter()
        .flatten()
        .chain(pod.containers.iter());
    for container in containers {
        for env in container.env.iter().flatten() {
            if let Some(reference) = env
                .value_from
                .as_ref()
                .and_then(|source| source.secret_key_ref.as_ref())
            {
                add(
                    &reference.name,
                    reference.optional,
                    format!(
                        "env {} of container {} (key {})",
                        env.name, container.name, reference.key
                    ),
                    vec![reference.key.as_str()],
                );
            }
        }
        for source in container.env_from.iter().flatten() {
            if let Some(reference) = &source.secret_ref {
                add(
                    &reference.name,
                    reference.optional,
                    format!("envFrom of container {}", container.name),
                    Vec::new(),
                );
            }
        }
    }
    for volume in pod.volumes.iter().flatten() {
        if let Some(secret) = &volume.secret {
            let keys = item_keys(&secret.items);
            add(
                secret.secret_name.as_deref().unwrap_or_default(),
                secret.optional,
                format!("volume {}", volume.name),
                keys.iter().map(String::as_str).collect(),
            );
        }
        for source in volume
            .projected
            .iter()
            .flat_map(|projected| projected.sources.iter().flatten())
        {
            if let Some(secret) = &source.secret {
                let keys = item_keys(&secret.items);
                add(
                    &secret.name,
                    secret.optional,
                    format!("projected volume {}", volume.name),
                    keys.iter().map(String::as_str).collect(),
                );
            }
        }
    }
    for pull in pod.image_pull_secrets.iter().flatten() {
        add(&pull.name, None, "imagePullSecrets".to_string(), Vec::new());
    }
    uses.into_values().collect()
}

/// The `uses` whose Secret does not exist in `namespace`, or lacks a key they need (one
/// GET each; only the key names are looked at).
pub async fn missing(
    client: &Client,
    namespace: &str,
    uses: Vec<SecretUse>,
) -> Result<Vec<Missing>, kube::Error> {
    let api = Api::<Secret>::namespaced(client.clone(), namespace);
    let mut missing = Vec::new();
    for secret in uses {
        let key_names = api.get_opt(&secret.name).await?.map(key_names);
        missing.extend(judge(secret, key_names));
    }
    Ok(missing)
}

/// The key names of a Secret; its values are dropped here.
fn key_names(secret: Secret) -> BTreeSet<String> {
    secret.data.unwrap_or_default().into_keys().collect()
}

/// What `secret` misses, given the key names of the stored Secret (`None`: it does not
/// exist).
fn judge(secret: SecretUse, key_names: Option<BTreeSet<String>>) -> Option<Missing> {
    let Some(key_names) = key_names else {
        return Some(Missing::Secret(secret));
    };
    let keys: Vec<(String, String)> = secret
        .keys
        .into_iter()
        .filter(|(key, _)| !key_names.contains(key))
        .collect();
    (!keys.is_empty()).then_some(Missing::Keys {
        name: secret.name,
        keys,
    })
}

/// The status message for what is missing.
pub fn describe(missing: &[Missing], namespace: &str) -> String {
    let listed: Vec<String> = missing
        .iter()
        .map(|missing| match missing {
            Missing::Secret(secret) => format!(
                "Secret {:?} (for {}) does not exist in namespace {namespace}",
                secret.name,
                secret.uses.join(", ")
            ),
            Missing::Keys { name, keys } => {
                let keys: Vec<String> = keys
                    .iter()
                    .map(|(key, what)| format!("{key:?} (for {what})"))
                    .collect();
                format!(
                    "Secret {name:?} in namespace {namespace} has no key {}",
                    keys.join(", no key ")
                )
            }
        })
        .collect();
    format!("the bot pod cannot start: {}", listed.join("; "))
}

/// The webhook Ingress's TLS Secret (`spec.webhookIngress.tlsSecretName`) when it does
/// not exist in `namespace` (one metadata GET, made with the pod's checks: a Secret
/// deleted under a ready bot is not noticed): the status message naming it, else `None`. Without it the ingress
/// controller serves its default certificate, which Meta, Slack and Telegram refuse.
pub async fn missing_tls_secret(
    client: &Client,
    namespace: &str,
    ingress: Option<&k8s_openapi::api::networking::v1::Ingress>,
) -> Result<Option<String>, kube::Error> {
    let names: BTreeSet<&str> = ingress
        .and_then(|ingress| ingress.spec.as_ref())
        .and_then(|spec| spec.tls.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|tls| tls.secret_name.as_deref())
        .collect();
    let api = Api::<Secret>::namespaced(client.clone(), namespace);
    for name in names {
        if api.get_metadata_opt(name).await?.is_none() {
            return Ok(Some(format!(
                "the webhook Ingress cannot serve HTTPS: Secret {name:?} \
                 (spec.webhookIngress.tlsSecretName) does not exist in namespace {namespace}"
            )));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_required_secret_of_the_pod_template_is_found_once_with_its_uses() {
        let deployment: Deployment = serde_json::from_value(json!({
            "spec": {
                "selector": {},
                "template": {"spec": {
                    "imagePullSecrets": [{"name": "registry"}],
                    "containers": [
                        {"name": "agent", "env": [
                            {"name": "OPENAI_API_KEY", "valueFrom": {"secretKeyRef": {"name": "llm", "key": "api-key"}}},
                            {"name": "OPTIONAL", "valueFrom": {"secretKeyRef": {"name": "maybe", "key": "k", "optional": true}}},
                            {"name": "PLAIN", "value": "x"}
                        ]},
                        {"name": "porter", "envFrom": [{"secretRef": {"name": "gh"}}], "env": [
                            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "llm", "key": "other"}}}
                        ]}
                    ],
                    "volumes": [
                        {"name": "tls", "secret": {"secretName": "tls-cert"}},
                        {"name": "both", "projected": {"sources": [{"secret": {"name": "projected-one"}}]}}
                    ]
                }}
            }
        }))
        .unwrap();
        let uses = secret_uses(&deployment);
        let names: Vec<&str> = uses.iter().map(|secret| secret.name.as_str()).collect();
        assert_eq!(
            names,
            ["gh", "llm", "projected-one", "registry", "tls-cert"]
        );
        let llm = &uses[1];
        assert_eq!(
            llm.uses,
            [
                "env OPENAI_API_KEY of container agent (key api-key)",
                "env TOKEN of container porter (key other)"
            ]
        );
        assert_eq!(
            llm.keys,
            [
                (
                    "api-key".to_string(),
                    "env OPENAI_API_KEY of container agent (key api-key)".to_string()
                ),
                (
                    "other".to_string(),
                    "env TOKEN of container porter (key other)".to_string()
                )
            ]
        );
        let missing: Vec<Missing> = uses[..2].iter().cloned().map(Missing::Secret).collect();
        let message = describe(&missing, "acme");
        assert!(message.contains("Secret \"gh\" (for envFrom of container porter)"));
        assert!(message.contains("namespace acme"), "{message}");
    }

    #[test]
    fn a_missing_key_is_named_with_what_needs_it_and_present_keys_are_not() {
        let llm = SecretUse {
            name: "llm".into(),
            uses: vec!["env A of container agent (key api-key)".into()],
            keys: vec![
                (
                    "api-key".into(),
                    "env A of container agent (key api-key)".into(),
                ),
                ("org".into(), "env B of container agent (key org)".into()),
            ],
        };
        let present = |keys: &[&str]| Some(keys.iter().map(|key| key.to_string()).collect());
        assert_eq!(judge(llm.clone(), present(&["api-key", "org", "x"])), None);
        assert_eq!(judge(llm.clone(), None), Some(Missing::Secret(llm.clone())));
        let missing = judge(llm, present(&["org"])).unwrap();
        assert_eq!(
            describe(&[missing], "acme"),
            "the bot pod cannot start: Secret \"llm\" in namespace acme has no key \"api-key\" \
             (for env A of container agent (key api-key))"
        );
    }
}
