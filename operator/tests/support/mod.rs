//! Loads the YAML fixtures into the operator's types, through the real `validate`.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::ConfigMap;
use saint_operator::{
    crd::{Contact, Role, SaintBot},
    saintbot_controller::{
        dereference::Dereferenced,
        validate::{ValidatedSaintBot, validate},
    },
    settings::OperatorSettings,
};
use serde::Deserialize;

pub fn fixture_path(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The bot and everything it refers to, from one multi-document YAML file.
pub fn load(name: &str) -> (SaintBot, Dereferenced) {
    let text = std::fs::read_to_string(fixture_path(name)).expect("fixture readable");
    let mut bot = None;
    let mut dereferenced = Dereferenced::default();
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let value = serde_json::Value::deserialize(document).expect("fixture is YAML");
        match value["kind"].as_str() {
            Some("SaintBot") => {
                bot = Some(serde_json::from_value::<SaintBot>(value).expect("SaintBot"))
            }
            Some("Contact") => dereferenced
                .contacts
                .push(serde_json::from_value::<Contact>(value).expect("Contact")),
            Some("Role") => dereferenced
                .roles
                .push(serde_json::from_value::<Role>(value).expect("Role")),
            Some("ConfigMap") => {
                dereferenced.persona_config_map =
                    Some(serde_json::from_value::<ConfigMap>(value).expect("ConfigMap"))
            }
            other => panic!("unexpected kind {other:?} in fixture {name}"),
        }
    }
    (bot.expect("fixture has a SaintBot"), dereferenced)
}

pub fn settings() -> OperatorSettings {
    OperatorSettings {
        api_server_cidrs: vec!["172.18.0.2/32".to_string()],
        ..OperatorSettings::with_tag("0.1.0")
    }
}

pub fn validated(name: &str) -> ValidatedSaintBot {
    let (bot, dereferenced) = load(name);
    validate(&bot, &dereferenced, &settings()).expect("fixture validates")
}

/// Compares `actual` with the golden file `tests/golden/<file>`; with
/// `SAINT_UPDATE_GOLDEN=1` rewrites it instead (review the diff before committing).
pub fn assert_golden(file: &str, actual: &str) {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(file);
    if std::env::var_os("SAINT_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("golden writable");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|error| {
        panic!(
            "failed to read {}: {error}; run with SAINT_UPDATE_GOLDEN=1 to create it",
            path.display()
        )
    });
    pretty_assertions::assert_eq!(
        expected,
        actual,
        "{} differs; run with SAINT_UPDATE_GOLDEN=1 to accept",
        path.display()
    );
}
