//! The rendered config survives JSON → types → JSON unchanged, and bad configs are refused.

use saint_config::{BotConfig, ConfigError};

const EXAMPLE: &str = include_str!("fixtures/acme-bot-config.json");

#[test]
fn example_config_round_trips_byte_for_byte() {
    let config = BotConfig::from_json(EXAMPLE).expect("example config is valid");
    assert_eq!(config.to_json(), EXAMPLE);
}

#[test]
fn contact_with_undefined_role_is_refused_naming_the_field() {
    let text = EXAMPLE.replace(r#""role": "manager""#, r#""role": "ghost""#);
    let error = BotConfig::from_json(&text).unwrap_err();
    assert!(
        matches!(&error, ConfigError::Invalid { field, .. } if field == "contacts[marko].role"),
        "{error}"
    );
}

#[test]
fn unknown_tool_is_refused() {
    let text = EXAMPLE.replace(r#""web_fetch""#, r#""web_fetcher""#);
    let error = BotConfig::from_json(&text).unwrap_err().to_string();
    assert!(error.contains("web_fetcher"), "{error}");
}

#[test]
fn other_schema_version_is_refused() {
    let text = EXAMPLE.replace("bot-config/v1alpha1", "bot-config/v9");
    assert!(matches!(
        BotConfig::from_json(&text),
        Err(ConfigError::SchemaVersion { .. })
    ));
}

#[test]
fn unknown_field_is_refused() {
    let text = EXAMPLE.replacen("{", r#"{"surprise": 1,"#, 1);
    assert!(matches!(
        BotConfig::from_json(&text),
        Err(ConfigError::Parse(_))
    ));
}

#[test]
fn json_schema_names_every_top_level_field() {
    let schema = BotConfig::json_schema();
    let properties = schema["properties"].as_object().expect("object schema");
    for field in [
        "schemaVersion",
        "model",
        "roles",
        "contacts",
        "identityLinks",
        "sandbox",
        "porter",
    ] {
        assert!(properties.contains_key(field), "schema lacks {field}");
    }
}
