//! Renders `bot-config.json` (or every child object) for the SaintBots in YAML files,
//! offline, exactly as the controller would.
//!
//! cargo run -p saint-operator --example render -- [--namespace NS] [--children] FILE...

use saint_operator::{
    offline::{Manifests, read_manifests},
    saintbot_controller::{
        build::{build_children, config_map::rendered_config_json},
        validate::validate,
    },
    settings::OperatorSettings,
};

fn main() -> anyhow::Result<()> {
    let mut namespace = "default".to_string();
    let mut children = false;
    let mut files = Vec::new();
    let mut arguments = std::env::args().skip(1);
    while let Some(argument) = arguments.next() {
        match argument.as_str() {
            "--namespace" => {
                namespace = arguments
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("--namespace needs a value"))?
            }
            "--children" => children = true,
            _ => files.push(argument),
        }
    }
    let mut manifests = Manifests::default();
    for file in &files {
        read_manifests(&std::fs::read_to_string(file)?, &namespace, &mut manifests)?;
    }
    let settings = OperatorSettings::with_tag(env!("CARGO_PKG_VERSION"));
    for bot in &manifests.bots {
        let validated = validate(bot, &manifests.dereferenced, &settings)?;
        if children {
            let built = build_children(&validated);
            for object in [
                serde_yaml_ng::to_string(&built.service_account)?,
                serde_yaml_ng::to_string(&built.role)?,
                serde_yaml_ng::to_string(&built.role_binding)?,
                serde_yaml_ng::to_string(&built.persona_config_map)?,
                serde_yaml_ng::to_string(&built.config_map)?,
                serde_yaml_ng::to_string(&built.workspace_claim)?,
                serde_yaml_ng::to_string(&built.service)?,
                serde_yaml_ng::to_string(&built.sandbox_network_policy)?,
                serde_yaml_ng::to_string(&built.agent_network_policy)?,
                serde_yaml_ng::to_string(&built.deployment)?,
            ] {
                print!("---\n{object}");
            }
        } else {
            print!("{}", rendered_config_json(&validated));
        }
    }
    Ok(())
}
