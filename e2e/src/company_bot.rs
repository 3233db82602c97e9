//! The chart's example company bot (`acme-assistant`) applied into a fresh
//! namespace enforcing Pod Security "restricted", and what scenarios read back
//! about it through the API server: status, rendered config, children.

use std::time::Duration;

use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet},
    core::v1::{ConfigMap, Pod},
};
use kube::{
    Api, Client,
    api::{DynamicObject, ListParams},
    core::{ApiResource, GroupVersionKind},
};
use saint_config::BotConfig;
use serde_json::Value;

use crate::{Environment, examples, manifests, namespace, wait};

/// Name of the example bot.
pub const BOT: &str = "acme-assistant";

/// Longest a scenario waits for the operator (2-core machines, debug builds).
pub const CONVERGE_TIMEOUT: Duration = Duration::from_secs(120);

/// Something about the example bot could not be set up or read.
#[derive(Debug, thiserror::Error)]
pub enum CompanyBotError {
    #[error(transparent)]
    Namespace(#[from] namespace::NamespaceError),
    #[error(transparent)]
    Example(#[from] examples::ExampleError),
    #[error(transparent)]
    Manifest(#[from] manifests::ManifestError),
    #[error("failed to read {what}: {message}")]
    Read { what: String, message: String },
    #[error("failed to parse the rendered config: {0}")]
    Config(String),
}

/// The example bot in its namespace.
#[derive(Clone)]
pub struct CompanyBot {
    pub client: Client,
    pub namespace: String,
}

/// The `SaintBot` API resource.
pub fn saintbot_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("saint.work", "v1alpha1", "SaintBot"),
        "saintbots",
    )
}

/// The `Contact` API resource.
pub fn contact_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("saint.work", "v1alpha1", "Contact"),
        "contacts",
    )
}

fn read_error(what: &str, error: &kube::Error) -> CompanyBotError {
    CompanyBotError::Read {
        what: what.to_owned(),
        message: crate::api_message(error),
    }
}

/// The condition of `type_` in a status object, if any.
pub fn condition<'a>(status: &'a Value, type_: &str) -> Option<&'a Value> {
    status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|condition| condition.get("type").and_then(Value::as_str) == Some(type_))
}

