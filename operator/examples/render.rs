//! Renders `bot-config.json` (or every child object) for the SaintBots in YAML files,
//! offline, exactly as the controller would.
//!
//! cargo run -p saint-operator --example render -- [--namespace NS] [--children]
//!     [--persona-dir DIR] FILE...
//!
//! `--persona-dir DIR` is for running the bot without Kubernetes: the persona
//! ConfigMap's files are written into DIR and the config names DIR (absolute) as its
//! persona directory, where the operator's config names the ConfigMap's mount.

use saint_config::PersonaConfig;
use saint_operator::{
    offline::{Manifests, read_manifests},
    saintbot_controller::{
        build::{
            build_children,
            config_map::{rendered_config, rendered_config_json},
        },
        validate::validate,
    },
    settings::OperatorSettings,
};

fn main() -> anyhow::Result<()> {
    let mut namespace = "default".to_string();
    let mut children = false;
    let mut persona_directory = None;
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
            "--persona-dir" => {
                persona_directory =
                    Some(std::path::PathBuf::from(arguments.next().ok_or_else(
                        || anyhow::anyhow!("--persona-dir needs a value"),
                    )?))
            }
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
        } else if let Some(directory) = &persona_directory {
            std::fs::create_dir_all(directory)?;
            let directory = directory.canonicalize()?;
            for (name, text) in &build_children(&validated)
                .persona_config_map
                .data
                .unwrap_or_default()
            {
                // Keys are file names (the API server would refuse others in a ConfigMap).
                if name.contains('/') || name == "." || name == ".." {
                    anyhow::bail!("persona file name {name:?} is not a plain file name");
                }
                std::fs::write(directory.join(name), text)?;
            }
            let mut config = rendered_config(&validated);
            config.persona = Some(PersonaConfig {
                directory: directory
                    .to_str()
                    .ok_or_else(|| anyhow::anyhow!("--persona-dir must be a UTF-8 path"))?
                    .to_string(),
            });
            print!("{}", config.to_json());
        } else {
            print!("{}", rendered_config_json(&validated));
        }
    }
    Ok(())
}
