//! Both provider clients against the scripted server: streaming text and tool calls,
//! usage, retries (429 with retry-after, overload), non-retryable errors, cancellation.

use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use saint_llm::{
    CancellationToken, ChatRequest, ClientOptions, ContentBlock, Endpoint, LlmClient, LlmError,
    Message, Provider, StopReason, StreamEvent, ToolSpec, Usage,
};
use saint_scripted::llm::{Reply, ScriptedLlm, Wire};
use serde_json::json;

fn request() -> ChatRequest {
    ChatRequest {
        model: "model-a".into(),
        system: "You are terse.".into(),
        messages: vec![Message::user_text("hello")],
        tools: vec![ToolSpec {
            name: "web_fetch".into(),
            description: "fetch a page".into(),
            input_schema: json!({"type": "object", "properties": {"url": {"type": "string"}}}),
        }],
        max_tokens: 256,
    }
}

fn client(server: &ScriptedLlm, provider: Provider) -> LlmClient {
    let options = ClientOptions {
        min_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(20),
        max_retries: 3,
        ..ClientOptions::default()
    };
    let endpoint = Endpoint {
        provider,
        base_url: server.base_url(),
        api_key: Some("sk-test-key".into()),
    };
    LlmClient::new(endpoint, options).unwrap()
}

async fn run(client: &LlmClient) -> (Result<saint_llm::ChatResponse, LlmError>, Vec<StreamEvent>) {
    let mut events = Vec::new();
    let result = client
        .complete(&request(), &CancellationToken::new(), &mut |event| {
            events.push(event)
        })
        .await;
    (result, events)
}

#[tokio::test]
async fn both_wire_formats_stream_text_with_usage() {
    for provider in [Provider::Anthropic, Provider::Openai] {
        let server = ScriptedLlm::start().await.unwrap();
        server.push(Reply::text("Hello there, friend.").with_usage(42, 7));
        let (result, events) = run(&client(&server, provider)).await;
        let response = result.unwrap();
        assert_eq!(
            response.message.text(),
            "Hello there, friend.",
            "{provider:?}"
        );
        assert_eq!(
            response.usage,
            Usage {
                input_tokens: 42,
                output_tokens: 7
            },
            "{provider:?}"
        );
        assert_eq!(response.stop_reason, StopReason::EndTurn);
        let streamed: String = events
            .iter()
            .filter_map(|event| match event {
                StreamEvent::TextDelta(text) => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(streamed, "Hello there, friend.");
        assert!(
            events.len() > 1,
            "text arrives in several deltas: {events:?}"
        );
        let recorded = &server.requests()[0];
        assert_eq!(
            recorded.wire,
            if provider == Provider::Anthropic {
                Wire::Anthropic
            } else {
                Wire::Openai
            }
        );
        assert_eq!(recorded.model(), "model-a");
        assert_eq!(recorded.system(), "You are terse.");
        assert_eq!(recorded.tool_names(), vec!["web_fetch".to_string()]);
        let key_header = match provider {
            Provider::Anthropic => recorded.headers["x-api-key"].to_str().unwrap().to_string(),
            Provider::Openai => recorded.headers["authorization"]
                .to_str()
                .unwrap()
                .to_string(),
        };
        assert!(key_header.ends_with("sk-test-key"), "{key_header}");
    }
}

#[tokio::test]
async fn both_wire_formats_stream_tool_calls_with_split_input_json() {
    for provider in [Provider::Anthropic, Provider::Openai] {
        let server = ScriptedLlm::start().await.unwrap();
        server.push(
            Reply::tool_calls(vec![
                ("web_fetch".into(), json!({"url": "https://example.com/a"})),
                (
                    "web_fetch".into(),
                    json!({"url": "https://example.com/b", "maxChars": 100}),
                ),
            ])
            .with_text("Checking."),
        );
        let (result, events) = run(&client(&server, provider)).await;
        let response = result.unwrap();
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(response.message.text(), "Checking.");
        let calls: Vec<_> = response
            .message
            .tool_uses()
            .map(|(_, name, input)| (name.to_string(), input.clone()))
            .collect();
        assert_eq!(
            calls,
            vec![
                (
                    "web_fetch".to_string(),
                    json!({"url": "https://example.com/a"})
                ),
                (
                    "web_fetch".to_string(),
                    json!({"url": "https://example.com/b", "maxChars": 100})
                ),
            ]
        );
        let ids: Vec<_> = response
            .message
            .tool_uses()
            .map(|(id, _, _)| id.to_string())
            .collect();
        assert_ne!(ids[0], ids[1]);
        let started = events
            .iter()
            .filter(|event| matches!(event, StreamEvent::ToolCallStarted { .. }))
            .count();
        assert_eq!(started, 2, "{provider:?}");
    }
}

#[tokio::test]
async fn tool_results_round_trip_with_error_flag() {
    for provider in [Provider::Anthropic, Provider::Openai] {
        let server = ScriptedLlm::start().await.unwrap();
        server.push(Reply::text("ok"));
        let mut chat = request();
        chat.messages.push(Message {
            role: saint_llm::ChatRole::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: "t1".into(),
                name: "web_fetch".into(),
                input: json!({}),
            }],
        });
        chat.messages.push(Message {
            role: saint_llm::ChatRole::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: "t1".into(),
                content: "permission denied: no".into(),
                is_error: true,
            }],
        });
        client(&server, provider)
            .complete(&chat, &CancellationToken::new(), &mut |_| {})
            .await
            .unwrap();
        let results = server.requests()[0].tool_results();
        assert_eq!(results.len(), 1);
        assert!(results[0].1, "{provider:?}: error flag lost: {results:?}");
        assert!(results[0].0.contains("permission denied: no"));
    }
}