/// `(status, reason)` of a condition, empty strings when absent.
pub fn condition_state(status: &Value, type_: &str) -> (String, String) {
    let field = |name: &str| {
        condition(status, type_)
            .and_then(|condition| condition.get(name))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (field("status"), field("reason"))
}

/// The example's `webhookIngress.host`.
pub const EXAMPLE_WEBHOOK_HOST: &str = "saint.company.hr";

/// The webhook host a [`CompanyBot`] in `namespace` asks for: the example's, under a
/// name of its own. One bot owns a host and path (the earliest), so every scenario's
/// bot gets its own; a bot a scenario left behind cannot take the next one's Ingress.
pub fn webhook_host(namespace: &str) -> String {
    format!("{namespace}.{EXAMPLE_WEBHOOK_HOST}")
}

/// The example `saintbot.yaml` with its webhook host made [`webhook_host`]`(namespace)`.
pub fn with_own_webhook_host(saintbot_yaml: &str, namespace: &str) -> String {
    saintbot_yaml.replace(
        &format!("host: {EXAMPLE_WEBHOOK_HOST}"),
        &format!("host: {}", webhook_host(namespace)),
    )
}

impl CompanyBot {
    /// Creates a restricted namespace and applies the example Secrets, Roles,
    /// Contacts and the SaintBot (as the admin, like a GitOps tool would).
    pub async fn apply(
        environment: &Environment,
        client: &Client,
        prefix: &str,
    ) -> Result<Self, CompanyBotError> {
        let namespace = namespace::create(client, prefix, true).await?;
        for file in [
            "secrets.yaml",
            "roles.yaml",
            "contacts.yaml",
            "saintbot.yaml",
        ] {
            let mut text = examples::text(environment, file)?;
            if file == "saintbot.yaml" {
                text = with_own_webhook_host(&text, &namespace);
            }
            manifests::apply_all(client, &text, &namespace).await?;
        }
        Ok(Self {
            client: client.clone(),
            namespace,
        })
    }

    pub fn bots(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.namespace, &saintbot_resource())
    }

    pub fn contacts(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.namespace, &contact_resource())
    }

    /// The SaintBot as stored.
    pub async fn bot(&self) -> Result<DynamicObject, CompanyBotError> {
        self.bots()
            .get(BOT)
            .await
            .map_err(|error| read_error("the SaintBot", &error))
    }

    /// Waits until the status describes the current generation and the config
    /// is rendered; returns the status. `describe` adds context on timeout
    /// (e.g. the operator's log).
    pub async fn wait_converged(
        &self,
        describe: impl Fn() -> String,
    ) -> Result<Value, wait::WaitError> {
        let result = wait::until(
            "SaintBot status for the current generation with ConfigRendered=True",
            CONVERGE_TIMEOUT,
            || async {
                let bot = self.bot().await.map_err(|error| error.to_string())?;
                let generation = bot.metadata.generation;
                let status = bot.data.get("status").cloned().unwrap_or(Value::Null);
                let observed = status.get("observedGeneration").and_then(Value::as_i64);
                let rendered = condition_state(&status, "ConfigRendered").0 == "True";
                if observed == generation && rendered {
                    Ok(status)
                } else {
                    Err(format!("generation {generation:?}, status {status}"))
                }
            },
        )
        .await;
        result.map_err(|mut error| {
            error.last = format!("{}\n{}", error.last, describe());
            error
        })
    }

    /// The rendered `bot-config.json` text and its parsed form.
    pub async fn rendered_config(&self) -> Result<(String, BotConfig), CompanyBotError> {
        let config_map = Api::<ConfigMap>::namespaced(self.client.clone(), &self.namespace)
            .get(&format!("{BOT}-config"))
            .await
            .map_err(|error| read_error("the rendered ConfigMap", &error))?;
        let text = config_map
            .data
            .and_then(|mut data| data.remove("bot-config.json"))
            .ok_or_else(|| CompanyBotError::Config("no bot-config.json key".to_owned()))?;
        let config = BotConfig::from_json(&text)
            .map_err(|error| CompanyBotError::Config(error.to_string()))?;
        Ok((text, config))
    }

    /// The bot's Deployment.
    pub async fn deployment(&self) -> Result<Deployment, CompanyBotError> {
        Api::<Deployment>::namespaced(self.client.clone(), &self.namespace)
            .get(BOT)
            .await
            .map_err(|error| read_error("the bot Deployment", &error))
    }

    /// `pod-template-hash` labels of the bot Deployment's ReplicaSets, sorted.
    pub async fn pod_template_hashes(&self) -> Result<Vec<String>, CompanyBotError> {
        let sets = Api::<ReplicaSet>::namespaced(self.client.clone(), &self.namespace)
            .list(&ListParams::default().labels(&format!("saint.work/bot={BOT}")))
            .await
            .map_err(|error| read_error("ReplicaSets", &error))?;
        let mut hashes: Vec<String> = sets
            .items
            .iter()
            .filter_map(|set| {
                set.metadata
                    .labels
                    .as_ref()?
                    .get("pod-template-hash")
                    .cloned()
            })
            .collect();
        hashes.sort();
        Ok(hashes)
    }

    /// Pods of the bot (created by the ReplicaSet controller, never run).
    pub async fn pods(&self) -> Result<Vec<Pod>, CompanyBotError> {
        Api::<Pod>::namespaced(self.client.clone(), &self.namespace)
            .list(&ListParams::default().labels(&format!("saint.work/bot={BOT}")))
            .await
            .map(|list| list.items)
            .map_err(|error| read_error("pods", &error))
    }
}
