//! The persona reaches the model: the example SaintBot rendered by the operator's real
//! code (`validate` + `build_children`), its persona ConfigMap laid out on disk as the
//! kubelet lays out a ConfigMap volume, the rendered `bot-config.json` loaded by the
//! agent, and a message from each kind of person through the real runtime to the
//! scripted model. What the model receives is checked: each person's system prompt
//! holds exactly the persona files their role lists, from the SaintBot.

mod common;

use std::{
    collections::BTreeMap,
    os::unix::fs::symlink,
    path::{Path, PathBuf},
};

use common::*;
use saint_agent::runtime::RuntimeOptions;
use saint_config::{BOOTSTRAP_FILES, BotConfig, PERSONA_MOUNT_PATH};
use saint_operator::{
    offline::{Manifests, read_manifests},
    saintbot_controller::{
        build::{build_children, config_map::rendered_config_json},
        validate::validate,
    },
    settings::OperatorSettings,
};
use saint_scripted::llm::Reply;
use serde_json::{Value, json};

/// What the operator renders for the example company: `bot-config.json`, the persona
/// ConfigMap's data and the Deployment.
struct Rendered {
    config: Value,
    persona: BTreeMap<String, String>,
    deployment: Value,
}

fn render_example_company() -> Rendered {
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/saint/examples");
    let mut manifests = Manifests::default();
    for file in ["saintbot.yaml", "contacts.yaml", "roles.yaml"] {
        let text = std::fs::read_to_string(examples.join(file)).unwrap();
        read_manifests(&text, "acme", &mut manifests).unwrap();
    }
    let validated = validate(
        &manifests.bots[0],
        &manifests.dereferenced,
        &OperatorSettings::with_tag("test"),
    )
    .unwrap();
    let children = build_children(&validated);
    Rendered {
        config: serde_json::from_str(&rendered_config_json(&validated)).unwrap(),
        persona: children.persona_config_map.data.clone().unwrap(),
        deployment: serde_json::to_value(&children.deployment).unwrap(),
    }
}

/// Writes `files` under `mount` exactly as the kubelet writes a ConfigMap volume: the
/// files in a timestamped directory, `..data` pointing at it, one symlink per key.
fn lay_out_as_kubelet(mount: &Path, files: &BTreeMap<String, String>) {
    let version = "..2026_11_23_12_00_00.123456789";
    std::fs::create_dir_all(mount.join(version)).unwrap();
    for (name, text) in files {
        std::fs::write(mount.join(version).join(name), text).unwrap();
        symlink(format!("..data/{name}"), mount.join(name)).unwrap();
    }
    symlink(version, mount.join("..data")).unwrap();
}

/// The persona ConfigMap is the volume the agent container mounts at the path the
/// rendered config names: the operator's two halves of the contract agree.
fn assert_the_mount_is_the_configured_directory(rendered: &Rendered) {
    assert_eq!(
        rendered.config["persona"],
        json!({"directory": PERSONA_MOUNT_PATH})
    );
    let pod = &rendered.deployment["spec"]["template"]["spec"];
    let agent = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|container| container["name"] == "agent")
        .unwrap();
    let mount = agent["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|mount| mount["mountPath"] == PERSONA_MOUNT_PATH)
        .expect("the agent mounts the persona directory");
    assert!(
        mount.get("subPath").is_none(),
        "a subPath mount is never updated"
    );
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|volume| volume["name"] == mount["name"])
        .unwrap();
    assert_eq!(volume["configMap"]["name"], "acme-assistant-persona");
}