#[tokio::test]
async fn rate_limit_is_retried_after_the_server_requested_delay() {
    let server = ScriptedLlm::start().await.unwrap();
    server.push(Reply::rate_limited(1));
    server.push(Reply::text("after the wait"));
    let started = Instant::now();
    let (result, _) = run(&client(&server, Provider::Anthropic)).await;
    assert_eq!(result.unwrap().message.text(), "after the wait");
    assert_eq!(server.request_count(), 2);
    // The backoff schedule alone is ≤ 20 ms here, so only retry-after explains a 1 s wait.
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "retry-after ignored: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn overload_and_server_errors_are_retried_on_both_wires() {
    for provider in [Provider::Anthropic, Provider::Openai] {
        let server = ScriptedLlm::start().await.unwrap();
        server.push(Reply::overloaded());
        server.push(Reply::failure(500, None, "api_error", "boom"));
        server.push(Reply::text("finally"));
        let (result, _) = run(&client(&server, provider)).await;
        assert_eq!(result.unwrap().message.text(), "finally");
        assert_eq!(server.request_count(), 3);
    }
}

#[tokio::test]
async fn retries_give_up_after_the_configured_count() {
    let server = ScriptedLlm::start().await.unwrap();
    server.set_fallback(Reply::overloaded());
    let (result, _) = run(&client(&server, Provider::Anthropic)).await;
    match result {
        Err(LlmError::Status { status: 529, .. }) => {}
        other => panic!("expected a 529 error, got {other:?}"),
    }
    assert_eq!(server.request_count(), 4, "one attempt plus three retries");
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let server = ScriptedLlm::start().await.unwrap();
    server.push(Reply::failure(400, None, "invalid_request_error", "bad"));
    server.push(Reply::text("never"));
    let (result, _) = run(&client(&server, Provider::Openai)).await;
    assert!(
        matches!(result, Err(LlmError::Status { status: 400, .. })),
        "{result:?}"
    );
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn cancellation_stops_a_slow_call() {
    let server = ScriptedLlm::start().await.unwrap();
    server.push(Reply::text("slow").with_delay(Duration::from_secs(30)));
    let client = client(&server, Provider::Anthropic);
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.cancel();
    });
    let result = client.complete(&request(), &cancel, &mut |_| {}).await;
    assert!(matches!(result, Err(LlmError::Cancelled)), "{result:?}");
}

#[tokio::test]
async fn idle_stream_times_out() {
    let server = ScriptedLlm::start().await.unwrap();
    server.set_fallback(Reply::text("a b c d e f").with_chunk_delay(Duration::from_secs(5)));
    let endpoint = Endpoint {
        provider: Provider::Openai,
        base_url: server.base_url(),
        api_key: None,
    };
    let options = ClientOptions {
        idle_timeout: Duration::from_millis(100),
        max_retries: 0,
        ..ClientOptions::default()
    };
    let client = LlmClient::new(endpoint, options).unwrap();
    let result = client
        .complete(&request(), &CancellationToken::new(), &mut |_| {})
        .await;
    assert!(matches!(result, Err(LlmError::Timeout(_))), "{result:?}");
}
