//! Traces and the ledger, with the real binary: an OTLP/HTTP collector stand-in on
//! loopback decodes what the agent exports (protobuf, as a real collector would), and
//! `saint-agent ledger` reads back what a person's turns cost.

mod common;

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{Router, body::Bytes, http::HeaderMap, routing::post};
use common::*;
use opentelemetry_proto::tonic::{
    collector::trace::v1::ExportTraceServiceRequest,
    common::v1::{AnyValue, KeyValue, any_value::Value as Any},
    trace::v1::Span,
};
use prost::Message as _;
use saint_scripted::llm::{Reply, ScriptedLlm};
use serde_json::json;

/// A span with its resource's attributes.
type ResourceSpan = (Vec<KeyValue>, Span);

/// What the stand-in received: spans with their resource's attributes, and the
/// requests' headers.
#[derive(Clone, Default)]
struct Collected {
    spans: Arc<Mutex<Vec<ResourceSpan>>>,
    headers: Arc<Mutex<Vec<HeaderMap>>>,
}

async fn start_collector() -> (SocketAddr, Collected) {
    let collected = Collected::default();
    let state = collected.clone();
    let app = Router::new().route(
        "/v1/traces",
        post(move |headers: HeaderMap, body: Bytes| {
            let state = state.clone();
            async move {
                let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                state.headers.lock().unwrap().push(headers);
                let mut spans = state.spans.lock().unwrap();
                for resource in request.resource_spans {
                    let attributes = resource.resource.map(|r| r.attributes).unwrap_or_default();
                    for scope in resource.scope_spans {
                        for span in scope.spans {
                            spans.push((attributes.clone(), span));
                        }
                    }
                }
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (address, collected)
}

fn text_of(value: &Option<AnyValue>) -> String {
    match value.as_ref().and_then(|value| value.value.as_ref()) {
        Some(Any::StringValue(text)) => text.clone(),
        Some(Any::IntValue(number)) => number.to_string(),
        Some(Any::DoubleValue(number)) => number.to_string(),
        Some(Any::BoolValue(flag)) => flag.to_string(),
        other => format!("{other:?}"),
    }
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes
        .iter()
        .find(|attribute| attribute.key == key)
        .map(|attribute| text_of(&attribute.value))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_with_a_tool_call_is_traced_with_who_and_what_it_cost_and_no_words() {
    let (collector, collected) = start_collector().await;
    let llm = ScriptedLlm::start().await.unwrap();
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    seed_workspace(&workspace);
    let config_path = directory.path().join("bot-config.json");
    let mut config = test_config(&llm.base_url());
    config["telemetry"] = json!({"otlp": {
        "endpoint": format!("http://{collector}"),
        "headersEnv": {"X-Collector-Token": "SAINT_OTLP_TOKEN"},
        "batchDelayMillis": 50,
    }});
    write_config(&config_path, &config);
    let agent = spawn_agent(
        &config_path,
        &workspace,
        &[("SAINT_OTLP_TOKEN", "collector-secret-1")],
    );

    llm.push(Reply::tool_call("read", json!({"path": "COMPANY.md"})));
    llm.push(Reply::text("Acme sells anvils, says answer-canary-7."));
    let response = reqwest::Client::new()
        .post(format!("{}/v1/messages", agent.http))
        .bearer_auth(TOKEN)
        .json(&json!({"channel": "whatsapp", "peer": ANA_WHATSAPP,
                      "text": "what do we sell? zebra-violet-42"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    // The turn's span ends after its answer; the exporter sends it within its batch
    // delay. Wait for it, not for a time.
    let deadline = Instant::now() + Duration::from_secs(30);
    let spans = loop {
        let spans = collected.spans.lock().unwrap().clone();
        if spans
            .iter()
            .any(|(_, span)| span.name.starts_with("invoke_agent"))
            && spans
                .iter()
                .filter(|(_, span)| span.name.starts_with("chat"))
                .count()
                == 2
            && spans
                .iter()
                .any(|(_, span)| span.name.starts_with("execute_tool"))
        {
            break spans;
        }
        assert!(
            Instant::now() < deadline,
            "the collector received no whole turn: {:?}",
            spans.iter().map(|(_, span)| &span.name).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    let bot = config["bot"]["name"].as_str().unwrap();
    let (resource, turn) = spans
        .iter()
        .find(|(_, span)| span.name.starts_with("invoke_agent"))
        .unwrap();
    assert_eq!(turn.name, format!("invoke_agent {bot}"));
    assert_eq!(
        attribute(resource, "service.name").as_deref(),
        Some("saint-agent")
    );
    assert_eq!(attribute(resource, "saint.bot").as_deref(), Some(bot));
    for (key, expected) in [
        ("gen_ai.operation.name", "invoke_agent"),
        ("gen_ai.agent.name", bot),
        ("saint.bot", bot),
        ("saint.contact", "ana"),
        ("saint.role", "owner"),
        ("saint.trigger", "message"),
        ("saint.outcome", "answered"),
        ("saint.model_calls", "2"),
    ] {
        assert_eq!(
            attribute(&turn.attributes, key).as_deref(),
            Some(expected),
            "{key}"
        );
    }
    assert!(attribute(&turn.attributes, "gen_ai.usage.input_tokens").is_some());
    let model = config["model"]["name"].as_str().unwrap();
    for (_, span) in spans
        .iter()
        .filter(|(_, span)| span.name.starts_with("chat"))
    {
        assert_eq!(span.name, format!("chat {model}"));
        assert_eq!(span.trace_id, turn.trace_id);
        assert_eq!(
            span.parent_span_id, turn.span_id,
            "a model call is part of its turn"
        );
        assert_eq!(
            attribute(&span.attributes, "gen_ai.operation.name").as_deref(),
            Some("chat")
        );
        assert_eq!(
            attribute(&span.attributes, "gen_ai.request.model").as_deref(),
            Some(model)
        );
        assert!(attribute(&span.attributes, "gen_ai.provider.name").is_some());
        assert!(attribute(&span.attributes, "gen_ai.usage.output_tokens").is_some());
    }
    let (_, tool) = spans
        .iter()
        .find(|(_, span)| span.name.starts_with("execute_tool"))
        .unwrap();
    assert_eq!(tool.name, "execute_tool read");
    assert_eq!(tool.parent_span_id, turn.span_id);
    assert_eq!(
        attribute(&tool.attributes, "gen_ai.tool.name").as_deref(),
        Some("read")
    );
    assert_eq!(attribute(&tool.attributes, "error.type"), None);

    // Nothing anyone said or read: not the message, the answer, the tool's input or
    // output, the sender's identity.
    let everything = format!("{spans:?}");
    for secret in [
        "zebra-violet-42",
        "answer-canary-7",
        "anvils",
        "COMPANY.md",
        ANA_WHATSAPP,
        "sk-model-key",
        "collector-secret-1",
    ] {
        assert!(
            !everything.contains(secret),
            "{secret:?} is in the exported spans"
        );
    }
    // The header the bot file names, from the agent's environment.
    let headers = collected.headers.lock().unwrap().clone();
    assert!(headers.iter().all(|headers| {
        headers
            .get("x-collector-token")
            .and_then(|v| v.to_str().ok())
            == Some("collector-secret-1")
            && headers.get("content-type").and_then(|v| v.to_str().ok())
                == Some("application/x-protobuf")
    }));

    // The ledger of the person: every model call with its cost, and the tool call; its
    // costs sum to what the metric counts for them.
    let ledger = std::process::Command::new(env!("CARGO_BIN_EXE_saint-agent"))
        .args([
            "ledger",
            "--contact",
            "ana",
            "--format",
            "csv",
            "--workspace",
        ])
        .arg(&workspace)
        .output()
        .unwrap();
    assert!(
        ledger.status.success(),
        "{}",
        String::from_utf8_lossy(&ledger.stderr)
    );
    let csv = String::from_utf8(ledger.stdout).unwrap();
    let mut rows = csv.lines();
    let header: Vec<&str> = rows.next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = rows.map(|row| row.split(',').collect()).collect();
    let kinds: Vec<&str> = rows.iter().map(|row| row[column("kind")]).collect();
    assert_eq!(kinds, ["model", "tool", "model"], "{csv}");
    assert!(
        rows.iter().all(|row| row[column("contact")] == "ana"),
        "{csv}"
    );
    let ledger_cost: f64 = rows
        .iter()
        .filter_map(|row| row[column("costUsd")].parse::<f64>().ok())
        .sum();
    let metrics = reqwest::get(format!("{}/metrics", agent.metrics))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let metric_cost: f64 = metrics
        .lines()
        .filter(|line| {
            line.starts_with("saint_llm_cost_usd_total{") && line.contains("person=\"ana\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(ledger_cost > 0.0, "the turn cost something: {csv}");
    assert!(
        (ledger_cost - metric_cost).abs() < 1e-9,
        "ledger {ledger_cost} against saint_llm_cost_usd_total {metric_cost}"
    );
    drop(agent);
}

#[test]
fn a_collector_header_whose_variable_is_missing_stops_the_start_naming_it() {
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let config_path = directory.path().join("bot-config.json");
    let mut config = test_config("http://127.0.0.1:9");
    config["telemetry"] = json!({"otlp": {
        "endpoint": "http://127.0.0.1:9",
        "headersEnv": {"Authorization": "SAINT_OTLP_AUTHORIZATION"},
    }});
    write_config(&config_path, &config);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_saint-agent"))
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .arg("--config")
        .arg(&config_path)
        .arg("--workspace")
        .arg(&workspace)
        .env_clear()
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "telemetry.otlp.headersEnv.Authorization: the variable SAINT_OTLP_AUTHORIZATION is not set"
        ),
        "{stderr}"
    );
}