#[tokio::test]
async fn the_example_saintbots_persona_reaches_each_person_filtered_by_their_role() {
    let rendered = render_example_company();
    assert_the_mount_is_the_configured_directory(&rendered);
    let soul = rendered.persona["SOUL.md"].trim_end().to_string();
    assert!(soul.contains("You are Saint, the assistant of Acme d.o.o."));

    let volume = tempfile::tempdir().unwrap();
    let mount = volume.path().join("saint-persona");
    lay_out_as_kubelet(&mount, &rendered.persona);
    assert!(
        mount
            .join("SOUL.md")
            .symlink_metadata()
            .unwrap()
            .is_symlink()
    );

    let config = rendered.config.clone();
    let directory = mount.to_str().unwrap().to_string();
    let bot = InProcess::start_with(
        move |test_config| {
            // The operator's config as rendered; only what a test machine differs in
            // changes: the scripted model's address, where the volume is mounted, and
            // memory (no embedding model files here).
            let model_url = test_config["model"]["baseUrl"].clone();
            *test_config = config;
            test_config["model"]["baseUrl"] = model_url;
            test_config["persona"]["directory"] = json!(directory);
            test_config["memory"]["enabled"] = json!(false);
        },
        RuntimeOptions::default(),
    )
    .await;
    // The workspace holds persona files of its own (the test seed); the SaintBot's win.
    assert!(bot.workspace.join("SOUL.md").is_file());

    let config = BotConfig::from_json(&std::fs::read_to_string(&bot.config_path).unwrap())
        .expect("the agent accepts the rendered config");
    let people = [
        ("owner", "whatsapp", "+385991234567"),
        ("manager", "telegram", "222222222"),
        ("employee", "email", "ivan@company.hr"),
        ("external", "whatsapp", "+385 91 555 0000"),
    ];
    for (index, (role_name, channel, peer)) in people.into_iter().enumerate() {
        bot.llm.push(Reply::text("ok"));
        bot.reply(channel, peer, "hello").await;
        let system = bot.llm.requests()[index].system();
        let role = &config.roles[role_name];
        let listed = |file: &str| {
            role.bootstrap.iter().any(|wanted| wanted == file)
                || role.inject.iter().any(|wanted| wanted == file)
        };
        for (file, text) in &rendered.persona {
            let first_line = text.lines().next().unwrap();
            if listed(file) {
                assert!(
                    system.contains(&format!("## {file}\n\n{}", text.trim_end())),
                    "{role_name}: {file} missing from the system prompt:\n{system}"
                );
            } else {
                assert!(
                    !system.contains(&format!("## {file}")) && !system.contains(first_line),
                    "{role_name}: {file} is not in the role's lists but reached the model:\n{system}"
                );
            }
        }
        assert!(
            !system.contains("Acme's helpful colleague"),
            "{role_name}: the workspace's SOUL.md stood in for the SaintBot's"
        );
        assert!(system.contains(&soul), "{role_name} gets SOUL.md");
    }

    // The filter is not vacuous: the roles of the example really differ.
    let system = |index: usize| bot.llm.requests()[index].system();
    assert!(system(0).contains("## AGENTS.md") && system(0).contains("## COMPANY.md"));
    for file in ["AGENTS.md", "TOOLS.md", "HEARTBEAT.md", "COMPANY.md"] {
        assert!(
            !system(2).contains(&format!("## {file}")),
            "employee: {file}"
        );
    }
    assert!(system(2).contains("## USER.md"));
    assert!(!system(3).contains("## USER.md"), "external: USER.md");
    assert_eq!(
        BOOTSTRAP_FILES
            .iter()
            .filter(|file| rendered.persona.contains_key(**file))
            .count(),
        BOOTSTRAP_FILES.len(),
        "the example SaintBot declares every bootstrap file"
    );
}

#[tokio::test]
async fn a_persona_update_reaches_the_next_prompt_without_a_restart() {
    let rendered = render_example_company();
    let volume = tempfile::tempdir().unwrap();
    let mount = volume.path().join("saint-persona");
    lay_out_as_kubelet(&mount, &rendered.persona);
    let config = rendered.config.clone();
    let directory = mount.to_str().unwrap().to_string();
    let bot = InProcess::start_with(
        move |test_config| {
            let model_url = test_config["model"]["baseUrl"].clone();
            *test_config = config;
            test_config["model"]["baseUrl"] = model_url;
            test_config["persona"]["directory"] = json!(directory);
            test_config["memory"]["enabled"] = json!(false);
        },
        RuntimeOptions::default(),
    )
    .await;
    bot.llm.push(Reply::text("ok"));
    bot.reply("whatsapp", "+385991234567", "hello").await;
    assert!(
        bot.llm.requests()[0]
            .system()
            .contains("You are Saint, the assistant of Acme d.o.o.")
    );

    // The kubelet's update: a new version directory, `..data` swapped by rename, the old
    // version removed.
    let next = "..2026_11_23_12_05_00.987654321";
    std::fs::create_dir(mount.join(next)).unwrap();
    for (name, text) in &rendered.persona {
        let text = if name == "SOUL.md" {
            "You are Saint, now also fluent in Slovenian.\n"
        } else {
            text.as_str()
        };
        std::fs::write(mount.join(next).join(name), text).unwrap();
    }
    symlink(next, mount.join("..data_tmp")).unwrap();
    std::fs::rename(mount.join("..data_tmp"), mount.join("..data")).unwrap();
    std::fs::remove_dir_all(mount.join("..2026_11_23_12_00_00.123456789")).unwrap();

    bot.llm.push(Reply::text("ok"));
    bot.reply("whatsapp", "+385991234567", "hello again").await;
    let system = bot.llm.requests()[1].system();
    assert!(system.contains("now also fluent in Slovenian"), "{system}");
    assert!(!system.contains("the assistant of Acme d.o.o."), "{system}");
}
