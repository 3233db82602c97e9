//! The Secrets a bot's pod needs, and which of them do not exist. The list comes from
//! the Deployment as built (every `secretKeyRef`, `secretRef`, Secret volume and image
//! pull Secret in its pod template), so it cannot disagree with what the kubelet will
//! resolve. Existence is checked through metadata only: the operator never reads a
//! Secret's values. Keys cannot be checked that way (they live beside the values); a
//! missing key shows as the pod's `CreateContainerConfigError`.

use std::collections::BTreeMap;

use k8s_openapi::api::{apps::v1::Deployment, core::v1::Secret};
use kube::{Api, Client};

/// One Secret the pod needs, and what for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretUse {
    /// The Secret's name.
    pub name: String,
    /// What needs it, e.g. `env OPENAI_API_KEY of container agent (key api-key)`.
    pub uses: Vec<String>,
}

/// Every required (non-optional) Secret the pod template of `deployment` names, by name.
pub fn secret_uses(deployment: &Deployment) -> Vec<SecretUse> {
    let mut uses: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut add = |name: &str, optional: Option<bool>, what: String| {
        if optional != Some(true) && !name.is_empty() {
            uses.entry(name.to_string()).or_default().push(what);
        }
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
                );
            }
        }
        for source in container.env_from.iter().flatten() {
            if let Some(reference) = &source.secret_ref {
                add(
                    &reference.name,
                    reference.optional,
                    format!("envFrom of container {}", container.name),
                );
            }
        }
    }
    for volume in pod.volumes.iter().flatten() {
        if let Some(secret) = &volume.secret {
            add(
                secret.secret_name.as_deref().unwrap_or_default(),
                secret.optional,
                format!("volume {}", volume.name),
            );
        }
        for source in volume
            .projected
            .iter()
            .flat_map(|projected| projected.sources.iter().flatten())
        {
            if let Some(secret) = &source.secret {
                add(
                    &secret.name,
                    secret.optional,
                    format!("projected volume {}", volume.name),
                );
            }
        }
    }
    for pull in pod.image_pull_secrets.iter().flatten() {
        add(&pull.name, None, "imagePullSecrets".to_string());
    }
    uses.into_iter()
        .map(|(name, uses)| SecretUse { name, uses })
        .collect()
}

/// The `uses` whose Secret does not exist in `namespace` (one metadata GET each).
pub async fn missing(
    client: &Client,
    namespace: &str,
    uses: Vec<SecretUse>,
) -> Result<Vec<SecretUse>, kube::Error> {
    let api = Api::<Secret>::namespaced(client.clone(), namespace);
    let mut missing = Vec::new();
    for secret in uses {
        if api.get_metadata_opt(&secret.name).await?.is_none() {
            missing.push(secret);
        }
    }
    Ok(missing)
}

/// The status message for missing Secrets.
pub fn describe(missing: &[SecretUse], namespace: &str) -> String {
    let listed: Vec<String> = missing
        .iter()
        .map(|secret| format!("{:?} (for {})", secret.name, secret.uses.join(", ")))
        .collect();
    format!(
        "the bot pod cannot start: Secret {} does not exist in namespace {namespace}",
        listed.join("; Secret ")
    )
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
        let message = describe(&uses[..2], "acme");
        assert!(message.contains("Secret \"gh\" (for envFrom of container porter)"));
        assert!(message.contains("namespace acme"), "{message}");
    }
}
