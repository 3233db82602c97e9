//! The rendered config ConfigMap `<bot>-config` (`bot-config.json` + `porter-registry.json`)
//! and the persona ConfigMap `<bot>-persona`. Pure: no client.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use saint_config::{BotConfig, CONFIG_FILE_NAME};

use super::{child_metadata, sandbox_job::job_template, sha256_hex};
use crate::{
    labels::{CONFIG_HASH_ANNOTATION, config_map_name, persona_config_map_name},
    saintbot_controller::validate::ValidatedSaintBot,
};

/// File name of the Porter registry inside the ConfigMap.
pub const REGISTRY_FILE_NAME: &str = "porter-registry.json";

/// The complete rendered config, sandbox Job template included.
pub fn rendered_config(bot: &ValidatedSaintBot) -> BotConfig {
    let mut config = bot.config.clone();
    config.sandbox.job_template =
        Some(serde_json::to_value(job_template(bot)).expect("job serialises"));
    config
}

/// `bot-config.json` exactly as written into the ConfigMap.
pub fn rendered_config_json(bot: &ValidatedSaintBot) -> String {
    rendered_config(bot).to_json()
}

/// SHA-256 of `bot-config.json` (reported in status and as an annotation).
pub fn config_hash(bot: &ValidatedSaintBot) -> String {
    sha256_hex(rendered_config_json(bot).as_bytes())
}

/// `<bot>-config`. Contact and Role changes only change this object; the volume is
/// mounted as a directory so the kubelet updates it in place and the agent reloads it
/// without a restart.
pub fn config_map(bot: &ValidatedSaintBot) -> ConfigMap {
    let config = rendered_config_json(bot);
    let mut metadata = child_metadata(bot, config_map_name(&bot.name), "config");
    metadata.annotations = Some(BTreeMap::from([(
        CONFIG_HASH_ANNOTATION.to_string(),
        sha256_hex(config.as_bytes()),
    )]));
    ConfigMap {
        metadata,
        data: Some(BTreeMap::from([
            (CONFIG_FILE_NAME.to_string(), config),
            (REGISTRY_FILE_NAME.to_string(), bot.registry.to_json()),
        ])),
        ..ConfigMap::default()
    }
}

/// `<bot>-persona`: persona files (inline ones win over the referenced ConfigMap's),
/// mounted read-only at [`saint_config::PERSONA_MOUNT_PATH`] in the agent container,
/// which the rendered config names as `persona.directory`.
pub fn persona_config_map(bot: &ValidatedSaintBot) -> ConfigMap {
    ConfigMap {
        metadata: child_metadata(bot, persona_config_map_name(&bot.name), "persona"),
        data: Some(bot.persona_files.clone()),
        ..ConfigMap::default()
    }
}
