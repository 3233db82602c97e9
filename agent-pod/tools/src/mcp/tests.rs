use rmcp::model::{CallToolResult, ContentBlock};
use saint_config::{McpServerConfig, McpTransport};
use serde_json::json;

use super::*;

fn server(max_tools: u32, max_schema_bytes: u32) -> McpServerConfig {
    McpServerConfig {
        name: "docs".to_string(),
        transport: McpTransport::Http {
            url: "https://mcp.example/mcp".to_string(),
        },
        credential: None,
        max_tools,
        max_schema_bytes,
        max_result_chars: 100,
        timeout_seconds: 5,
    }
}

fn remote(name: &str, schema: Value) -> RemoteTool {
    RemoteTool {
        name: name.to_string(),
        description: format!("does {name}\u{7}"),
        input_schema: schema,
    }
}

#[test]
fn only_well_formed_tools_within_the_caps_are_admitted() {
    let listed = vec![
        remote("search", json!({"type": "object"})),
        remote("no_type", json!({"properties": {}})),
        remote("bad.name", json!({"type": "object"})),
        remote("search", json!({"type": "object"})),
        remote("array", json!({"type": "array"})),
        remote("not_object", json!("x")),
        remote(
            "huge",
            json!({"type": "object", "description": "x".repeat(5000)}),
        ),
        remote("fourth", json!({"type": "object"})),
        remote("fifth", json!({"type": "object"})),
    ];
    let admitted = admit_tools(&server(3, 1000), listed);
    let names: Vec<&str> = admitted.iter().map(|tool| tool.name.as_str()).collect();
    assert_eq!(names, ["search", "no_type", "fourth"]);
    assert_eq!(admitted[1].input_schema["type"], "object");
    assert!(!admitted[0].description.contains('\u{7}'));
}

#[test]
fn results_are_text_capped_and_other_blocks_are_noted() {
    let mut result = CallToolResult::success(vec![
        ContentBlock::text("first"),
        ContentBlock::image("aGk=", "image/png"),
    ]);
    let (text, truncated) = render_result(&result, 100);
    assert_eq!(text, "first\n[image omitted: image/png]");
    assert!(!truncated);
    result.content = vec![ContentBlock::text("y".repeat(150))];
    let (text, truncated) = render_result(&result, 100);
    assert!(truncated);
    assert!(text.ends_with("[truncated: showing 100 of 150 characters]"));
}

#[test]
fn the_listing_role_is_one_that_may_use_the_server() {
    let mut config = crate::test_fixtures::company_config();
    for role in config.roles.values_mut() {
        role.tools.allow.retain(|pattern| pattern != "*");
    }
    assert!(listing_role(&config, "docs").is_none());
    let employee = config.roles.keys().next().unwrap().clone();
    config
        .roles
        .get_mut(&employee)
        .unwrap()
        .tools
        .allow
        .push("docs.search".to_string());
    assert_eq!(
        listing_role(&config, "docs").map(|(name, _)| name),
        Some(employee.as_str())
    );
    config
        .roles
        .get_mut(&employee)
        .unwrap()
        .tools
        .deny
        .push("docs.*".to_string());
    assert!(listing_role(&config, "docs").is_none());
}

#[test]
fn names_are_interned_once() {
    let first = intern("docs.search".to_string());
    let second = intern(String::from("docs.search"));
    assert!(std::ptr::eq(first, second));
}
