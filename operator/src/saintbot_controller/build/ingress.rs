//! The webhook Ingress `<bot>-webhooks`: the platforms' webhook paths, and nothing else of
//! the agent's HTTP API, from the ingress controller to the bot's Service. Pure.

use k8s_openapi::api::networking::v1::Ingress;
use serde_json::json;

use super::{child_metadata, typed};
use crate::{
    labels::{WEBHOOKS_COMPONENT, webhook_ingress_name},
    saintbot_controller::validate::ValidatedSaintBot,
};

/// `<bot>-webhooks`, or `None` when the bot asks for none or has no webhook channel.
pub fn webhook_ingress(bot: &ValidatedSaintBot) -> Option<Ingress> {
    let wanted = bot.webhook_ingress.as_ref()?;
    let mut metadata = child_metadata(bot, webhook_ingress_name(&bot.name), WEBHOOKS_COMPONENT);
    if !wanted.annotations.is_empty() {
        metadata.annotations = Some(wanted.annotations.clone());
    }
    let metadata = serde_json::to_value(metadata).expect("metadata serialises");
    // `Exact`: `/channels/<name>/webhook` and not a byte more, so no other route of the
    // agent (its authenticated API, /readyz, a channel added later) becomes public.
    let paths: Vec<_> = wanted
        .paths
        .iter()
        .map(|path| {
            json!({
                "path": path,
                "pathType": "Exact",
                "backend": {"service": {"name": bot.name, "port": {"name": "http"}}},
            })
        })
        .collect();
    let mut spec = json!({
        "rules": [{"host": wanted.host, "http": {"paths": paths}}],
    });
    if let Some(class_name) = &wanted.class_name {
        spec["ingressClassName"] = json!(class_name);
    }
    if let Some(secret) = &wanted.tls_secret_name {
        spec["tls"] = json!([{"hosts": [wanted.host], "secretName": secret}]);
    }
    Some(typed(json!({"metadata": metadata, "spec": spec})))
}
