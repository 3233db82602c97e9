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
    Starter {
        bot_config: rendered_config(&validated),
        persona: build_children(&validated)
            .persona_config_map
            .data
            .unwrap_or_default(),
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
