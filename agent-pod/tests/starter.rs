//! The bot `saint-agent up` starts is the operator's own render of the chart's example
//! company, not a hand-written copy: this test renders `charts/saint/examples` with the
//! operator's real `validate` and builders and compares the result with the bundle the
//! agent embeds. `SAINT_UPDATE_GOLDEN=1` rewrites the bundle.

use std::path::PathBuf;

use saint_agent::starter::{STARTER_BUNDLE_PATH, Starter};
use saint_operator::{
    offline::{Manifests, read_manifests},
    saintbot_controller::{
        build::{build_children, config_map::rendered_config},
        validate::validate,
    },
    settings::OperatorSettings,
};

fn operator_render() -> Starter {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut manifests = Manifests::default();
    for file in ["saintbot.yaml", "contacts.yaml", "roles.yaml"] {
        let path = root.join("charts/saint/examples").join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("failed to read {}: {error}", path.display()));
        read_manifests(&text, "acme", &mut manifests)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    }
    assert_eq!(manifests.bots.len(), 1, "the chart's examples hold one bot");
    let settings = OperatorSettings::with_tag(env!("CARGO_PKG_VERSION"));
    let validated = validate(&manifests.bots[0], &manifests.dereferenced, &settings)
        .expect("the chart's example bot validates");
    // Each declared skill's SKILL.md, from the ConfigMap key it names.
    let skills = manifests.bots[0]
        .spec
        .skills
        .iter()
        .map(|skill| {
            let reference = &skill.config_map_ref;
            let key = reference.key.as_deref().unwrap_or("SKILL.md");
            let text = manifests
                .dereferenced
                .config_maps
                .get(&reference.name)
                .and_then(|map| map.data.as_ref()?.get(key).cloned())
                .unwrap_or_else(|| panic!("the example skill {:?} has no text", skill.name));
            (skill.name.clone(), text)
        })
        .collect();
    Starter {
        bot_config: rendered_config(&validated),
        persona: build_children(&validated)
            .persona_config_map
            .data
            .unwrap_or_default(),
        skills,
    }
}

#[test]
fn the_embedded_starter_bot_is_the_operators_render_of_the_chart_examples() {
    let rendered = operator_render();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(STARTER_BUNDLE_PATH);
    if std::env::var_os("SAINT_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, rendered.to_json()).unwrap();
    }
    let embedded = Starter::embedded().expect("the embedded starter parses");
    assert!(
        embedded == rendered,
        "{} differs from the operator's render of charts/saint/examples; \
         rerun with SAINT_UPDATE_GOLDEN=1 and review the diff",
        path.display()
    );
    // What the chat page relies on: people to pick and a persona that says who the bot is.
    assert!(embedded.bot_config.contacts.len() >= 3);
    assert!(
        embedded
            .persona
            .get("SOUL.md")
            .is_some_and(|soul| !soul.trim().is_empty()),
        "the example persona has a SOUL.md"
    );
}

/// The channel contract end to end: every channel the operator renders from the example
/// SaintBot (settings and secret variable names) is accepted by the agent's own
/// readers once its secrets are set, so the example's channels work as declared; with
/// none set, each channel is named with the secret it lacks.
#[test]
fn the_operators_rendered_channels_are_served_by_the_agent() {
    use saint_agent::channel::startup::{ChannelProblem, channel_problems};

    let config = operator_render().bot_config;
    let kinds: Vec<&str> = config
        .channels
        .iter()
        .map(|channel| channel.kind.prefix())
        .collect();
    assert_eq!(
        kinds,
        vec![
            "http", "whatsapp", "email", "telegram", "slack", "discord", "matrix"
        ]
    );
    let problems = channel_problems(&config, |variable| {
        variable
            .starts_with("SAINT_CHANNEL_")
            .then(|| "set".to_string())
    });
    assert_eq!(problems, Vec::<ChannelProblem>::new());
    let unset: Vec<String> = channel_problems(&config, |_| None)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(unset.iter().any(|line| line.contains("channel \"whatsapp\": secrets.accessToken: variable SAINT_CHANNEL_WHATSAPP_ACCESSTOKEN is unset")), "{unset:#?}");
    assert!(
        unset.iter().any(|line| line.contains(
            "channel \"email\": secrets.password: variable SAINT_CHANNEL_EMAIL_PASSWORD is unset"
        )),
        "{unset:#?}"
    );
}
