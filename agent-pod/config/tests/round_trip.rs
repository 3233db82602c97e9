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
fn a_memory_scope_reaching_past_the_read_rules_is_refused_naming_both_fields() {
    let mut config: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
    config["roles"]["manager"]["memoryScope"] = serde_json::json!(["shared", "allUsers"]);
    let error = BotConfig::from_json(&config.to_string())
        .unwrap_err()
        .to_string();
    assert_eq!(
        error,
        "roles.manager.memoryScope: allUsers reaches memory/users/someone-else/notes.md, which \
         roles.manager.files.read does not allow: the memory tools, the file tools and the \
         sandbox follow one rule, so allow it in roles.manager.files.read or drop allUsers from \
         memoryScope"
    );
}

#[test]
fn a_tool_price_for_an_unknown_tool_or_below_zero_is_refused() {
    let mut config: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
    config["budget"] = serde_json::json!({"toolPrices": {"teleport": 1.0}});
    let error = BotConfig::from_json(&config.to_string())
        .unwrap_err()
        .to_string();
    assert_eq!(
        error,
        "budget.toolPrices.teleport: is not a known tool or a tool of a declared MCP server \
         (<server>.<tool>)"
    );
    // A server's tool is priced once its server is declared.
    config["budget"] = serde_json::json!({"toolPrices": {"docs.search": 0.01}});
    assert!(BotConfig::from_json(&config.to_string()).is_err());
    config["mcp"] = serde_json::json!({"servers": [
        {"name": "docs", "transport": {"http": {"url": "https://mcp.example/mcp"}}}
    ]});
    assert!(BotConfig::from_json(&config.to_string()).is_ok());
    config.as_object_mut().unwrap().remove("mcp");
    config["budget"] = serde_json::json!({"toolPrices": {"web_search": -0.1}});
    let error = BotConfig::from_json(&config.to_string())
        .unwrap_err()
        .to_string();
    assert_eq!(error, "budget.toolPrices.web_search: must be a number ≥ 0");
    config["budget"] = serde_json::json!({"toolPrices": {"web_search": 0.005}});
    assert!(BotConfig::from_json(&config.to_string()).is_ok());
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
    let text = EXAMPLE.replacen('{', r#"{"surprise": 1,"#, 1);
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

#[test]
fn persona_directory_round_trips_and_must_be_absolute() {
    let text = EXAMPLE.replacen(
        '{',
        r#"{"persona": {"directory": "/etc/saint-persona"},"#,
        1,
    );
    let config = BotConfig::from_json(&text).expect("a persona directory is accepted");
    assert_eq!(
        config
            .persona
            .as_ref()
            .map(|persona| persona.directory.as_str()),
        Some(saint_config::PERSONA_MOUNT_PATH)
    );
    assert!(
        config
            .to_json()
            .contains(r#""directory": "/etc/saint-persona""#)
    );

    let relative = EXAMPLE.replacen('{', r#"{"persona": {"directory": "persona"},"#, 1);
    let error = BotConfig::from_json(&relative).unwrap_err();
    assert!(
        matches!(&error, ConfigError::Invalid { field, .. } if field == "persona.directory"),
        "{error}"
    );
}

#[test]
fn json_schema_documents_where_persona_files_come_from() {
    let schema = BotConfig::json_schema().to_string();
    assert!(schema.contains("persona"), "schema lacks persona");
    assert!(
        schema.contains("from the workspace only when it does not"),
        "the schema states the persona rule"
    );
}

#[test]
fn embedding_weights_default_to_f32_accept_int16_and_refuse_anything_else() {
    use saint_config::{EmbeddingsConfig, ModelWeights};
    let weights_of = |config: &BotConfig| match &config.memory.embeddings {
        EmbeddingsConfig::Local { weights, .. } => *weights,
        other @ EmbeddingsConfig::Openai { .. } => panic!("not local: {other:?}"),
    };
    let example = BotConfig::from_json(EXAMPLE).unwrap();
    assert_eq!(weights_of(&example), ModelWeights::F32);
    let int16 = EXAMPLE.replacen(r#""modelDir":"#, r#""weights": "int16", "modelDir":"#, 1);
    let config = BotConfig::from_json(&int16).unwrap();
    assert_eq!(weights_of(&config), ModelWeights::Int16);
    assert!(config.to_json().contains(r#""weights": "int16""#));
    let bad = EXAMPLE.replacen(r#""modelDir":"#, r#""weights": "int4", "modelDir":"#, 1);
    let error = BotConfig::from_json(&bad).unwrap_err();
    let chain = saint_config::ErrorChain(&error).to_string();
    assert!(chain.contains("int4") && chain.contains("int16"), "{chain}");
}

/// Editors read the schema shipped in the repository; it must be the one the types
/// give (regenerate: `cargo run -p saint-config --example bot_file_schema`).
#[test]
fn the_shipped_bot_file_schema_is_the_one_the_types_give() {
    let shipped = include_str!("../bot-config.schema.json");
    assert!(
        shipped == saint_config::bot_file::schema_text(),
        "agent-pod/config/bot-config.schema.json is stale: run \
         `cargo run -p saint-config --example bot_file_schema`"
    );
}

/// The local bot file leaves defaults out and reads back to the same config.
#[test]
fn the_compact_bot_file_reads_back_to_the_same_config() {
    let config = BotConfig::from_json(EXAMPLE).unwrap();
    let text = saint_config::bot_file::render(&config);
    assert_eq!(BotConfig::from_json(&text).unwrap(), config);
    assert!(text.lines().count() < EXAMPLE.lines().count() / 2, "{text}");
}

#[test]
fn mcp_servers_and_the_roles_naming_them_are_checked() {
    let base: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
    let refused = |mcp: serde_json::Value, allow: &[&str]| {
        let mut config = base.clone();
        config["mcp"] = mcp;
        let role = config["roles"]
            .as_object_mut()
            .unwrap()
            .values_mut()
            .next()
            .unwrap();
        for pattern in allow {
            role["tools"]["allow"]
                .as_array_mut()
                .unwrap()
                .push((*pattern).into());
        }
        BotConfig::from_json(&config.to_string())
            .err()
            .map(|error| error.to_string())
    };
    let docs = serde_json::json!({"name": "docs", "transport": {"http": {"url": "https://mcp.example/mcp"}}});
    assert_eq!(
        refused(serde_json::json!({"servers": [docs]}), &["docs.*"]),
        None
    );
    let cases = [
        (
            serde_json::json!({"servers": [docs, docs]}),
            vec![],
            "mcp.servers[1].name: \"docs\" is declared twice",
        ),
        (
            serde_json::json!({"servers": [{"name": "Docs_1", "transport": {"stdio": {"command": ["x"]}}}]}),
            vec![],
            "mcp.servers[0].name: \"Docs_1\" must be 1-31 characters of a-z, 0-9 and -, starting with a letter",
        ),
        (
            serde_json::json!({"servers": [{"name": "docs", "transport": {"http": {"url": "http://mcp.example/mcp"}}}]}),
            vec![],
            "mcp.servers[0].transport.http.url: \"http://mcp.example/mcp\" must be an https:// URL (Porter's proxy speaks TLS only)",
        ),
        (
            serde_json::json!({"servers": [{"name": "local", "transport": {"stdio": {"command": []}}}]}),
            vec![],
            "mcp.servers[0].transport.stdio.command: must not be empty",
        ),
        (
            serde_json::json!({"servers": [docs]}),
            vec!["wiki.*"],
            "names MCP server \"wiki\", which mcp.servers does not declare",
        ),
        (
            serde_json::json!({"servers": [docs]}),
            vec!["docs.{a,b}"],
            "is not a known tool, group:<name>, matching glob or <mcp server>.<tool>",
        ),
    ];
    for (mcp, allow, expected) in cases {
        let error =
            refused(mcp.clone(), &allow).unwrap_or_else(|| panic!("accepted: {mcp} {allow:?}"));
        assert!(error.contains(expected), "{error}\nexpected: {expected}");
    }
}

#[test]
fn approval_rules_name_tools_and_approvers_that_exist_and_someone_else_decides() {
    let base: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
    let check = |rules: serde_json::Value| {
        let mut config = base.clone();
        config["roles"]["employee"]["approvals"] = rules;
        BotConfig::from_json(&config.to_string())
            .err()
            .map(|error| error.to_string())
    };
    assert_eq!(
        check(
            serde_json::json!([{"tools": ["message"], "when": {"to": "m*"},
            "approvers": {"contacts": ["ana"]}}])
        ),
        None
    );
    let merge = serde_json::json!({"hosts": ["api.github.com"], "methods": ["PUT"],
        "paths": ["/repos/*/*/pulls/*/merge"]});
    assert_eq!(
        check(serde_json::json!([{"porter": merge, "approvers": {"roles": ["owner"]}}])),
        None
    );
    let porter = |field: &str, value: serde_json::Value| {
        let mut porter = merge.clone();
        porter[field] = value;
        serde_json::json!([{"porter": porter, "approvers": {"roles": ["owner"]}}])
    };
    for (rules, expected) in [
        (
            serde_json::json!([{"tools": [], "approvers": {"roles": ["owner"]}}]),
            "tools: must name at least one tool",
        ),
        (
            serde_json::json!([{"tools": ["exec"], "porter": merge, "approvers": {"roles": ["owner"]}}]),
            "approvals[0].porter: a rule names either tools (with when) or porter requests",
        ),
        (
            porter("hosts", serde_json::json!([])),
            "approvals[0].porter.hosts: must name a host",
        ),
        (
            porter("hosts", serde_json::json!(["https://api.github.com"])),
            "approvals[0].porter.hosts: \"https://api.github.com\" is not a host",
        ),
        (
            porter("methods", serde_json::json!(["MERGE IT"])),
            "approvals[0].porter.methods: \"MERGE IT\" is not an HTTP method",
        ),
        (
            porter("paths", serde_json::json!(["repos/*"])),
            "approvals[0].porter.paths: \"repos/*\" is not a path glob",
        ),
        (
            porter("paths", serde_json::json!(["/repos/[o"])),
            "approvals[0].porter.paths",
        ),
        (
            serde_json::json!([{"tools": ["teleport"], "approvers": {"roles": ["owner"]}}]),
            "\"teleport\" is not a known tool",
        ),
        (
            serde_json::json!([{"tools": ["exec"], "approvers": {}}]),
            "approvers: must name a role or a contact",
        ),
        (
            serde_json::json!([{"tools": ["exec"], "approvers": {"roles": ["boss"]}}]),
            "names role \"boss\", which is not defined",
        ),
        (
            serde_json::json!([{"tools": ["exec"], "approvers": {"contacts": ["nobody"]}}]),
            "names contact \"nobody\", which is not defined",
        ),
        (
            serde_json::json!([{"tools": ["exec"], "when": {"command": "[a"}, "approvers": {"roles": ["owner"]}}]),
            "is not a glob",
        ),
        (
            serde_json::json!([{"tools": ["exec"], "approvers": {"roles": ["owner"]}, "timeoutSeconds": 0}]),
            "timeoutSeconds: must be 1 to 604800",
        ),
        // Ivan is the only employee: employees approving employees means nobody can.
        (
            serde_json::json!([{"tools": ["exec"], "approvers": {"roles": ["employee"]}}]),
            "the only approver, \"ivan\", is the only member of role \"employee\"",
        ),
    ] {
        let error = check(rules.clone()).unwrap_or_else(|| panic!("accepted {rules}"));
        assert!(error.contains(expected), "{error}\nexpected: {expected}");
    }
}

#[test]
fn a_role_naming_the_budget_top_up_needs_a_budget_and_a_rule_someone_else_decides() {
    let base: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
    let check = |adjust: &dyn Fn(&mut serde_json::Value)| {
        let mut config = base.clone();
        config["roles"]["employee"]["tools"]["allow"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!("budget_top_up"));
        adjust(&mut config["roles"]["employee"]);
        BotConfig::from_json(&config.to_string())
            .err()
            .map(|error| error.to_string())
    };
    let ruled = |role: &mut serde_json::Value| {
        role["approvals"] =
            serde_json::json!([{"tools": ["budget_*"], "approvers": {"roles": ["owner"]}}]);
    };
    assert_eq!(check(&ruled), None);
    let unruled = check(&|_| {}).expect("a top-up nobody else decides");
    assert!(
        unruled.contains("roles.employee.tools.allow")
            && unruled.contains("no rule in roles.employee.approvals names it"),
        "{unruled}"
    );
    let unbudgeted = check(&|role| {
        ruled(role);
        role.as_object_mut().unwrap().remove("budget");
    })
    .expect("a top-up with no budget");
    assert!(
        unbudgeted.contains("the role has no budget"),
        "{unbudgeted}"
    );
}

#[test]
fn a_roles_background_process_limit_is_one_to_thirty_two() {
    let base: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
    let check = |limits: serde_json::Value| {
        let mut config = base.clone();
        config["roles"]["employee"]["process"] = limits;
        BotConfig::from_json(&config.to_string()).map_err(|error| error.to_string())
    };
    let accepted = check(serde_json::json!({"maxRunning": 32})).unwrap();
    assert_eq!(accepted.roles["employee"].process.max_running, 32);
    let defaulted = check(serde_json::json!({})).unwrap();
    assert_eq!(defaulted.roles["employee"].process.max_running, 4);
    for refused in [0, 33] {
        let error = check(serde_json::json!({"maxRunning": refused})).unwrap_err();
        assert!(
            error.contains("roles.employee.process.maxRunning: must be 1 to 32"),
            "{error}"
        );
    }
    assert!(
        check(serde_json::json!({"maxRunnig": 2})).is_err(),
        "a misspelt limit is refused, not ignored"
    );
}

#[test]
fn transcription_is_checked_naming_the_field_and_must_be_priced() {
    let mut config: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
    config["media"] = serde_json::json!({"transcription": {
        "baseUrl": "https://stt.acme.example", "model": "whisper-1",
        "apiKeyEnv": "SAINT_TRANSCRIPTION_API_KEY"}});
    let refused = |config: &serde_json::Value| {
        BotConfig::from_json(&config.to_string())
            .unwrap_err()
            .to_string()
    };
    // Unpriced under the default `refuse`: no budget could count it.
    assert!(
        refused(&config).starts_with("model.prices.whisper-1.perAudioMinute: media.transcription.model \"whisper-1\" has no price per minute of audio"),
        "{}",
        refused(&config)
    );
    config["model"]["prices"]["whisper-1"] =
        serde_json::json!({"inputPerMtok": 0, "outputPerMtok": 0, "perAudioMinute": 0.006});
    let parsed = BotConfig::from_json(&config.to_string()).unwrap();
    let transcription = parsed.media.transcription.as_ref().unwrap();
    assert_eq!(
        (
            transcription.max_seconds,
            transcription.max_bytes,
            transcription.timeout_seconds
        ),
        (600, 16 * 1024 * 1024, 60)
    );
    for (field, value, message) in [
        (
            "baseUrl",
            serde_json::json!("ftp://stt.acme.example"),
            "media.transcription.baseUrl: \"ftp://stt.acme.example\" must be an http:// or https:// URL with a host",
        ),
        (
            "model",
            serde_json::json!(" "),
            "media.transcription.model: must not be empty",
        ),
        (
            "maxSeconds",
            serde_json::json!(0),
            "media.transcription.maxSeconds: must be between 1 and 10800",
        ),
        (
            "maxBytes",
            serde_json::json!(0),
            "media.transcription.maxBytes: must be between 1 and 104857600",
        ),
        (
            "timeoutSeconds",
            serde_json::json!(601),
            "media.transcription.timeoutSeconds: must be between 1 and 600",
        ),
    ] {
        let mut bad = config.clone();
        bad["media"]["transcription"][field] = value;
        assert_eq!(refused(&bad), message);
    }
    config["model"]["prices"]["whisper-1"]["perAudioMinute"] = serde_json::json!(-1);
    assert_eq!(
        refused(&config),
        "model.prices.whisper-1.perAudioMinute: must be a number ≥ 0"
    );
}

#[test]
fn speech_is_priced_in_model_prices_under_its_model_and_an_endpoint_must_be() {
    let mut config: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
    config["media"] = serde_json::json!({"speech": {
        "engine": "openai", "baseUrl": "https://tts.acme.example", "model": "tts-1"}});
    let refused = |config: &serde_json::Value| {
        BotConfig::from_json(&config.to_string())
            .unwrap_err()
            .to_string()
    };
    // An endpoint's model unpriced under the default `refuse`: no budget could count it.
    assert!(
        refused(&config).starts_with(
            "model.prices.tts-1.perMillionCharacters: media.speech.model \"tts-1\" has no price"
        ),
        "{}",
        refused(&config)
    );
    config["model"]["prices"]["tts-1"] =
        serde_json::json!({"inputPerMtok": 0, "outputPerMtok": 0, "perMillionCharacters": 15.0});
    let parsed = BotConfig::from_json(&config.to_string()).unwrap();
    let speech = parsed.media.speech.as_ref().unwrap();
    assert_eq!(speech.price(&parsed.model.prices, 1_000_000), Some(15.0));
    config["model"]["prices"]["tts-1"]["perMillionCharacters"] = serde_json::json!(-1);
    assert_eq!(
        refused(&config),
        "model.prices.tts-1.perMillionCharacters: must be a number ≥ 0"
    );
    // The local engine calls no paid service: unpriced is fine, and espeak-ng prices it.
    config["media"] = serde_json::json!({"speech": {"engine": "local"}});
    let parsed = BotConfig::from_json(&config.to_string()).unwrap();
    assert_eq!(
        parsed
            .media
            .speech
            .as_ref()
            .unwrap()
            .price(&parsed.model.prices, 100),
        None
    );
    config["model"]["prices"]["espeak-ng"] =
        serde_json::json!({"inputPerMtok": 0, "outputPerMtok": 0, "perMillionCharacters": 1.0});
    let parsed = BotConfig::from_json(&config.to_string()).unwrap();
    assert_eq!(
        parsed
            .media
            .speech
            .as_ref()
            .unwrap()
            .price(&parsed.model.prices, 1_000_000),
        Some(1.0)
    );
    // The old place of the price is refused by name.
    config["media"]["speech"]["pricePerMillionCharacters"] = serde_json::json!(15.0);
    let error = BotConfig::from_json(&config.to_string()).unwrap_err();
    let cause = std::error::Error::source(&error).map(ToString::to_string);
    assert!(
        cause
            .as_deref()
            .is_some_and(|cause| cause.contains("unknown field `pricePerMillionCharacters`")),
        "{error}: {cause:?}"
    );
}
